package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// fakeModel is a Model for testing the engine alone. Its "KV cache" keeps each slot's token
// and position, and the logits of a row are a pseudo-random function of the row's whole
// context as read back through the sequence's block table: its tokens and positions, in
// order. So a KV entry that is stale or misplaced (a rolled-back draft left behind, a
// copy-on-write copy not made, a wrong slot) changes the logits, and a test that compares
// the engine's tokens with fakeGreedy (the same function over the true tokens) sees it.
type fakeModel struct {
	vocab, blockSize int
	slots            []fakeSlot
	canSample        bool
	// noise, for a fake draft model, perturbs the logits by up to that much, so that its
	// picks agree with the target's only in part (0: the target's own logits).
	noise       float32
	steps, rows atomic.Int64
	copied      atomic.Int64 // logits rows returned to the host
}

// fakeSlot is one KV slot of the fake cache.
type fakeSlot struct {
	tok, pos int32
	set      bool
}

func newFakeModel(vocab, numBlocks, blockSize int) *fakeModel {
	return &fakeModel{vocab: vocab, blockSize: blockSize, slots: make([]fakeSlot, numBlocks*blockSize)}
}

// fakeLogits returns the logits that follow a context of tokens at positions 0, 1, ...
func fakeLogits(vocab int, tokens []int32) []float32 {
	h := uint64(0xcbf29ce484222325)
	for i, t := range tokens {
		h = mix(h ^ uint64(t)<<20 ^ uint64(i))
	}
	out := make([]float32, vocab)
	for v := range out {
		out[v] = float32(mix(h^uint64(v)*0x9e3779b97f4a7c15)%2000)/200 - 5
	}
	return out
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// fakeGreedy is the reference: n greedy tokens after prompt, stopping after a stop token.
func fakeGreedy(vocab int, prompt []int32, n int, stop ...int32) []int32 {
	toks := append([]int32(nil), prompt...)
	var out []int32
	for len(out) < n {
		t := int32(sample.Greedy(fakeLogits(vocab, toks)))
		out = append(out, t)
		toks = append(toks, t)
		for _, s := range stop {
			if t == s {
				return out
			}
		}
	}
	return out
}

// Forward writes every token of the step into its slot, then computes each logits row
// from its context read through the block table.
func (f *fakeModel) Forward(b *model.Batch) ([]float32, error) {
	f.steps.Add(1)
	for t, slot := range b.SlotMapping {
		if slot < 0 || int(slot) >= len(f.slots) {
			return nil, fmt.Errorf("fake: token %d: slot %d out of range", t, slot)
		}
		if b.Tokens[t] < 0 || int(b.Tokens[t]) >= f.vocab {
			return nil, fmt.Errorf("fake: token %d: id %d out of range", t, b.Tokens[t])
		}
		f.slots[slot] = fakeSlot{tok: b.Tokens[t], pos: b.Positions[t], set: true}
	}
	var logits []float32
	for _, i := range b.LogitsIndices {
		row, err := f.row(b, i)
		if err != nil {
			return nil, err
		}
		logits = append(logits, row...)
	}
	f.rows.Add(int64(len(b.LogitsIndices)))
	return logits, nil
}

// row computes the logits of batch token i from its sequence's cached context.
func (f *fakeModel) row(b *model.Batch, i int) ([]float32, error) {
	for _, s := range b.Seqs {
		if i < s.QueryStart || i >= s.QueryStart+s.QueryLen {
			continue
		}
		last := s.ContextLen - s.QueryLen + (i - s.QueryStart) // the token's context index
		ctx := make([]int32, last+1)
		for j := range ctx {
			slot := int(s.BlockTable[j/f.blockSize])*f.blockSize + j%f.blockSize
			e := f.slots[slot]
			if !e.set || int(e.pos) != j {
				return nil, fmt.Errorf("fake: context entry %d in slot %d holds position %d (set %v)", j, slot, e.pos, e.set)
			}
			ctx[j] = e.tok
		}
		l := fakeLogits(f.vocab, ctx)
		if f.noise != 0 {
			for v, n := range fakeLogits(f.vocab, append(ctx, -1)) {
				l[v] += f.noise * n / 5
			}
		}
		return l, nil
	}
	return nil, fmt.Errorf("fake: logits row %d in no sequence", i)
}

// masked runs Forward and applies the masks to the rows.
func (f *fakeModel) masked(b *model.Batch, masks MaskFunc) ([]float32, error) {
	logits, err := f.Forward(b)
	if err != nil || masks == nil {
		return logits, err
	}
	ms, err := masks()
	if err != nil {
		return nil, err
	}
	if ms != nil && len(ms) != len(b.LogitsIndices) {
		return nil, fmt.Errorf("fake: %d masks for %d rows", len(ms), len(b.LogitsIndices))
	}
	for r, m := range ms {
		sample.Mask(m).Apply(logits[r*f.vocab : (r+1)*f.vocab])
	}
	return logits, nil
}

func (f *fakeModel) ForwardGreedy(b *model.Batch, masks MaskFunc) ([]int32, error) {
	logits, err := f.masked(b, masks)
	if err != nil {
		return nil, err
	}
	ids := make([]int32, len(b.LogitsIndices))
	for r := range ids {
		ids[r] = int32(sample.Greedy(logits[r*f.vocab : (r+1)*f.vocab]))
	}
	return ids, nil
}

func (f *fakeModel) ForwardSample(b *model.Batch, rows []backend.SampleRow, masks MaskFunc) ([]int32, error) {
	if !f.canSample {
		return nil, errors.New("fake: cannot sample")
	}
	if len(rows) != len(b.LogitsIndices) {
		return nil, fmt.Errorf("fake: %d sampling rows for %d logits rows", len(rows), len(b.LogitsIndices))
	}
	logits, err := f.masked(b, masks)
	if err != nil {
		return nil, err
	}
	ids := make([]int32, len(rows))
	for r, s := range rows {
		ids[r] = int32(sample.DrawIndexOrder(logits[r*f.vocab:(r+1)*f.vocab], s.Temperature, int(s.TopK), s.TopP, float64(s.Uniform)))
	}
	return ids, nil
}

func (f *fakeModel) CanSample() bool { return f.canSample }

func (f *fakeModel) CopyBlocks(copies []backend.BlockCopy) error {
	bs := f.blockSize
	for _, c := range copies {
		copy(f.slots[int(c.Dst)*bs:int(c.Dst+1)*bs], f.slots[int(c.Src)*bs:int(c.Src+1)*bs])
	}
	return nil
}

// ShiftKeys moves the positions held in blocks' slots by delta (as rotating keys would).
func (f *fakeModel) ShiftKeys(blocks []int32, delta int) error {
	bs := f.blockSize
	for _, b := range blocks {
		for i := int(b) * bs; i < int(b+1)*bs; i++ {
			if f.slots[i].set {
				f.slots[i].pos += int32(delta)
			}
		}
	}
	return nil
}

// ReadKV encodes blocks' slots, 12 bytes each (token, position, set).
func (f *fakeModel) ReadKV(blocks []int32) ([]byte, error) {
	bs := f.blockSize
	var buf []byte
	for _, b := range blocks {
		for _, sl := range f.slots[int(b)*bs : int(b+1)*bs] {
			set := uint32(0)
			if sl.set {
				set = 1
			}
			buf = binary.LittleEndian.AppendUint32(buf, uint32(sl.tok))
			buf = binary.LittleEndian.AppendUint32(buf, uint32(sl.pos))
			buf = binary.LittleEndian.AppendUint32(buf, set)
		}
	}
	return buf, nil
}

// CompactKeys moves slot keep[i] of buf to slot i of dst, its position moved by i-keep[i]
// (the fake has one lane: keep holds one list).
func (f *fakeModel) CompactKeys(buf []byte, lanes [][]int, dst []int32) error {
	if len(lanes) != 1 {
		return fmt.Errorf("fake: %d lists of slots for one lane", len(lanes))
	}
	keep, bs := lanes[0], f.blockSize
	if len(dst) != (len(keep)+bs-1)/bs {
		return fmt.Errorf("fake: %d slots kept into %d blocks", len(keep), len(dst))
	}
	for _, b := range dst {
		clear(f.slots[int(b)*bs : int(b+1)*bs])
	}
	for i, s := range keep {
		if 12*s+12 > len(buf) {
			return fmt.Errorf("fake: kept slot %d past %d bytes", s, len(buf))
		}
		sl := fakeSlot{tok: int32(binary.LittleEndian.Uint32(buf[12*s:])), pos: int32(binary.LittleEndian.Uint32(buf[12*s+4:])), set: binary.LittleEndian.Uint32(buf[12*s+8:]) == 1}
		if sl.set {
			sl.pos += int32(i - s)
		}
		f.slots[int(dst[i/bs])*bs+i%bs] = sl
	}
	return nil
}

// fakeEngine makes an engine on a fresh fake model of vocab tokens, with cfg (NumBlocks
// 257 and BlockSize 4 when zero), whose afterStep hook checks the engine's invariants; the
// first violation is reported at cleanup.
func fakeEngine(t testing.TB, vocab int, cfg Config, canSample bool) (*Engine, *fakeModel) {
	t.Helper()
	e, fm, _ := fakeEngineDraft(t, vocab, cfg, canSample, -1)
	return e, fm
}

// fakeEngineDraft is fakeEngine with, when noise >= 0, a fake draft model of that noise
// (with a cache of its own) for speculation by a draft model of cfg.Speculation.K tokens;
// setup, when given, runs on the engine before its loop starts.
func fakeEngineDraft(t testing.TB, vocab int, cfg Config, canSample bool, noise float32, setup ...func(*Engine)) (*Engine, *fakeModel, *fakeModel) {
	t.Helper()
	if cfg.NumBlocks == 0 {
		cfg.NumBlocks = 257
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 4
	}
	cfg, err := withDefaults(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fm := newFakeModel(vocab, cfg.NumBlocks, cfg.BlockSize)
	fm.canSample = canSample
	var d drafter
	var dm *fakeModel
	if noise >= 0 {
		dm = newFakeModel(vocab, cfg.NumBlocks, cfg.BlockSize)
		dm.noise = noise
		d.model = dm
	}
	// The fake reports no mass, but takes the policies that ask for it (all blocks equal),
	// over one lane.
	e, err := assemble(fm, ModelInfo{VocabSize: vocab, ContextLen: 4096, MassLanes: 1, MassHeads: 1}, nil, cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(e)
	}
	var broken error
	e.afterStep = func() {
		if broken == nil {
			broken = checkEngine(e)
		}
	}
	go e.loop()
	t.Cleanup(func() {
		e.Close()
		if broken != nil {
			t.Errorf("engine invariant broken: %v", broken)
		}
		if err := e.kv.Check(); err != nil || e.kv.NumRequests() != 0 {
			t.Errorf("KV manager after the run: %v, %d sequences held", err, e.kv.NumRequests())
		}
	})
	return e, fm, dm
}

// logprobSum returns the sum of the chosen tokens' log probabilities.
func logprobSum(lps []Logprob) float64 {
	var s float64
	for _, lp := range lps {
		s += float64(lp.Token.Logprob)
	}
	return s
}

// near reports whether a and b agree to within tol relative to their size.
func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*max(1, math.Abs(a), math.Abs(b)) }
