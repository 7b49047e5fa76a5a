package kvcache

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePolicySpec(t *testing.T) {
	for _, c := range []struct {
		in   string
		want PolicySpec
	}{
		{"full", PolicySpec{Name: "full", BudgetTokens: Unset, SinkTokens: Unset, WindowTokens: Unset}},
		{"streaming:budget_tokens=64,sink_tokens=0", PolicySpec{Name: "streaming", BudgetTokens: 64, SinkTokens: 0, WindowTokens: Unset}},
		{" streaming : window_tokens = 60 ", PolicySpec{Name: "streaming", BudgetTokens: Unset, SinkTokens: Unset, WindowTokens: 60}},
		{"h2o:selection=head,budget_tokens=96", PolicySpec{Name: "h2o", BudgetTokens: 96, SinkTokens: Unset, WindowTokens: Unset, Selection: SelectHead}},
	} {
		got, err := ParsePolicySpec(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParsePolicySpec(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		again, err := ParsePolicySpec(got.String())
		if err != nil || again != got {
			t.Errorf("%q does not read back: %+v, %v", got.String(), again, err)
		}
	}
	for _, in := range []string{"", ":budget_tokens=4", "streaming:budget_tokens=1.5", "streaming:budget_tokens=-4",
		"streaming:budget=64", "streaming:budget_tokens", "streaming:,", "h2o:selection=token"} {
		if _, err := ParsePolicySpec(in); err == nil {
			t.Errorf("ParsePolicySpec(%q) took it", in)
		}
	}
}

func TestNewPolicy(t *testing.T) {
	spec := func(s string) PolicySpec {
		p, err := ParsePolicySpec(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ in, err string }{
		{"h2o_typo", "unknown kv policy"},
		{"h2o:budget_tokens=64,window_tokens=48", "too few"},
		{"snapkv:budget_tokens=64,window_tokens=64,sink_tokens=4", "below sink_tokens"},
		{"full:budget_tokens=64", "takes no"},
		{"streaming:budget_tokens=64,sink_tokens=4,window_tokens=61", "below sink_tokens 4 + window_tokens 61"},
		{"streaming:budget_tokens=40,sink_tokens=4", "too few"},
		{"streaming:selection=head", "takes no selection"},
		{"full:selection=layer", "takes no"},
	} {
		if _, err := NewPolicy(spec(c.in), 16); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want one saying %q", c.in, err, c.err)
		}
	}
	p, err := NewPolicy(spec("streaming:window_tokens=60"), 16)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Spec(); got.BudgetTokens != 64 || got.SinkTokens != DefaultSinkTokens || got.WindowTokens != 60 {
		t.Errorf("defaults: %+v", got)
	}
	// A request's unset keys take the server's when it names the same policy.
	server := spec("streaming:budget_tokens=128,sink_tokens=8")
	if got := spec("streaming:budget_tokens=64").Over(server); got.SinkTokens != 8 || got.BudgetTokens != 64 {
		t.Errorf("over the server's: %+v", got)
	}
	if got := (PolicySpec{BudgetTokens: 96, SinkTokens: Unset, WindowTokens: Unset}).Over(server); got.Name != "streaming" || got.BudgetTokens != 96 || got.SinkTokens != 8 {
		t.Errorf("unnamed over the server's: %+v", got)
	}
	if got := FullSpec().Over(server); got != FullSpec() {
		t.Errorf("full over streaming: %+v", got)
	}
	h2oServer := spec("h2o:selection=layer")
	if got := spec("h2o:budget_tokens=96").Over(h2oServer); got.Selection != SelectLayer {
		t.Errorf("h2o over the server's h2o: selection %q, want the server's layer", got.Selection)
	}
	if got := spec("h2o:selection=head").Over(h2oServer); got.Selection != SelectHead {
		t.Errorf("h2o asking for head over the server's layer: %q", got.Selection)
	}
	for sel, want := range map[string]string{"": SelectSequence, SelectLayer: SelectLayer, SelectHead: SelectHead} {
		p, err := NewPolicy(PolicySpec{Name: PolicySnapKV, BudgetTokens: 64, SinkTokens: Unset, WindowTokens: Unset, Selection: sel}, 16)
		if err != nil || p.Spec().Selection != want {
			t.Errorf("snapkv selection %q: %v, %v; want %s", sel, p, err, want)
		}
	}
}

// The streaming plan keeps a sequence within its budget and its sinks whatever it is
// asked, drops only full window blocks, and always lets a step progress.
func TestStreamingPlan(t *testing.T) {
	const bs = 4
	p, err := NewPolicy(PolicySpec{Name: PolicyStreaming, BudgetTokens: 22, SinkTokens: 5, WindowTokens: Unset}, bs)
	if err != nil {
		t.Fatal(err)
	}
	const maxBlocks, sinkBlocks = 5, 2
	for _, want := range []int{1, 3, 4, 7, 100} {
		cached := 0
		for range 200 {
			d, room := p.Plan(cached, want, nil)
			from, n := d.From, d.N
			if room < 1 || room > want {
				t.Fatalf("want %d, cached %d: room %d", want, cached, room)
			}
			if n > 0 && (from != sinkBlocks || from+n > cached/bs) {
				t.Fatalf("want %d, cached %d: drops blocks [%d, %d)", want, cached, from, from+n)
			}
			cached += room - n*bs
			if blocks := (cached + bs - 1) / bs; blocks > maxBlocks {
				t.Fatalf("want %d: %d blocks held, budget %d", want, blocks, maxBlocks)
			}
		}
		if cached < (maxBlocks-1)*bs {
			t.Errorf("want %d: only %d tokens held in the end", want, cached)
		}
	}
}

// Drop closes the gap and releases the blocks; Privatize copies shared blocks and takes
// the rest out of the prefix cache.
func TestDropAndPrivatize(t *testing.T) {
	m := newTestManager(t, Config{NumBlocks: 16, BlockSize: 4})
	toks := seqTokens(1, 20)
	admit(t, m, "a", toks, "")
	if err := m.Fork("a", "b"); err != nil {
		t.Fatal(err)
	}
	before := m.BlockTable("a")
	if err := m.Drop("a", 1, 2); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, m)
	if got, want := m.BlockTable("a"), append(slices.Clone(before[:1]), before[3:]...); !slices.Equal(got, want) {
		t.Fatalf("after the drop: %v, want %v", got, want)
	}
	ok, err := m.Privatize("a", 1)
	if err != nil || !ok {
		t.Fatalf("privatize: %v %v", ok, err)
	}
	mustCheck(t, m)
	got := m.BlockTable("a")
	if got[0] != before[0] {
		t.Errorf("block 0 (not asked) changed")
	}
	copies := m.TakeCopies()
	if len(copies) != 2 || copies[0].Src != before[3] || copies[1].Src != before[4] {
		t.Errorf("copies %v for shared blocks %v", copies, before[3:])
	}
	for _, b := range got[1:] {
		if slices.Contains(m.BlockTable("b"), b) {
			t.Errorf("block %d still shared after privatize", b)
		}
	}
	if err := m.Drop("a", 1, 5); err == nil {
		t.Error("a drop past the table was taken")
	}
	m.Free("a")
	m.Free("b")
	mustCheck(t, m)
	if m.NumFreeBlocks() != 15 {
		t.Errorf("%d blocks free, want 15", m.NumFreeBlocks())
	}
}

func FuzzParsePolicySpec(f *testing.F) {
	for _, s := range []string{"full", "streaming:budget_tokens=64,sink_tokens=4,window_tokens=60", "x:a=1", "streaming:budget_tokens=99999999999999999999", "snapkv:selection=head,budget_tokens=64"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParsePolicySpec(s)
		if err != nil {
			return
		}
		again, err := ParsePolicySpec(spec.String())
		if err != nil || again != spec {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, spec, spec.String(), again, err)
		}
		if p, err := NewPolicy(spec, 16); err == nil && p.Drops() {
			cached := 0
			for range 50 {
				d, room := p.Plan(cached, 17, nil)
				n := d.N
				if room < 1 {
					t.Fatalf("%s: no room at %d cached", spec, cached)
				}
				cached += room - n*16
				if cached > p.Spec().BudgetTokens {
					t.Fatalf("%s: %d tokens held", spec, cached)
				}
			}
		}
	})
}

// h2o and snapkv evict the block's worth of tokens with the least mass outside the sink
// tokens and the recent window (the oldest among equals), and only when the budget is
// full; snapkv ranks by the mass max-pooled over neighbours.
func TestHeavyHittersPlan(t *testing.T) {
	const bs = 4
	p, err := NewPolicy(PolicySpec{Name: PolicyH2O, BudgetTokens: 24, SinkTokens: 2, WindowTokens: 5}, bs)
	if err != nil {
		t.Fatal(err)
	}
	mass := make([]float32, 24)
	for j := range mass {
		mass[j] = 1
	}
	mass[0], mass[1] = 0, 0                              // sinks stay
	mass[19], mass[23] = 0, 0                            // the recent window (19..23) stays
	mass[3], mass[8], mass[9], mass[15] = .5, .1, .2, .3 // the four least outside them
	d, room := p.Plan(24, 1, [][]float32{mass})
	if len(d.Evict) != 1 || !slices.Equal(d.Evict[0], []int{3, 8, 9, 15}) || d.From != 0 || d.N != 1 || room != 1 {
		t.Errorf("full budget: %+v, room %d; want tokens 3 8 9 15 from block 0, room 1", d, room)
	}
	if d, room := p.Plan(20, 3, [][]float32{mass[:20]}); d.N != 0 || room != 3 {
		t.Errorf("room left: %+v, room %d", d, room)
	}
	if d, _ := p.Plan(24, 1, nil); len(d.Evict) != 1 || !slices.Equal(d.Evict[0], []int{2, 3, 4, 5}) {
		t.Errorf("no mass: evicts %v, want the oldest outside the sinks (2..5)", d.Evict)
	}
	// Per lane (layer and KV head): each lane evicts its own least attended tokens, and
	// the drop starts at the block of the earliest of them.
	late := make([]float32, 24)
	for j := range late {
		late[j] = 1
	}
	late[12], late[13], late[16], late[17] = 0, 0, 0, 0
	d, _ = p.Plan(24, 1, [][]float32{late, mass})
	if len(d.Evict) != 2 || !slices.Equal(d.Evict[0], []int{12, 13, 16, 17}) || !slices.Equal(d.Evict[1], []int{3, 8, 9, 15}) || d.From != 0 || d.N != 1 {
		t.Errorf("two lanes: %+v; want 12 13 16 17 and 3 8 9 15 from block 0", d)
	}
	if d, _ = p.Plan(24, 1, [][]float32{late, late}); d.From != 3 {
		t.Errorf("two lanes evicting from token 12 on: the drop starts at block %d, want 3", d.From)
	}
	sk, err := NewPolicy(PolicySpec{Name: PolicySnapKV, BudgetTokens: 24, SinkTokens: 2, WindowTokens: 5}, bs)
	if err != nil {
		t.Fatal(err)
	}
	// Pooled over 7 neighbours, the peak at 10 lifts 7..13: the least are the oldest
	// outside that span.
	pool := make([]float32, 24)
	pool[10] = 9
	if d, _ := sk.Plan(24, 1, [][]float32{pool}); !slices.Equal(d.Evict[0], []int{2, 3, 4, 5}) {
		t.Errorf("snapkv pooled: evicts %v", d.Evict)
	}
	pool[2], pool[3], pool[4], pool[5] = 1, 1, 1, 1
	if d, _ := sk.Plan(24, 1, [][]float32{pool}); !slices.Equal(d.Evict[0], []int{14, 15, 16, 17}) {
		t.Errorf("snapkv pooled: evicts %v, want 14..17 (2..5 have mass, 7..13 sit near the peak)", d.Evict)
	}
	if asks, w := p.MassWindow(); !asks || w != 0 {
		t.Errorf("h2o mass window %v %d", asks, w)
	}
	s, err := NewPolicy(PolicySpec{Name: PolicySnapKV, BudgetTokens: 64, SinkTokens: 4, WindowTokens: Unset}, 16)
	if err != nil {
		t.Fatal(err)
	}
	// 3 full blocks less the sinks and a block of candidates leave 28.
	if asks, w := s.MassWindow(); !asks || w != 28 || s.Spec().WindowTokens != 28 {
		t.Errorf("snapkv at 64: mass window %v %d, spec %+v", asks, w, s.Spec())
	}
}
