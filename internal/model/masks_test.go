package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// cpuModel makes a Model of fm split as p over CPU backends of one thread each, which the
// test owns (closed after the model).
func cpuModel(t *testing.T, fm *format.Model, p Parallel, kvDT quant.Type) *Model {
	t.Helper()
	bes := make([]backend.Backend, p.Ranks())
	for i := range bes {
		be := cpubackend.New(1)
		t.Cleanup(func() { be.Close() })
		bes[i] = be
	}
	return mustModel(t, fm, Options{Backends: bes, Parallel: p, KVCacheDType: kvDT})
}

// maskTwin is the small Llama-like model (2 KV heads, 2 layers: it splits by tensor and by
// pipeline) the mask and block tests run.
func maskTwin(t *testing.T) *format.Model {
	t.Helper()
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	return writeTwin(t, smallConfig(s.Config), quant.F32, synth.GGUF)
}

// maskSeqs are three sequences over a shared cache of 12 blocks of 4 slots.
var maskSeqs = []seqRun{
	{prompt: testTokens(9), table: []int32{7, 1, 4}},
	{prompt: testTokens(11)[2:], table: []int32{0, 9, 2}},
	{prompt: testTokens(8)[1:], table: []int32{5, 8, 3}},
}

// randomMasks returns one mask per row of vocab tokens: row 0 unmasked, row 1 allowing one
// token, the others about half the vocabulary.
func randomMasks(r *rand.Rand, rows, vocab int) [][]uint32 {
	masks := make([][]uint32, rows)
	for i := 1; i < rows; i++ {
		masks[i] = make([]uint32, backend.MaskWords(vocab))
		if i == 1 {
			tok := r.Intn(vocab)
			masks[i][tok/32] = 1 << (tok % 32)
			continue
		}
		for j := range masks[i] {
			masks[i][j] = r.Uint32()
		}
	}
	return masks
}

// greedyUnder is sample.Greedy over a row of logits with the tokens mask disallows set to
// -Inf.
func greedyUnder(row []float32, mask []uint32) int {
	row = slices.Clone(row)
	for t := range row {
		if !backend.Allowed(mask, t) {
			row[t] = float32(math.Inf(-1))
		}
	}
	return sample.Greedy(row)
}

// TestForwardGreedyMasks: ForwardGreedy under vocabulary masks picks, row by row,
// sample.Greedy over Forward's logits with the disallowed tokens at -Inf (unmasked rows
// the plain argmax), whole and split by tensor and by pipeline; the MaskFunc is called
// once per step.
func TestForwardGreedyMasks(t *testing.T) {
	fm := maskTwin(t)
	r := rand.New(rand.NewSource(5))
	const bs = 4
	from, to := []int{0, 0, 0}, []int{len(maskSeqs[0].prompt), len(maskSeqs[1].prompt), len(maskSeqs[2].prompt)}
	for _, p := range []Parallel{{1, 1}, {2, 1}, {1, 2}} {
		t.Run(fmt.Sprintf("tp%d-pp%d", p.Tensor, p.Pipeline), func(t *testing.T) {
			m := cpuModel(t, fm, p, quant.F32)
			kv, err := m.NewKVCache(12, bs)
			if err != nil {
				t.Fatal(err)
			}
			b := batchFor(maskSeqs, from, to, bs)
			logits, err := m.Forward(b, kv)
			if err != nil {
				t.Fatal(err)
			}
			vocab, rows := m.Config().VocabSize, len(b.LogitsIndices)
			masks := randomMasks(r, rows, vocab)
			calls := 0
			// The same step again: it rewrites the same slots with the same values.
			ids, err := m.ForwardGreedy(b, kv, func() ([][]uint32, error) {
				calls++
				return masks, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if calls != 1 {
				t.Errorf("MaskFunc called %d times, want once", calls)
			}
			changed := 0
			for i, id := range ids {
				row := logits[i*vocab : (i+1)*vocab]
				if want := greedyUnder(row, masks[i]); int(id) != want {
					t.Errorf("row %d: masked greedy id %d, want %d", i, id, want)
				}
				if int(id) != sample.Greedy(row) {
					changed++
				}
			}
			if changed == 0 {
				t.Errorf("no mask changed any row's choice: the test shows nothing")
			}
		})
	}
}

// orderBackend is a CPU backend that records, in order, when a step's layers are queued
// (RunStep), when the logits op runs, and whether the MaskFunc runs inside Run.
type orderBackend struct {
	*cpubackend.Backend
	events []string
	inRun  bool
}

func (o *orderBackend) Run(fn func() error) error {
	return o.Backend.Run(func() error {
		o.inRun = true
		defer func() { o.inRun = false }()
		return fn()
	})
}

func (o *orderBackend) GraphShape(seqs, tokens, maxQuery int) (int, int, bool) {
	return seqs, maxQuery, false
}

func (o *orderBackend) RunStep(st backend.Step, owner any, ops func() error) error {
	err := ops()
	o.events = append(o.events, "layers")
	return err
}

func (o *orderBackend) LogitsArgmax(dst []int32, x, w backend.Tensor, masks [][]uint32) error {
	o.events = append(o.events, "argmax")
	return o.Backend.LogitsArgmax(dst, x, w, masks)
}

// LogitsSample records the rows it is given and picks each row's greedy token under its
// mask.
func (o *orderBackend) LogitsSample(dst []int32, x, w backend.Tensor, rows []backend.SampleRow) error {
	o.events = append(o.events, fmt.Sprintf("sample %v", rows))
	masks := make([][]uint32, len(rows))
	for i, r := range rows {
		masks[i] = r.Mask
	}
	return o.Backend.LogitsArgmax(dst, x, w, masks)
}

// TestMaskFuncTiming: the MaskFunc runs after the step's layers are queued, outside the
// backend's Run, before the logits op; ForwardSample hands its masks to the backend in the
// rows' Mask fields without changing the caller's rows; a MaskFunc's error, or masks of
// the wrong count or length, fail the step and leave the model usable.
func TestMaskFuncTiming(t *testing.T) {
	fm := maskTwin(t)
	ob := &orderBackend{Backend: cpubackend.New(2)}
	t.Cleanup(func() { ob.Close() })
	m := mustModel(t, fm, Options{Backends: []backend.Backend{ob}})
	kv, err := m.NewKVCache(12, 4)
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().VocabSize
	b := batchFor(maskSeqs[:2], []int{0, 0}, []int{5, 6}, 4)
	b.LogitsIndices = []int{4, 10}
	allowOnly := func(tok int) []uint32 {
		mask := make([]uint32, backend.MaskWords(vocab))
		mask[tok/32] = 1 << (tok % 32)
		return mask
	}
	masks := [][]uint32{allowOnly(200), nil}
	maskFn := func() ([][]uint32, error) {
		ob.events = append(ob.events, fmt.Sprintf("masks (in Run: %v)", ob.inRun))
		return masks, nil
	}
	ids, err := m.ForwardGreedy(b, kv, maskFn)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"layers", "masks (in Run: false)", "argmax"}; !slices.Equal(ob.events, want) {
		t.Errorf("events %q, want %q", ob.events, want)
	}
	if ids[0] != 200 {
		t.Errorf("row allowing only token 200 got %d", ids[0])
	}

	ob.events = nil
	rows := []backend.SampleRow{{Temperature: 1, TopK: 1, TopP: 1}, {Temperature: 1, TopK: 1, TopP: 1}}
	ids, err = m.ForwardSample(b, kv, rows, maskFn)
	if err != nil {
		t.Fatal(err)
	}
	want := []backend.SampleRow{{Temperature: 1, TopK: 1, TopP: 1, Mask: masks[0]}, {Temperature: 1, TopK: 1, TopP: 1}}
	if wantEv := []string{"layers", "masks (in Run: false)", fmt.Sprintf("sample %v", want)}; !slices.Equal(ob.events, wantEv) {
		t.Errorf("events %q, want %q", ob.events, wantEv)
	}
	if ids[0] != 200 || rows[0].Mask != nil {
		t.Errorf("sampled id %d under a mask allowing 200; caller's row now %+v", ids[0], rows[0])
	}

	// Without a MaskFunc the step is one Run, masks never asked.
	ob.events = nil
	if _, err := m.ForwardGreedy(b, kv, nil); err != nil {
		t.Fatal(err)
	}
	if want := []string{"layers", "argmax"}; !slices.Equal(ob.events, want) {
		t.Errorf("unmasked events %q, want %q", ob.events, want)
	}

	injected := errors.New("grammar state lost")
	for name, fn := range map[string]MaskFunc{
		"error":       func() ([][]uint32, error) { return nil, injected },
		"count":       func() ([][]uint32, error) { return masks[:1], nil },
		"mask length": func() ([][]uint32, error) { return [][]uint32{nil, {1}}, nil },
	} {
		_, err := m.ForwardGreedy(b, kv, fn)
		if err == nil {
			t.Errorf("%s: the step succeeded", name)
		}
		if name == "error" && !errors.Is(err, injected) {
			t.Errorf("MaskFunc error %v does not wrap %v", err, injected)
		}
	}
	if _, err := m.ForwardGreedy(b, kv, maskFn); err != nil {
		t.Errorf("a step after failed masks: %v", err)
	}
}

// TestSplitMaskFailure: in a split model a failing MaskFunc fails the step alone (called
// once, its error returned, no hang) and the next step runs.
func TestSplitMaskFailure(t *testing.T) {
	fm := maskTwin(t)
	for _, p := range []Parallel{{2, 1}, {1, 2}, {2, 2}} {
		m := cpuModel(t, fm, p, quant.F32)
		kv, err := m.NewKVCache(12, 4)
		if err != nil {
			t.Fatal(err)
		}
		b := batchFor(maskSeqs, []int{0, 0, 0}, []int{4, 5, 6}, 4)
		calls := 0
		injected := errors.New("no masks today")
		_, err = m.ForwardGreedy(b, kv, func() ([][]uint32, error) {
			calls++
			return nil, injected
		})
		if !errors.Is(err, injected) || calls != 1 {
			t.Errorf("tp%d-pp%d: error %v after %d calls, want the MaskFunc's after one", p.Tensor, p.Pipeline, err, calls)
		}
		ids, err := m.ForwardGreedy(b, kv, func() ([][]uint32, error) { return nil, nil })
		if err != nil || len(ids) != len(b.LogitsIndices) {
			t.Errorf("tp%d-pp%d: the step after: %v, %d ids", p.Tensor, p.Pipeline, err, len(ids))
		}
		if err != nil && strings.Contains(err.Error(), "earlier step") {
			t.Errorf("tp%d-pp%d: a mask failure broke the model", p.Tensor, p.Pipeline)
		}
	}
}
