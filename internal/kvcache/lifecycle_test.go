package kvcache

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"testing"
)

// The randomized lifecycle test drives a Manager the way the scheduler and runner will, and
// checks it two ways after every call: Check (the Manager's own invariants) and a simulated
// KV store. Each token slot of each physical block holds a fingerprint of the request's salt
// and every token up to that position (what real K/V depends on), written through the block
// table; every request's computed positions are read back through its block table after
// every step. A wrong prefix hit (other salt or prefix), a missing copy-on-write, a block
// evicted or reused while still held, or a copy applied in the wrong order shows up as a
// fingerprint mismatch.

// simReq is a request as the simulated scheduler sees it.
type simReq struct {
	id          RequestID
	salt        string
	tokens      []int32
	fp          []uint64 // fp[p] fingerprints salt and tokens[:p+1]
	numComputed int
	drafts      int // speculative tokens at the end of tokens, this step only
	maxLen      int
}

func fpSeed(salt string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(salt))
	return h.Sum64() | 1
}

func fpNext(prev uint64, tok int32) uint64 {
	x := prev ^ (uint64(uint32(tok))+1)*0x9E3779B97F4A7C15
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	return x
}

// push appends a token and its fingerprint.
func (r *simReq) push(tok int32) {
	prev := fpSeed(r.salt)
	if n := len(r.fp); n > 0 {
		prev = r.fp[n-1]
	}
	r.tokens = append(r.tokens, tok)
	r.fp = append(r.fp, fpNext(prev, tok))
}

// cut drops tokens past n.
func (r *simReq) cut(n int) {
	r.tokens = r.tokens[:n]
	r.fp = r.fp[:n]
}

type lifecycleCounts struct {
	steps, admitted, hitTokens, copies, preempts, forks, rollbacks, aborts, finished, specSteps int
}

type lifecycle struct {
	t        *testing.T
	m        *Manager
	rng      *rand.Rand
	bs       int
	kv       [][]uint64
	prefixes [][]int32
	waiting  []*simReq
	running  []*simReq
	nextID   int
	done     int
	n        lifecycleCounts
}

func (l *lifecycle) check(what string) {
	l.t.Helper()
	if err := l.m.Check(); err != nil {
		l.t.Fatalf("after %s (step %d): %v", what, l.n.steps, err)
	}
}

func (l *lifecycle) verify(what string) {
	l.t.Helper()
	for _, r := range l.running {
		table := l.m.BlockTable(r.id)
		if len(table)*l.bs < r.numComputed {
			l.t.Fatalf("after %s (step %d): %s has %d computed tokens but %d blocks", what, l.n.steps, r.id, r.numComputed, len(table))
		}
		for p := 0; p < r.numComputed; p++ {
			if got := l.kv[table[p/l.bs]][p%l.bs]; got != r.fp[p] {
				l.t.Fatalf("after %s (step %d): %s position %d (block %d): KV fingerprint %x, want %x", what, l.n.steps, r.id, p, table[p/l.bs], got, r.fp[p])
			}
		}
	}
	for _, r := range l.waiting {
		if l.m.HasRequest(r.id) {
			l.t.Fatalf("after %s: waiting request %s still holds blocks", what, r.id)
		}
	}
}

func (l *lifecycle) token() int32 { return int32(l.rng.IntN(6)) }

func (l *lifecycle) addRequest() {
	r := &simReq{id: RequestID(fmt.Sprintf("r%d", l.nextID)), salt: []string{"", "", "tenant-a", "tenant-b"}[l.rng.IntN(4)]}
	l.nextID++
	for _, t := range l.prefixes[l.rng.IntN(len(l.prefixes))] {
		r.push(t)
	}
	for range 1 + l.rng.IntN(24) {
		r.push(l.token())
	}
	r.maxLen = len(r.tokens) + 1 + l.rng.IntN(30)
	l.waiting = append(l.waiting, r)
}

// preempt frees r's blocks and puts it back at the head of the waiting queue.
func (l *lifecycle) preempt(r *simReq) {
	l.m.Free(r.id)
	l.check("preempt")
	r.cut(len(r.tokens) - r.drafts)
	r.drafts = 0
	r.numComputed = 0
	l.running = slices.DeleteFunc(l.running, func(x *simReq) bool { return x == r })
	l.waiting = slices.Insert(l.waiting, 0, r)
	l.n.preempts++
}

func (l *lifecycle) remove(r *simReq) {
	l.m.Free(r.id)
	l.check("free")
	l.running = slices.DeleteFunc(l.running, func(x *simReq) bool { return x == r })
	l.waiting = slices.DeleteFunc(l.waiting, func(x *simReq) bool { return x == r })
	l.done++
}

type scheduled struct {
	r       *simReq
	start   int
	numNew  int
	running bool
}

// step schedules a batch under a token budget, preempting the newest request when blocks
// run out, then applies the copy orders, writes the KV, and post-processes like the engine.
func (l *lifecycle) step() {
	l.n.steps++
	budget := 1 + l.rng.IntN(48)
	var batch []scheduled
	for i := 0; i < len(l.running) && budget > 0; i++ {
		r := l.running[i]
		n := min(len(r.tokens)-r.numComputed, 1+l.rng.IntN(3*l.bs), budget)
		if len(r.tokens)-r.numComputed == 1 && l.rng.IntN(4) == 0 {
			r.drafts = 1 + l.rng.IntN(3)
			for range r.drafts {
				r.push(l.token())
			}
			n = 1 + r.drafts
		}
		scheduledR := true
		for {
			ok, err := l.m.Allocate(r.id, Alloc{NumComputed: r.numComputed, NumNew: n})
			if err != nil {
				l.t.Fatalf("allocate %s: %v", r.id, err)
			}
			l.check("allocate")
			if ok {
				break
			}
			victim := l.running[len(l.running)-1]
			l.preempt(victim)
			if victim == r {
				scheduledR = false
				break
			}
		}
		if !scheduledR {
			break
		}
		batch = append(batch, scheduled{r: r, start: r.numComputed, numNew: n, running: true})
		budget -= n
	}
	for budget > 0 && len(l.waiting) > 0 && len(l.running) < 12 {
		r := l.waiting[0]
		hits, cached := l.m.GetComputedBlocks(r.tokens, r.salt)
		if cached%l.bs != 0 || cached > len(r.tokens)-1 || len(hits)*l.bs != cached {
			l.t.Fatalf("%s: %d cached tokens in %d hit blocks for %d tokens", r.id, cached, len(hits), len(r.tokens))
		}
		n := min(len(r.tokens)-cached, 1+l.rng.IntN(4*l.bs), budget)
		ok, err := l.m.Allocate(r.id, Alloc{NumComputed: cached, NumNew: n, Computed: hits, Salt: r.salt})
		if err != nil {
			l.t.Fatalf("allocate new %s: %v", r.id, err)
		}
		l.check("allocate new")
		if !ok {
			break
		}
		l.n.admitted++
		l.n.hitTokens += cached
		r.numComputed = cached
		l.waiting = l.waiting[1:]
		l.running = append(l.running, r)
		batch = append(batch, scheduled{r: r, start: cached, numNew: n})
		budget -= n
	}

	// The runner: copies first, then the forward pass writes KV by slot.
	for _, op := range l.m.TakeCopies() {
		copy(l.kv[op.Dst], l.kv[op.Src])
		l.n.copies++
	}
	for _, s := range batch {
		table := l.m.BlockTable(s.r.id)
		for p := s.start; p < s.start+s.numNew; p++ {
			l.kv[table[p/l.bs]][p%l.bs] = s.r.fp[p]
		}
	}

	// Post-process: accept drafts, sample, cache finalized blocks, finish.
	for _, s := range batch {
		r := s.r
		if r.drafts > 0 {
			l.n.specSteps++
			accepted := l.rng.IntN(r.drafts + 1)
			r.numComputed = s.start + 1 + accepted
			r.cut(r.numComputed)
			r.drafts = 0
			r.push(l.token())
			if l.rng.IntN(2) == 0 {
				if err := l.m.Truncate(r.id, r.numComputed); err != nil {
					l.t.Fatal(err)
				}
				l.check("truncate after speculation")
			}
		} else {
			r.numComputed += s.numNew
			if r.numComputed == len(r.tokens) {
				r.push(l.token())
			}
		}
		if err := l.m.CacheFullBlocks(r.id, r.tokens, r.numComputed); err != nil {
			l.t.Fatal(err)
		}
		l.check("cache full blocks")
		if len(r.tokens) >= r.maxLen {
			l.remove(r)
			l.n.finished++
		}
	}
	l.verify("step")
}

// event applies one random between-steps event: arrival, abort, preemption, fork, rollback.
func (l *lifecycle) event() {
	switch k := l.rng.IntN(20); {
	case k < 8:
		if len(l.waiting) < 10 {
			l.addRequest()
		}
	case k < 9:
		all := append(slices.Clone(l.running), l.waiting...)
		if len(all) > 0 {
			l.remove(all[l.rng.IntN(len(all))])
			l.n.aborts++
		}
	case k < 10:
		if len(l.running) > 0 {
			l.preempt(l.running[l.rng.IntN(len(l.running))])
		}
	case k < 14:
		// n > 1: fork a decode-ready request; the child samples a different token.
		if len(l.running) == 0 || len(l.running) >= 14 {
			return
		}
		p := l.running[l.rng.IntN(len(l.running))]
		if len(p.tokens)-p.numComputed != 1 {
			return
		}
		c := &simReq{id: RequestID(fmt.Sprintf("r%d", l.nextID)), salt: p.salt, maxLen: p.maxLen, numComputed: p.numComputed}
		l.nextID++
		for _, t := range p.tokens[:len(p.tokens)-1] {
			c.push(t)
		}
		c.push((p.tokens[len(p.tokens)-1] + 1 + int32(l.rng.IntN(5))) % 6)
		if err := l.m.Fork(p.id, c.id); err != nil {
			l.t.Fatal(err)
		}
		l.check("fork")
		l.running = append(l.running, c)
		l.n.forks++
	default:
		// Roll a request back to recompute from an earlier position.
		if len(l.running) == 0 || l.rng.IntN(3) != 0 {
			return
		}
		r := l.running[l.rng.IntN(len(l.running))]
		if r.numComputed == 0 {
			return
		}
		r.numComputed = l.rng.IntN(r.numComputed)
		if err := l.m.Truncate(r.id, r.numComputed); err != nil {
			l.t.Fatal(err)
		}
		l.check("rollback")
		l.n.rollbacks++
	}
	l.verify("event")
}

func TestLifecycleRandomized(t *testing.T) {
	cases := []struct {
		name      string
		numBlocks int
		blockSize int
		caching   bool
		requests  int
	}{
		{"bs4-prefix-caching", 80, 4, true, 3000},
		{"bs16-prefix-caching", 40, 16, true, 2000},
		{"bs1-prefix-caching", 300, 1, true, 600}, // no partial blocks: no copies
		{"bs4-no-prefix-caching", 80, 4, false, 1500},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, hits := runLifecycle(t, Config{NumBlocks: tc.numBlocks, BlockSize: tc.blockSize, DisablePrefixCaching: !tc.caching}, uint64(i)+1, tc.requests)
			// The workload must have exercised every path.
			if n.preempts == 0 || n.forks == 0 || (n.copies == 0 && tc.blockSize > 1) || n.rollbacks == 0 || n.specSteps == 0 || n.aborts == 0 || n.finished == 0 {
				t.Errorf("workload missed a path: %+v", n)
			}
			if tc.caching && hits == 0 {
				t.Errorf("prefix caching on but no hits")
			}
			if !tc.caching && hits != 0 {
				t.Errorf("prefix caching off but %d hit tokens", hits)
			}
		})
	}
}

// FuzzLifecycle runs short randomized lifecycles over fuzzed pool shapes and seeds.
func FuzzLifecycle(f *testing.F) {
	f.Add(uint64(1), uint8(20), uint8(4), true)
	f.Add(uint64(2), uint8(40), uint8(1), true)
	f.Add(uint64(3), uint8(12), uint8(16), false)
	f.Add(uint64(4), uint8(9), uint8(3), true)
	f.Fuzz(func(t *testing.T, seed uint64, blocks, blockSize uint8, caching bool) {
		bs := 1 + int(blockSize)%16
		// The longest request (64 prompt + 31 output tokens + 3 drafts) must fit alone.
		nb := max(int(blocks), 2+(98+bs-1)/bs)
		runLifecycle(t, Config{NumBlocks: nb, BlockSize: bs, DisablePrefixCaching: !caching}, seed, 40)
	})
}

// runLifecycle drives a Manager through a random workload until requests requests have
// finished or been aborted, then frees everything and checks nothing leaked. It returns the
// workload's counts and the prefix-cache hit tokens.
func runLifecycle(t *testing.T, cfg Config, seed uint64, requests int) (lifecycleCounts, int) {
	t.Helper()
	m := newTestManager(t, cfg)
	rng := rand.New(rand.NewPCG(seed, 42))
	l := &lifecycle{t: t, m: m, rng: rng, bs: m.BlockSize(), kv: make([][]uint64, cfg.NumBlocks)}
	for b := range l.kv {
		l.kv[b] = make([]uint64, l.bs)
	}
	for range 5 {
		p := make([]int32, rng.IntN(40))
		for j := range p {
			p[j] = int32(rng.IntN(6))
		}
		l.prefixes = append(l.prefixes, p)
	}
	for l.done < requests {
		if l.n.steps > 200*requests {
			t.Fatalf("no progress: %d steps for %d of %d requests (livelock?)", l.n.steps, l.done, requests)
		}
		for range 1 + rng.IntN(3) {
			l.event()
		}
		l.step()
	}
	for len(l.running) > 0 {
		l.remove(l.running[0])
	}
	if got, want := m.NumFreeBlocks(), cfg.NumBlocks-1; got != want {
		t.Errorf("after freeing everything: %d free blocks, want %d (leak)", got, want)
	}
	if u := m.Usage(); u != 0 {
		t.Errorf("after freeing everything: usage %v, want 0", u)
	}
	if m.NumRequests() != 0 {
		t.Errorf("after freeing everything: %d requests held", m.NumRequests())
	}
	if ops := m.TakeCopies(); len(ops) != 0 {
		t.Errorf("after freeing everything: %d copies still pending", len(ops))
	}
	l.check("the end")
	t.Logf("%+v prefix stats %+v", l.n, m.PrefixStats())
	return l.n, l.n.hitTokens
}
