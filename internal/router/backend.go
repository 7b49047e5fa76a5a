package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// backend is one kvasir serve instance as the router sees it.
type backend struct {
	url  *url.URL
	name string // the URL, as metrics label it

	healthy  atomic.Bool
	inflight atomic.Int64 // requests the router has in flight there

	mu      sync.Mutex
	fails   int     // consecutive failed health checks
	queued  float64 // num_requests_running + num_requests_waiting, from /metrics
	kvUsage float64 // kv_cache_usage_perc, from /metrics
	cache   prefixSet
	kvAddr  string // a decode instance's KV transfer address (disaggregation)
	// isPrefill marks a prefill instance (disaggregation), which takes no requests itself.
	isPrefill bool
}

func newBackend(u *url.URL) *backend {
	return &backend{url: u, name: u.String(), cache: prefixSet{held: map[string]struct{}{}, predicted: map[string]time.Time{}}}
}

// load is the backend's queue depth: the router's own requests in flight there or what the
// instance reports running and waiting, whichever is larger, plus its KV usage as a
// tie-breaker (a fraction, below one request).
func (b *backend) load() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(float64(b.inflight.Load()), b.queued) + b.kvUsage
}

// markDown takes the backend out of rotation until a health check succeeds.
func (b *backend) markDown() {
	b.healthy.Store(false)
}

// endpoint is the backend's URL for path (with an optional query).
func (b *backend) endpoint(path string) string { return b.url.String() + path }

// healthFailures is how many health checks in a row must fail before a backend is marked
// down (a failed proxied request marks it down at once).
const healthFailures = 2

// poll reads b's health, load and cache events every PollInterval until the router closes.
func (r *Router) poll(b *backend) {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		r.pollOnce(b)
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollOnce runs one round of checks on b.
func (r *Router) pollOnce(b *backend) {
	ctx, cancel := context.WithTimeout(r.ctx, max(r.cfg.PollInterval, time.Second))
	defer cancel()
	err := r.get(ctx, b, "/health", nil)
	b.mu.Lock()
	if err != nil {
		b.fails++
	} else {
		b.fails = 0
	}
	fails := b.fails
	b.mu.Unlock()
	switch {
	case err == nil && !b.healthy.Load():
		b.healthy.Store(true)
		r.log.Info("backend up", "backend", b.name)
	case err != nil && fails >= healthFailures && b.healthy.Load():
		b.markDown()
		r.log.Warn("backend down", "backend", b.name, "err", err)
	}
	if err != nil {
		return
	}
	if err := r.readLoad(ctx, b); err != nil {
		r.log.Debug("backend metrics", "backend", b.name, "err", err)
	}
	if err := r.readEvents(ctx, b); err != nil {
		r.log.Debug("backend kv events", "backend", b.name, "err", err)
	}
	if len(r.prefills) > 0 && b.transferAddr() == "" && !b.isPrefill {
		if err := r.readTransferInfo(ctx, b); err != nil {
			r.log.Warn("decode instance", "backend", b.name, "err", err)
		}
	}
}

// get fetches path from b; with into set, it receives the body.
func (r *Router) get(ctx context.Context, b *backend, path string, into func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.endpoint(path), nil)
	if err != nil {
		return err
	}
	r.backendAuth(req, nil)
	res, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
		return fmt.Errorf("GET %s: status %d", path, res.StatusCode)
	}
	if into == nil {
		_, err = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
		return err
	}
	return into(res.Body)
}

// The instance metrics the router reads its load from.
const (
	metricRunning = "kvasir:num_requests_running"
	metricWaiting = "kvasir:num_requests_waiting"
	metricKVUsage = "kvasir:kv_cache_usage_perc"
)

// readLoad reads b's queue depth and KV usage from its Prometheus metrics.
func (r *Router) readLoad(ctx context.Context, b *backend) error {
	return r.get(ctx, b, "/metrics", func(body io.Reader) error {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(io.LimitReader(body, 8<<20))
		if err != nil {
			return err
		}
		gauge := func(name string) float64 {
			var sum float64
			if f := fams[name]; f != nil {
				for _, m := range f.GetMetric() {
					sum += m.GetGauge().GetValue()
				}
			}
			return sum
		}
		b.mu.Lock()
		b.queued = gauge(metricRunning) + gauge(metricWaiting)
		b.kvUsage = gauge(metricKVUsage)
		b.mu.Unlock()
		return nil
	})
}

// kvEvents is the body of an instance's GET /v1/kv_events (see the server's
// kvEventsResponse).
type kvEvents struct {
	Epoch    string   `json:"epoch"`
	Seq      uint64   `json:"seq"`
	Snapshot bool     `json:"snapshot"`
	Hashes   []string `json:"hashes"`
	Events   []struct {
		Type string `json:"type"`
		Hash string `json:"hash"`
	} `json:"events"`
}

// readEvents brings the mirror of b's prefix cache up to date.
func (r *Router) readEvents(ctx context.Context, b *backend) error {
	b.mu.Lock()
	q := url.Values{"epoch": {b.cache.epoch}, "after": {strconv.FormatUint(b.cache.seq, 10)}}
	b.mu.Unlock()
	return r.get(ctx, b, "/v1/kv_events?"+q.Encode(), func(body io.Reader) error {
		var ev kvEvents
		if err := json.NewDecoder(io.LimitReader(body, 64<<20)).Decode(&ev); err != nil {
			return fmt.Errorf("kv events: %w", err)
		}
		b.mu.Lock()
		b.cache.apply(&ev, time.Now())
		b.mu.Unlock()
		return nil
	})
}

// prefixSet mirrors one instance's prefix cache: the block hashes its events say it holds,
// and those of prompts the router sent it that its events have not confirmed yet (so that
// a burst of requests sharing a new prefix follows the first one before the events come).
// The backend's mu guards it.
type prefixSet struct {
	epoch     string
	seq       uint64
	held      map[string]struct{}
	predicted map[string]time.Time // hash -> when the prediction expires
}

// apply brings the set up to date with an events response.
func (p *prefixSet) apply(ev *kvEvents, now time.Time) {
	if ev.Snapshot {
		clear(p.held)
		for _, h := range ev.Hashes {
			p.held[h] = struct{}{}
		}
	}
	for _, e := range ev.Events {
		switch e.Type {
		case "stored":
			p.held[e.Hash] = struct{}{}
			delete(p.predicted, e.Hash)
		case "removed":
			delete(p.held, e.Hash)
			delete(p.predicted, e.Hash)
		}
	}
	for h, exp := range p.predicted {
		if now.After(exp) {
			delete(p.predicted, h)
		}
	}
	p.epoch, p.seq = ev.Epoch, ev.Seq
}

// match counts the leading hashes the instance holds (or is predicted to hold).
func (p *prefixSet) match(hashes []string, now time.Time) int {
	for i, h := range hashes {
		if _, ok := p.held[h]; ok {
			continue
		}
		if exp, ok := p.predicted[h]; ok && now.Before(exp) {
			continue
		}
		return i
	}
	return len(hashes)
}

// predict records that a prompt with these hashes was sent to the instance.
func (p *prefixSet) predict(hashes []string, until time.Time) {
	for _, h := range hashes {
		if _, ok := p.held[h]; !ok {
			p.predicted[h] = until
		}
	}
}

// size is the number of hashes the set holds, predictions included.
func (p *prefixSet) size() int { return len(p.held) + len(p.predicted) }
