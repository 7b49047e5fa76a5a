package router

import (
	"sync"
	"time"
)

// The reasons a routing decision gives (the reason label of
// kvasir:router_routing_decisions_total).
const (
	ReasonCacheHit   = "cache_hit"   // the instance holding the longest cached prefix
	ReasonSession    = "session"     // the session's instance, without a cached prefix
	ReasonLeastLoad  = "least_load"  // the least loaded instance
	ReasonImbalance  = "imbalance"   // the least loaded, the cache holder being too busy
	ReasonRoundRobin = "round_robin" // the next instance in turn
	ReasonRandom     = "random"      // an instance drawn at random
)

// target is what a routing decision knows of a request.
type target struct {
	hashes  []string // the prompt's block hashes (nil: unknown)
	session string   // "" when the request names no session
}

// pick chooses a healthy backend not in exclude for t, with the reason, or nil when none is
// left. Under PolicyCacheAware it also records the choice: the session's instance and the
// prefix predicted there.
func (r *Router) pick(t target, exclude map[*backend]bool) (*backend, string) {
	var live []*backend
	for _, b := range r.backends {
		if b.healthy.Load() && !exclude[b] {
			live = append(live, b)
		}
	}
	if len(live) == 0 {
		return nil, ""
	}
	r.mu.Lock()
	start := r.rr % len(live)
	r.rr++
	draw := r.rng.IntN(len(live))
	r.mu.Unlock()
	switch r.cfg.Policy {
	case PolicyRoundRobin:
		return live[start], ReasonRoundRobin
	case PolicyRandom:
		return live[draw], ReasonRandom
	}
	// Loads, and the least loaded backend, ties broken in turn from start.
	loads := make(map[*backend]float64, len(live))
	var least *backend
	for i := range live {
		b := live[(start+i)%len(live)]
		loads[b] = b.load()
		if least == nil || loads[b] < loads[least] {
			least = b
		}
	}
	if r.cfg.Policy == PolicyLeastLoad {
		return least, ReasonLeastLoad
	}
	slack := float64(r.cfg.BalanceSlack)
	now := time.Now()
	var best *backend
	bestMatch := 0
	for i := range live {
		b := live[(start+i)%len(live)]
		b.mu.Lock()
		m := b.cache.match(t.hashes, now)
		b.mu.Unlock()
		if m > bestMatch || (m == bestMatch && m > 0 && loads[b] < loads[best]) {
			best, bestMatch = b, m
		}
	}
	choice, reason := least, ReasonLeastLoad
	switch {
	case best != nil && loads[best]-loads[least] <= slack:
		choice, reason = best, ReasonCacheHit
	case best != nil:
		reason = ReasonImbalance
	case t.session != "":
		s := r.sessions.get(t.session)
		if l, live := loads[s]; live && l-loads[least] <= slack {
			choice, reason = s, ReasonSession
		}
	}
	if t.session != "" {
		r.sessions.put(t.session, choice)
	}
	choice.mu.Lock()
	choice.cache.predict(t.hashes, now.Add(r.cfg.PredictionTTL))
	choice.mu.Unlock()
	return choice, reason
}

// maxSessions bounds the session table; past it, the table starts afresh.
const maxSessions = 1 << 16

// sessions maps a session key (the user field, or the X-Session-ID header) to the backend
// that served it last.
type sessions struct {
	mu sync.Mutex
	m  map[string]*backend
}

func (s *sessions) get(key string) *backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

func (s *sessions) put(key string, b *backend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= maxSessions {
		clear(s.m)
	}
	s.m[key] = b
}
