package model

import "fmt"

// FirstLayers returns a view of m that runs only m's first n layers, then m's final norm
// and output projection: the draft of self-speculative decoding (layer skip). The view
// shares m's weights and backends (nothing is copied or uploaded) and runs on m's own KV
// cache: given a cache made by m, it writes and reads layers 0..n-1 of it, which hold the
// very keys and values m computes for those layers, and leaves the others alone. It has
// activation buffers of its own, so running it changes nothing of m but those cache
// entries; a graph-replaying backend tells its steps from m's (they have other buffers)
// and captures graphs of their own. Its Config reports n layers; a cache it makes itself
// (NewKVCache, NewSession) holds n layers.
//
// A view and m share backends, so they must not run at the same time. Closing a view does
// nothing; m must outlive it. n must be between 1 and m's layer count minus one. A
// pipeline-parallel model is refused (its first stage would hand the residual stream to
// stages the view does not run); a tensor-parallel one works, each rank running its slice
// of the first n layers.
func (m *Model) FirstLayers(n int) (*Model, error) {
	base := m
	if m.base != nil {
		base = m.base
	}
	layers := base.cfg.Layers
	if n < 1 || n >= layers {
		return nil, fmt.Errorf("model: first %d layers: want 1..%d (fewer than the model's %d)", n, layers-1, layers)
	}
	if base.par.Pipeline > 1 {
		return nil, fmt.Errorf("model: first %d layers of a model split into %d pipeline stages: not supported (run it unsplit or tensor-parallel)", n, base.par.Pipeline)
	}
	v := &Model{cfg: base.cfg, par: base.par, kvDT: base.kvDT, comms: base.comms, base: base}
	v.cfg.Layers = n
	for _, s := range base.ranks {
		w := *s.w
		w.layers = s.w.layers[:n]
		cfg := s.cfg
		cfg.Layers = n
		v.ranks = append(v.ranks, &shard{
			cfg: cfg, be: s.be, w: &w, experts: s.experts[:n], rope: s.rope, hostRope: s.hostRope, hostRopeLocal: s.hostRopeLocal, scale: s.scale,
			ropeLocal: s.ropeLocal, layer0: s.layer0,
			first: s.first, last: s.last, logits: s.logits, tp: s.tp, pp: s.pp, stage: s.stage,
			lora: s.lora, // a draft of the first layers takes the adapters' updates of those layers
		})
	}
	return v, nil
}

// cacheOwner reports whether kv's maker is m or, for a view, the model it views.
func (m *Model) cacheOwner(kv *KVCache) bool {
	return kv.m == m || (m.base != nil && kv.m == m.base)
}

// failed returns the error of an earlier split step that broke m (or the model m views,
// whose communicators it shares), nil when none did.
func (m *Model) failed() error {
	if m.broken != nil {
		return m.broken
	}
	if m.base != nil {
		return m.base.broken
	}
	return nil
}

// breakWith marks m (and the model it views, whose communicators were aborted with it) as
// broken by err.
func (m *Model) breakWith(err error) {
	m.broken = err
	if m.base != nil {
		m.base.broken = err
	}
}
