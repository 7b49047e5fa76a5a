package cudabackend_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// kvQuantLogitsTol bounds the relative error of a GPU model's logits against the CPU
// backend's with the same quantized cache: the two devices' float32 sums differ, and a key
// or value on a rounding boundary of the codes may take the neighbouring code on one of
// them (a step of the type: widest for E5M2).
var kvQuantLogitsTol = map[quant.Type]float64{quant.KVInt8: 2e-2, quant.KVFP8E4M3: 3e-2, quant.KVFP8E5M2: 5e-2}

// TestBackendKVQuantModels: with each quantized KV cache type, a real model's GPU logits
// after a 40-token prompt match the CPU backend's with the same cache type within
// kvQuantLogitsTol, and 24 greedy tokens equal the CPU's (a parting is allowed only at a
// near-tie of the CPU's own logits, within 2e-2 of their rms). Models: the trained 24.9M
// target (head size 64, 2 query heads a kv head: the grouped decode kernel), stories260K
// (head size 8: the varlen kernel for every step) and a 2-layer model of llama-3.2-1b's
// shape (head size 64, groups of 4). The RESULT lines give the quantization's own effect
// beside it: the CPU's logits with the quantized cache against an F32 cache's.
func TestBackendKVQuantModels(t *testing.T) {
	const prompt, gen = 40, 24
	be := newBackend(t)
	cb := cpubackend.New(0)
	defer cb.Close()
	models := []struct {
		name string
		open func() *format.Model
	}{
		{"trained-target", func() *format.Model {
			fm, err := format.Open(testdata.Path(t, "models/trained/target"), format.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return fm
		}},
		{"stories260K", func() *format.Model { return openStories(t) }},
	}
	for _, mc := range models {
		fm := mc.open()
		r := rand.New(rand.NewPCG(11, 12))
		p := make([]int32, prompt)
		for i := range p {
			p[i] = int32(3 + r.IntN(fm.Config.VocabSize-3))
		}
		newModel := func(b backend.Backend, dt quant.Type) *model.Model {
			m, err := model.New(fm, model.Options{Backends: []backend.Backend{b}, KVCacheDType: dt})
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		base := newModel(cb, quant.F32)
		baseSteps, _ := greedyRun(t, base, p, 1)
		base.Close()
		for _, dt := range []quant.Type{quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
			gm, cm := newModel(be, dt), newModel(cb, dt)
			gs, gt := greedyRun(t, gm, p, gen)
			cs, ct := greedyRun(t, cm, p, gen)
			gm.Close()
			cm.Close()
			compareGreedy(t, fmt.Sprintf("%s %s KV", mc.name, dt), gs, gt, cs, ct, kvQuantLogitsTol[dt], relErr(cs[0], baseSteps[0]))
		}
		fm.Close()
	}
	for _, dt := range []quant.Type{quant.KVInt8, quant.KVFP8E4M3, quant.KVFP8E5M2} {
		gm, fm := synthModelKV(t, be, dt)
		cm, err := model.New(fm, model.Options{Backends: []backend.Backend{cb}, KVCacheDType: dt})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(13, 14))
		p := make([]int32, prompt)
		for i := range p {
			p[i] = int32(3 + r.IntN(fm.Config.VocabSize-3))
		}
		gs, gt := greedyRun(t, gm, p, gen)
		cs, ct := greedyRun(t, cm, p, gen)
		cm.Close()
		compareGreedy(t, fmt.Sprintf("synth llama-3.2-1b shape %s KV", dt), gs, gt, cs, ct, kvQuantLogitsTol[dt], -1)
	}
}

// compareGreedy checks a GPU greedy run (logits gs, tokens gt) against the CPU's (cs, ct):
// the first logits within tol, the tokens equal but at a near-tie of the CPU's logits.
// quantErr (< 0: not measured) is reported beside it.
func compareGreedy(t *testing.T, name string, gs [][]float32, gt []int32, cs [][]float32, ct []int32, tol, quantErr float64) {
	t.Helper()
	e := relErr(gs[0], cs[0])
	same := 0
	for same < len(ct) && gt[same] == ct[same] {
		same++
	}
	fmt.Printf("RESULT|model|%s: prompt logits rel. error cuda vs cpu|%.2e|tol %.0e, greedy %d/%d equal, cpu quantized vs f32 cache %.2e\n",
		name, e, tol, same, len(ct), quantErr)
	if !(e <= tol) {
		t.Errorf("%s: logits rel. error %.3e against the CPU backend, over %.0e", name, e, tol)
	}
	if same < len(ct) {
		l := cs[same]
		gap := float64(l[ct[same]]-l[gt[same]]) / rms(l)
		fmt.Printf("RESULT|model|%s: greedy parts at step %d|%.2e|cpu logit gap of the two tokens / logits rms\n", name, same, gap)
		if gap > 2e-2 {
			t.Errorf("%s: greedy tokens part at %d where the CPU's logits differ by %.3e rms: cuda %v, cpu %v", name, same, gap, gt, ct)
		}
	}
}

// TestBackendKVQuantEngine: the engine on the GPU with an int8 and an fp8 cache (stories260K,
// 12 requests, CUDA graphs, device greedy) gives the same tokens with prefix caching on and
// off, hits the prefix cache, leaks no block, and agrees with the CPU engine of the same
// cache type on the first 16 tokens of all but at most two requests.
func TestBackendKVQuantEngine(t *testing.T) {
	be := newBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	prefix := make([]int32, 40)
	for i := range prefix {
		prefix[i] = int32(3 + r.IntN(500))
	}
	var prompts [][]int32
	for i := range 12 {
		p := []int32{1}
		if i%2 == 0 {
			p = append(p, prefix...)
		}
		for range 5 + i {
			p = append(p, int32(3+r.IntN(500)))
		}
		prompts = append(prompts, p)
	}
	for _, kv := range []kvasir.KVCacheDType{kvasir.KVCacheInt8, kvasir.KVCacheFP8E4M3} {
		on, stOn := engineRun(t, be, kv, prompts, false)
		off, _ := engineRun(t, be, kv, prompts, true)
		cpuE, err := kvasir.OpenModel(openStories(t), kvasir.Options{KVCacheDType: kv, KVCacheMemory: 64 << 20, MaxNumSeqs: 16, Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		diff, sameHead := 0, 0
		for i, p := range prompts {
			if !slices.Equal(on[i], off[i]) {
				diff++
				t.Errorf("%s request %d: prefix caching on %v, off %v", kv, i, on[i], off[i])
			}
			cpuOut := engineGenerate(t, cpuE, p)
			if len(cpuOut) >= 16 && len(on[i]) >= 16 && slices.Equal(cpuOut[:16], on[i][:16]) {
				sameHead++
			}
		}
		cpuE.Close()
		if stOn.PrefixHits == 0 {
			t.Errorf("%s: no prefix cache hit: %+v", kv, stOn)
		}
		if sameHead < len(prompts)-2 {
			t.Errorf("%s: only %d/%d requests agree with the CPU engine on their first 16 tokens", kv, sameHead, len(prompts))
		}
		fmt.Printf("RESULT|engine|stories260K 12 requests, %s KV: prefix caching on vs off|%d/%d equal|prefix hits %d, first 16 tokens as the cpu engine %d/%d\n",
			kv, len(prompts)-diff, len(prompts), stOn.PrefixHits, sameHead, len(prompts))
	}
	captured, _, _ := be.GraphStats()
	if captured == 0 {
		t.Error("no decode graph captured over a quantized cache")
	}
}

// engineGenerate generates 48 tokens greedily for prompt on e, as engineRun asks.
func engineGenerate(t *testing.T, e *kvasir.Engine, prompt []int32) []int32 {
	t.Helper()
	ch, err := e.Generate(context.Background(), kvasir.Request{PromptTokens: prompt,
		Params: kvasir.SamplingParams{Temperature: 0, MaxTokens: 48, IgnoreEOS: true}})
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for o := range ch {
		out = append(out, o.TokenIDs...)
	}
	return out
}
