package model

import (
	"fmt"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// loraBank holds one projection's resident adapters on the backend (see backend.LoRAOps):
// a, [slots*maxRank][in], and b, [slots*maxRank][out] (B transposed).
type loraBank struct {
	a, b    backend.Tensor
	in, out int
}

// loraSlots is the device side of multi-LoRA serving: a fixed number of adapter slots of
// one rank bound in every projection of every layer, filled from the host copies of the
// adapters a step uses and emptied least recently used first (S-LoRA's unified paging, at
// the granularity of whole adapters). It is used on the forward goroutine only.
type loraSlots struct {
	maxRank  int
	banks    [][lora.NumTargets]loraBank // per layer
	resident []*lora.Adapter             // per slot; nil when empty
	ranks    []int32                     // per slot, for StepMeta.LoRARanks
	lastUse  []uint64                    // per slot: the step that last used it
	clock    uint64
	// pending are the slots the step being prepared fills before its layers run.
	pending []int
	// pageIns counts adapters copied in (paging traffic, for tests and figures).
	pageIns int
}

// EnableLoRA reserves room on the backend for slots adapters of rank up to maxRank in
// every projection of every layer (q, k, v, o, gate, up, down), so that a Batch's
// sequences may name adapters (Seq.Adapter). A step may use at most slots adapters; the
// slots hold the most recently used ones, and an adapter a step needs replaces the one
// used longest ago. It is called once, before the first Forward, on a model that is not
// split, whose backend implements backend.LoRAOps.
func (m *Model) EnableLoRA(slots, maxRank int) error {
	if m.base != nil {
		return fmt.Errorf("model: lora: enable it on the whole model, not a view of its first layers")
	}
	if len(m.ranks) != 1 {
		return fmt.Errorf("model: lora: not supported on a model split across %d ranks", len(m.ranks))
	}
	if m.cfg.MLA() {
		return fmt.Errorf("model: lora: not supported with multi-head latent attention (%s): its projections are absorbed", m.cfg.Arch)
	}
	if slots < 1 || maxRank < 1 {
		return fmt.Errorf("model: lora: %d slots of rank %d: want at least 1 of each", slots, maxRank)
	}
	s := m.ranks[0]
	if s.lora != nil {
		return fmt.Errorf("model: lora: already enabled")
	}
	if _, ok := s.be.(backend.LoRAOps); !ok {
		return fmt.Errorf("model: lora: the backend %s cannot apply adapters", s.be.Name())
	}
	ls := &loraSlots{maxRank: maxRank, banks: make([][lora.NumTargets]loraBank, s.cfg.Layers),
		resident: make([]*lora.Adapter, slots), ranks: make([]int32, slots), lastUse: make([]uint64, slots)}
	err := s.be.Run(func() error {
		for l := range ls.banks {
			for t := range lora.NumTargets {
				in, out := lora.Dims(s.cfg, t)
				a, err := s.be.NewTensor(quant.F32, slots*maxRank, in)
				if err != nil {
					return err
				}
				b, err := s.be.NewTensor(quant.F32, slots*maxRank, out)
				if err != nil {
					return err
				}
				ls.banks[l][t] = loraBank{a: a, b: b, in: in, out: out}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("model: lora: %d slots of rank %d: %w", slots, maxRank, err)
	}
	s.lora = ls
	// The activations gain the adapters' scratch rows at the next step.
	s.act.tokens, s.act.viewTokens = 0, -1
	return nil
}

// LoRASlots returns the number of adapter slots (0 without LoRA).
func (m *Model) LoRASlots() int {
	if s := m.ranks[0]; s.lora != nil {
		return len(s.lora.resident)
	}
	return 0
}

// LoRAPageIns returns how many times an adapter was copied into a slot.
func (m *Model) LoRAPageIns() int {
	if s := m.ranks[0]; s.lora != nil {
		return s.lora.pageIns
	}
	return 0
}

// checkAdapter verifies that a fits the slots: its rank and every pair's shape.
func (ls *loraSlots) checkAdapter(a *lora.Adapter) error {
	if a.Rank > ls.maxRank {
		return fmt.Errorf("adapter %q of rank %d: the slots hold rank %d (--max-lora-rank)", a.Name, a.Rank, ls.maxRank)
	}
	if len(a.Layers) != len(ls.banks) {
		return fmt.Errorf("adapter %q of %d layers for a model of %d", a.Name, len(a.Layers), len(ls.banks))
	}
	for l, pairs := range a.Layers {
		for t, p := range pairs {
			if p != nil && (p.In != ls.banks[l][t].in || p.Out != ls.banks[l][t].out || p.Rank > a.Rank) {
				return fmt.Errorf("adapter %q: layer %d %s maps %d to %d features, the model %d to %d", a.Name, l, lora.Target(t), p.In, p.Out, ls.banks[l][t].in, ls.banks[l][t].out)
			}
		}
	}
	return nil
}

// assign gives each sequence of the batch that names an adapter its slot, choosing slots
// to fill (recorded in pending) for adapters not resident, and writes the step's
// LoRASlots and LoRARanks into meta; a batch without adapters leaves them nil.
func (ls *loraSlots) assign(b *Batch, meta *backend.StepMeta) (err error) {
	meta.LoRASlots, meta.LoRARanks, ls.pending = meta.LoRASlots[:0], nil, ls.pending[:0]
	defer func() {
		if err != nil {
			// The slots chosen so far hold nothing of their new adapters yet.
			for _, s := range ls.pending {
				ls.resident[s], ls.ranks[s] = nil, 0
			}
			ls.pending = ls.pending[:0]
		}
	}()
	ls.clock++
	used := false
	// The resident adapters the step uses first, so that none of them is replaced by one
	// the step pages in.
	for _, q := range b.Seqs {
		if q.Adapter == nil {
			continue
		}
		used = true
		if s := ls.slotOf(q.Adapter); s >= 0 {
			ls.lastUse[s] = ls.clock
		}
	}
	for i, q := range b.Seqs {
		a := q.Adapter
		if a == nil {
			continue
		}
		slot := ls.slotOf(a)
		if slot < 0 {
			if err := ls.checkAdapter(a); err != nil {
				return fmt.Errorf("sequence %d: %w", i, err)
			}
			// The empty slot, or else the one used longest ago, of those this step
			// does not use.
			for s := range ls.resident {
				if ls.lastUse[s] == ls.clock {
					continue
				}
				if slot < 0 || ls.resident[s] == nil || (ls.resident[slot] != nil && ls.lastUse[s] < ls.lastUse[slot]) {
					slot = s
				}
			}
			if slot < 0 {
				return fmt.Errorf("sequence %d: the step uses more adapters than the %d slots (--max-loras)", i, len(ls.resident))
			}
			ls.resident[slot], ls.ranks[slot] = a, int32(a.Rank)
			ls.pending = append(ls.pending, slot)
		}
		ls.lastUse[slot] = ls.clock
	}
	if !used {
		meta.LoRASlots = nil
		return nil
	}
	for _, q := range b.Seqs {
		slot := int32(-1)
		if q.Adapter != nil {
			slot = int32(ls.slotOf(q.Adapter))
		}
		for range q.QueryLen {
			meta.LoRASlots = append(meta.LoRASlots, slot)
		}
	}
	meta.LoRARanks = ls.ranks
	return nil
}

// slotOf returns the slot holding a, or -1.
func (ls *loraSlots) slotOf(a *lora.Adapter) int {
	for s, r := range ls.resident {
		if r == a {
			return s
		}
	}
	return -1
}

// pageIn copies the adapters of the pending slots into the banks (inside Run): each
// projection's A and B, the scale folded into B, zeros where the adapter has no pair or a
// smaller rank. A slot whose copy fails is emptied.
func (ls *loraSlots) pageIn(be backend.Backend) error {
	ops := be.(backend.LoRAOps) // checked by EnableLoRA
	R := ls.maxRank
	for _, slot := range ls.pending {
		a := ls.resident[slot]
		for l := range ls.banks {
			for t := range lora.NumTargets {
				bank, p := ls.banks[l][t], a.Layers[l][t]
				av, bv := make([]float32, R*bank.in), make([]float32, R*bank.out)
				if p != nil {
					copy(av, p.A)
					for o := range p.Out {
						for r := range p.Rank {
							bv[r*bank.out+o] = p.Scale * p.B[o*p.Rank+r]
						}
					}
				}
				if err := ops.WriteRows(bank.a, slot*R, av); err != nil {
					ls.resident[slot], ls.ranks[slot] = nil, 0
					return fmt.Errorf("lora: page in %q: %w", a.Name, err)
				}
				if err := ops.WriteRows(bank.b, slot*R, bv); err != nil {
					ls.resident[slot], ls.ranks[slot] = nil, 0
					return fmt.Errorf("lora: page in %q: %w", a.Name, err)
				}
			}
		}
		ls.pageIns++
	}
	ls.pending = ls.pending[:0]
	return nil
}

// addLoRA adds the step's adapters' updates of layer l's projection t, whose input is x,
// to out (nothing when no token of the step has an adapter).
func (s *shard) addLoRA(l int, t lora.Target, out, x backend.Tensor, a *activations, st backend.Step) error {
	if s.lora == nil || s.meta.LoRASlots == nil {
		return nil
	}
	bank := s.lora.banks[l][t]
	if err := s.be.(backend.LoRAOps).LoRAMatMul(out, x, a.loraU, bank.a, bank.b, st); err != nil {
		return fmt.Errorf("lora %s: %w", t, err)
	}
	return nil
}

// addLoRAs adds the step's adapters' updates of layer l's projections ts, which all take x,
// to outs: in one call where the backend groups projections (backend.LoRAGroupOps), else
// one projection at a time.
func (s *shard) addLoRAs(l int, ts []lora.Target, outs []backend.Tensor, x backend.Tensor, a *activations, st backend.Step) error {
	if !s.stepLoRA() {
		return nil
	}
	if g, ok := s.be.(backend.LoRAGroupOps); ok && len(ts) > 1 && len(ts) <= g.LoRAGroupMax() {
		as, bs := make([]backend.Tensor, len(ts)), make([]backend.Tensor, len(ts))
		for i, t := range ts {
			as[i], bs[i] = s.lora.banks[l][t].a, s.lora.banks[l][t].b
		}
		if err := g.LoRAMatMulGroup(outs, x, a.loraU, as, bs, st); err != nil {
			return fmt.Errorf("lora %v: %w", ts, err)
		}
		return nil
	}
	for i, t := range ts {
		if err := s.addLoRA(l, t, outs[i], x, a, st); err != nil {
			return err
		}
	}
	return nil
}

// loraGroupMax returns how many projections the backend's LoRA takes in one call (1
// without backend.LoRAGroupOps).
func (s *shard) loraGroupMax() int {
	if g, ok := s.be.(backend.LoRAGroupOps); ok {
		return max(1, g.LoRAGroupMax())
	}
	return 1
}

// stepLoRA reports whether some token of the step being run has an adapter.
func (s *shard) stepLoRA() bool { return s.lora != nil && s.meta.LoRASlots != nil }

// mlpLoRA is the dense feed-forward of layer l with the step's adapters' updates added to
// the gate, up and down projections (unfused, since each product takes its own update).
func (s *shard) mlpLoRA(l int, out, x backend.Tensor, a *activations, st backend.Step) error {
	be, lw := s.be, &s.w.layers[l]
	if err := s.projectLinear([]backend.Tensor{a.gate, a.up}, x, a, lw, gateUpNames, []backend.Tensor{lw.gate, lw.up}); err != nil {
		return err
	}
	if err := s.addLoRAs(l, []lora.Target{lora.Gate, lora.Up}, []backend.Tensor{a.gate, a.up}, x, a, st); err != nil {
		return err
	}
	var err error
	if s.cfg.Activation == geluTanh {
		err = be.GeGLU(a.gate, a.gate, a.up)
	} else {
		err = be.SwiGLU(a.gate, a.gate, a.up)
	}
	if err != nil {
		return err
	}
	if err := s.linear(out, a.gate, a, lw, "ffn_down", lw.down); err != nil {
		return err
	}
	return s.addLoRA(l, lora.Down, out, a.gate, a, st)
}
