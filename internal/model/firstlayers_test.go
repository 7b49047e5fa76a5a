package model

import (
	"bytes"
	"fmt"
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

// truncated returns fm as a model of its first n layers only: the same file and tensors,
// with a config that binds blocks 0..n-1 (the others stay in the file, unused). A model
// made from it is the independent reference of FirstLayers(n).
func truncated(fm *format.Model, n int) *format.Model {
	t := *fm
	t.Config.Layers = n
	return &t
}

// mustCache returns a new cache of m of 10 blocks of 4 slots (layerSkipSeqs').
func mustCache(t *testing.T, m *Model) *KVCache {
	t.Helper()
	kv, err := m.NewKVCache(10, 4)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// layerSkipSeqs are two sequences over a cache of 10 blocks of 4 slots.
var layerSkipSeqs = []seqRun{
	{prompt: testTokens(12), table: []int32{6, 1, 8}},
	{prompt: testTokens(13)[3:], table: []int32{0, 9, 4}},
}

// layerSkipSteps are the steps the view is checked on: a prefill, a decode step and a
// verify step of three tokens per sequence.
func layerSkipSteps() []*Batch {
	return []*Batch{
		batchFor(layerSkipSeqs, []int{0, 0}, []int{5, 4}, 4),
		batchFor(layerSkipSeqs, []int{5, 4}, []int{6, 5}, 4),
		batchFor(layerSkipSeqs, []int{6, 5}, []int{9, 8}, 4),
	}
}

// TestFirstLayersMatchTruncatedModel: for every test shape, the view of a model's first n
// layers gives, step after step on the full model's cache, the very logits of a model
// loaded with only those layers (its own weights, its own cache), and the fp32 reference
// path of that truncated model agrees within the weight type's tolerance.
func TestFirstLayersMatchTruncatedModel(t *testing.T) {
	for name, c := range testShapes(t) {
		c.Layers = 3
		t.Run(name, func(t *testing.T) {
			fm := writeTwin(t, c, quant.F32, synth.GGUF)
			full := mustModel(t, fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
			kv := mustCache(t, full)
			for _, n := range []int{1, 2} {
				view, err := full.FirstLayers(n)
				if err != nil {
					t.Fatal(err)
				}
				if got := view.Config().Layers; got != n {
					t.Errorf("view of %d layers reports %d", n, got)
				}
				trunc := mustModel(t, truncated(fm, n), Options{Backends: cpuBackends(t, 2, Parallel{})})
				tkv := mustCache(t, trunc)
				for i, b := range layerSkipSteps() {
					got, err := view.Forward(b, kv)
					if err != nil {
						t.Fatalf("n=%d step %d: %v", n, i, err)
					}
					want, err := trunc.Forward(b, tkv)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got, want) {
						t.Errorf("n=%d step %d: the view's logits differ from the truncated model's by %g (relative)", n, i, maxAbsDiff(got, want))
					}
				}
			}
			// The reference path of the one-layer model, over the first sequence's tokens.
			view, err := full.FirstLayers(1)
			if err != nil {
				t.Fatal(err)
			}
			seq := []seqRun{layerSkipSeqs[0]}
			fast := make([][]float32, 0, 6)
			for pos := range 6 {
				l, err := view.Forward(batchFor(seq, []int{pos}, []int{pos + 1}, 4), kv)
				if err != nil {
					t.Fatal(err)
				}
				fast = append(fast, l)
			}
			ref := refLogits(t, truncated(fm, 1), seq[0].prompt[:6], nil)
			if e := relErr(fast, ref); e > dtypeTolerance[quant.F32] {
				t.Errorf("the view differs from the truncated model's reference path by %.3g (relative)", e)
			}
		})
	}
}

// layerBytes returns the host-layout bytes (ReadBlocks) of layer l of every block in data,
// for an unsplit cache of spec's geometry.
func layerBytes(data []byte, spec backend.KVSpec, l int) []byte {
	per := spec.BlockBytes() / spec.Layers
	var out []byte
	for b := 0; b < len(data); b += spec.BlockBytes() {
		out = append(out, data[b+l*per:b+(l+1)*per]...)
	}
	return out
}

// TestFirstLayersKVAndFullModel: the view writes the keys and values of its tokens into
// layers < n of the full model's cache only, and what it writes there is what the full
// model writes for the same step; the full model's logits are bit-identical before and
// after the view ran, and its greedy and sampled tokens come from the view's own logits.
func TestFirstLayersKVAndFullModel(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	c := smallConfig(s.Config)
	c.Layers = 4
	const n = 2
	fm := writeTwin(t, c, quant.F32, synth.GGUF)
	full := mustModel(t, fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	kvA := mustCache(t, full)
	kvB := mustCache(t, full)
	steps := layerSkipSteps()
	for _, kv := range []*KVCache{kvA, kvB} {
		if _, err := full.Forward(steps[0], kv); err != nil {
			t.Fatal(err)
		}
	}
	before, err := full.Forward(steps[1], kvA)
	if err != nil {
		t.Fatal(err)
	}
	view, err := full.FirstLayers(n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Forward(steps[1], kvB); err != nil {
		t.Fatal(err)
	}
	all := make([]int32, kvA.NumBlocks)
	for i := range all {
		all[i] = int32(i)
	}
	read := func(kv *KVCache) []byte {
		buf := make([]byte, len(all)*kv.BlockBytes())
		if err := kv.ReadBlocks(all, buf); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	spec := kvA.Specs()[0]
	pre := read(kvA)
	// The verify step: the view on kvA, the full model on kvB.
	viewLogits, err := view.Forward(steps[2], kvA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := full.Forward(steps[2], kvB); err != nil {
		t.Fatal(err)
	}
	gotA, gotB := read(kvA), read(kvB)
	for l := range c.Layers {
		a, b, p := layerBytes(gotA, spec, l), layerBytes(gotB, spec, l), layerBytes(pre, spec, l)
		switch {
		case l < n && !bytes.Equal(a, b):
			t.Errorf("layer %d: the view's keys and values differ from the full model's", l)
		case l < n && bytes.Equal(a, p):
			t.Errorf("layer %d: the view wrote nothing", l)
		case l >= n && !bytes.Equal(a, p):
			t.Errorf("layer %d: the view wrote into a layer it does not run", l)
		case l >= n && bytes.Equal(b, p):
			t.Errorf("layer %d: the full model wrote nothing (the test shows nothing)", l)
		}
	}
	// The full model, rerun on the decode step it ran before (it rewrites the same slots),
	// is bit-identical; so is the view rerun after it.
	after, err := full.Forward(steps[1], kvA)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("the full model's logits changed after the view ran, by %g (relative)", maxAbsDiff(after, before))
	}
	again, err := view.Forward(steps[2], kvA)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again, viewLogits) {
		t.Errorf("the view's logits changed after the full model ran, by %g (relative)", maxAbsDiff(again, viewLogits))
	}
	// Greedy and sampled tokens on the view come from its own logits.
	vocab := c.VocabSize
	ids, err := view.ForwardGreedy(steps[2], kvA, nil)
	if err != nil {
		t.Fatal(err)
	}
	sampler := &greedySampler{Backend: cpubackend.New(2)}
	t.Cleanup(func() { sampler.Close() })
	sfull := mustModel(t, fm, Options{Backends: []backend.Backend{sampler}})
	sview, err := sfull.FirstLayers(n)
	if err != nil {
		t.Fatal(err)
	}
	skv := mustCache(t, sfull)
	for _, b := range steps[:2] {
		if _, err := sfull.Forward(b, skv); err != nil {
			t.Fatal(err)
		}
	}
	rows := make([]backend.SampleRow, len(steps[2].LogitsIndices))
	for i := range rows {
		rows[i] = backend.SampleRow{Temperature: 1, TopK: 1}
	}
	sampled, err := sview.ForwardSample(steps[2], skv, rows, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ids {
		want := sample.Greedy(viewLogits[i*vocab : (i+1)*vocab])
		if int(ids[i]) != want || int(sampled[i]) != want {
			t.Errorf("row %d: greedy %d, sampled %d, want the view's argmax %d", i, ids[i], sampled[i], want)
		}
	}
	if sampler.calls == 0 {
		t.Error("ForwardSample did not reach the backend's sampler")
	}
}

// greedySampler is a CPU backend that draws on the "device" (backend.LogitsSampler): each
// row's greedy token, whatever its settings.
type greedySampler struct {
	*cpubackend.Backend
	calls int
}

func (g *greedySampler) LogitsSample(dst []int32, x, w backend.Tensor, rows []backend.SampleRow) error {
	g.calls++
	return g.Backend.LogitsArgmax(dst, x, w, nil)
}

// TestFirstLayersTensorParallel: the view of a model split across two ranks by tensor
// gives the truncated model's logits under the same split, bit for bit.
func TestFirstLayersTensorParallel(t *testing.T) {
	s, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	c := smallConfig(s.Config)
	c.Layers = 3
	fm := writeTwin(t, c, quant.F32, synth.GGUF)
	par := Parallel{Tensor: 2, Pipeline: 1}
	full := cpuModel(t, fm, par, quant.F32)
	view, err := full.FirstLayers(2)
	if err != nil {
		t.Fatal(err)
	}
	trunc := cpuModel(t, truncated(fm, 2), par, quant.F32)
	kv := mustCache(t, full)
	tkv := mustCache(t, trunc)
	for i, b := range layerSkipSteps() {
		got, err := view.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		want, err := trunc.Forward(b, tkv)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("step %d: the tensor-parallel view differs from the truncated model by %g (relative)", i, maxAbsDiff(got, want))
		}
	}
}

// ownerBackend is a CPU backend that replays steps as a graph backend would be asked to
// (StepGrapher, no padding) and records the owner of every step.
type ownerBackend struct {
	*cpubackend.Backend
	owners []any
}

func (o *ownerBackend) GraphShape(seqs, tokens, maxQuery int) (int, int, bool) {
	return seqs, maxQuery, false
}

func (o *ownerBackend) RunStep(st backend.Step, owner any, ops func() error) error {
	o.owners = append(o.owners, owner)
	return ops()
}

// TestFirstLayersOwnSteps: a graph-replaying backend is told the view's steps apart from
// the full model's (different owners, so no graph of one is replayed for the other), while
// each model's steps on one cache keep one owner.
func TestFirstLayersOwnSteps(t *testing.T) {
	ob := &ownerBackend{Backend: cpubackend.New(2)}
	t.Cleanup(func() { ob.Close() })
	full := mustModel(t, maskTwin(t), Options{Backends: []backend.Backend{ob}})
	view, err := full.FirstLayers(1)
	if err != nil {
		t.Fatal(err)
	}
	kv := mustCache(t, full)
	steps := layerSkipSteps()
	for _, m := range []*Model{full, full, view, view} {
		if _, err := m.Forward(steps[1], kv); err != nil {
			t.Fatal(err)
		}
	}
	if len(ob.owners) != 4 {
		t.Fatalf("%d steps reached RunStep, want 4", len(ob.owners))
	}
	if ob.owners[0] != ob.owners[1] || ob.owners[2] != ob.owners[3] {
		t.Errorf("one model's steps on one cache have different owners: %v", ob.owners)
	}
	if ob.owners[0] == ob.owners[2] {
		t.Errorf("the view's steps have the full model's owner %v", ob.owners[0])
	}
}

// TestFirstLayersRefused: layer counts outside 1..layers-1, a pipeline-parallel model and a
// cache of another model are refused with errors that say so; a view's own cache holds its
// layers, and the full model refuses it.
func TestFirstLayersRefused(t *testing.T) {
	fm := maskTwin(t)
	full := cpuModel(t, fm, Parallel{}, quant.F32)
	layers := full.Config().Layers
	for _, n := range []int{0, -1, layers, layers + 1} {
		if _, err := full.FirstLayers(n); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("first %d layers", n)) {
			t.Errorf("FirstLayers(%d) of %d layers: error %v", n, layers, err)
		}
	}
	pp := cpuModel(t, fm, Parallel{Tensor: 1, Pipeline: 2}, quant.F32)
	if _, err := pp.FirstLayers(1); err == nil || !strings.Contains(err.Error(), "pipeline") {
		t.Errorf("FirstLayers of a pipeline-parallel model: error %v", err)
	}
	view, err := full.FirstLayers(1)
	if err != nil {
		t.Fatal(err)
	}
	other := cpuModel(t, fm, Parallel{}, quant.F32)
	okv := mustCache(t, other)
	if _, err := view.Forward(layerSkipSteps()[0], okv); err == nil || !strings.Contains(err.Error(), "not made by this model") {
		t.Errorf("the view ran on another model's cache: error %v", err)
	}
	vkv := mustCache(t, view)
	if got := vkv.Specs()[0].Layers; got != 1 {
		t.Errorf("the view's own cache holds %d layers, want 1", got)
	}
	if _, err := view.Forward(layerSkipSteps()[0], vkv); err != nil {
		t.Errorf("the view on its own cache: %v", err)
	}
	if _, err := full.Forward(layerSkipSteps()[0], vkv); err == nil {
		t.Error("the full model ran on the view's cache of fewer layers")
	}
	view.Close() // a no-op: the full model still runs
	kv := mustCache(t, full)
	if _, err := full.Forward(layerSkipSteps()[0], kv); err != nil {
		t.Errorf("the full model after its view was closed: %v", err)
	}
}
