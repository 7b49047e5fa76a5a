package cudabackend_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/backend/cudabackend"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/synth"
)

// TestBackendMLAModel runs the synthesized DeepSeek-V2 (deepseek-v2-tiny: multi-head
// latent attention over a cache of one 64-value vector a token, absorbed projections, a
// dense layer then routed and shared experts with a routed scale) and its twin with
// DeepSeek-V3's routing (deepseek-v3-tiny: sigmoid scores, a selection bias, 2 of 4
// groups; RouteExpertsBiased) on the GPU and the CPU:
// a 24-token prompt and 32 greedy tokens (decode replayed as CUDA graphs). In F32 the
// GPU's logits must match the CPU's within 1e-4 and all 32 tokens agree; in BF16 the
// prompt's logits within 3e-2 (the backends round differently). With Q8_0 weights the
// last logits of a 6-token prompt must match the float64 Reference, which decompresses
// the keys and values head by head, within 1e-3 on float activations and 5e-2 on the
// default's 8-bit ones (quantGEMVs).
func TestBackendMLAModel(t *testing.T) {
	be := newBackend(t)
	for _, name := range []string{"deepseek-v2-tiny", "deepseek-v3-tiny"} {
		shape, err := synth.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { testMLAModel(t, be, shape) })
	}
}

// testMLAModel is TestBackendMLAModel's check of one shape.
func testMLAModel(t *testing.T, be backend.Backend, shape synth.Shape) {
	const genTokens, promptLen = 32, 24
	r := rand.New(rand.NewPCG(5, 6))
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32(3 + r.IntN(shape.Config.VocabSize-3))
	}
	for _, dt := range []quant.Type{quant.F32, quant.BF16} {
		name := fmt.Sprintf("%s %s", shape.Name, dt)
		fm, err := synth.Model(shape, dt, 18)
		if err != nil {
			t.Fatal(err)
		}
		gpu, err := model.New(fm, model.Options{Backends: []backend.Backend{be}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cb := cpubackend.New(0)
		cpu, err := model.New(fm, model.Options{Backends: []backend.Backend{cb}})
		if err != nil {
			t.Fatal(err)
		}
		gs, gt := greedyRun(t, gpu, prompt, genTokens)
		cs, ct := greedyRun(t, cpu, prompt, genTokens)
		e := relErr(gs[0], cs[0])
		same := 0
		for same < genTokens && gt[same] == ct[same] {
			same++
		}
		fmt.Printf("RESULT|mla|%s: logits rel. error cuda vs cpu|%.2e|greedy %d/%d equal\n", name, e, same, genTokens)
		tol := 1e-4
		if dt != quant.F32 {
			tol = 3e-2
		}
		if !(e <= tol) {
			t.Errorf("%s: logits rel. error cuda vs cpu %.3e > %.0e", name, e, tol)
		}
		if dt == quant.F32 && same < genTokens {
			t.Errorf("%s: greedy tokens part at %d: cuda %v, cpu %v", name, same, gt, ct)
		}
		gpu.Close()
		cpu.Close()
		cb.Close()
		fm.Close()
	}

	fm, err := synth.Model(shape, quant.Q8_0, 18)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	ref, err := model.NewReference(fm)
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	for _, tok := range prompt[:6] {
		if want, err = ref.Forward(int(tok)); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range quantGEMVs {
		qb := newBackendWith(t, cudabackend.BackendOptions{QuantGEMV: &g.layout})
		gpu, err := model.New(fm, model.Options{Backends: []backend.Backend{qb}})
		if err != nil {
			t.Fatal(err)
		}
		_, got := prefilled(t, gpu, prompt[:6], 1)
		gpu.Close()
		e := relErr(got, want)
		fmt.Printf("RESULT|mla|%s Q8_0 prompt 6, GEMV %s: logits rel. error cuda vs float64 reference|%.2e|\n", shape.Name, g.layout, e)
		if !(e <= g.tol) {
			t.Errorf("Q8_0, GEMV %s: logits rel. error %.3e against the reference, over %.0e", g.layout, e, g.tol)
		}
	}
}

// TestBackendMLAReleasedDims runs the released models' attention geometry
// (deepseek-v2-lite-attn: 16 heads over one cached vector of 64 + 512 values, held once
// as key and value, attn_mla on the GPU) on the GPU and the CPU, F32 weights:
//   - a 300-token prompt and 32 greedy tokens (decode over a split context, replayed as
//     CUDA graphs), with an F32 cache: logits within 1e-4 of the CPU's, every token
//     equal; with a BF16 cache the prompt's logits within 3e-2;
//   - the prompt prefilled in chunks of 7, 50 and the rest over the cached prefix: the
//     last logits within 1e-4 of the CPU's whole prefill;
//   - the cache's blocks read from the CPU (one 576-value vector a slot, BlockBytes half
//     of a keys-and-values cache's) written into a GPU cache, which then decodes the next
//     token as the CPU does (logits within 1e-4): KV transfer between the backends.
func TestBackendMLAReleasedDims(t *testing.T) {
	be := newBackend(t)
	shape, err := synth.Lookup("deepseek-v2-lite-attn")
	if err != nil {
		t.Fatal(err)
	}
	fm, err := synth.Model(shape, quant.F32, 18)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	r := rand.New(rand.NewPCG(7, 8))
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32(3 + r.IntN(shape.Config.VocabSize-3))
	}
	cb := cpubackend.New(0)
	defer cb.Close()
	cpu, err := model.New(fm, model.Options{Backends: []backend.Backend{cb}})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	const genTokens = 32
	cs, ct := greedyRun(t, cpu, prompt, genTokens)
	for _, kvType := range []quant.Type{quant.F32, quant.BF16} {
		gpu, err := model.New(fm, model.Options{Backends: []backend.Backend{be}, KVCacheDType: kvType})
		if err != nil {
			t.Fatalf("%s cache: %v", kvType, err)
		}
		gs, gt := greedyRun(t, gpu, prompt, genTokens)
		same := 0
		for same < genTokens && gt[same] == ct[same] {
			same++
		}
		e, all := relErr(gs[0], cs[0]), 0.0
		for i := range gs {
			all = max(all, relErr(gs[i], cs[i]))
		}
		fmt.Printf("RESULT|mla|deepseek-v2-lite-attn %s cache, 300-token prompt: logits rel. error cuda vs cpu|%.2e (max over 32 steps %.2e)|greedy %d/%d equal\n",
			kvType, e, all, same, genTokens)
		tol := 1e-4
		if kvType != quant.F32 {
			tol = 3e-2
		}
		if !(e <= tol) {
			t.Errorf("%s cache: prompt logits rel. error cuda vs cpu %.3e > %.0e", kvType, e, tol)
		}
		if kvType == quant.F32 && (same < genTokens || !(all <= tol)) {
			t.Errorf("F32 cache: greedy tokens part at %d (cuda %v, cpu %v), or a step's logits %.3e apart", same, gt, ct, all)
		}
		gpu.Close()
	}

	gpu, err := model.New(fm, model.Options{Backends: []backend.Backend{be}})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	s, err := gpu.NewSession(len(prompt) + 1)
	if err != nil {
		t.Fatal(err)
	}
	var chunked []float32
	for _, part := range [][]int32{prompt[:7], prompt[7:57], prompt[57:]} {
		if chunked, err = s.Prefill(part); err != nil {
			t.Fatal(err)
		}
	}
	e := relErr(chunked, cs[0])
	fmt.Printf("RESULT|mla|deepseek-v2-lite-attn chunked prefill 7+50+243: logits rel. error cuda vs cpu|%.2e|\n", e)
	if !(e <= 1e-4) {
		t.Errorf("chunked prefill: logits rel. error cuda vs cpu %.3e > 1e-4", e)
	}

	const bs = 16
	kvC, err := cpu.NewKVCache(32, bs)
	if err != nil {
		t.Fatal(err)
	}
	kvG, err := gpu.NewKVCache(32, bs)
	if err != nil {
		t.Fatal(err)
	}
	c := cpu.Config()
	if got, want := kvC.BlockBytes(), c.Layers*bs*(c.RopeDim+c.KVLoRARank)*4; got != want || kvG.BlockBytes() != want {
		t.Fatalf("BlockBytes: cpu %d, gpu %d, want %d (one vector a slot)", got, kvG.BlockBytes(), want)
	}
	if _, err := cpu.Forward(stepBatch([]int{40}, bs), kvC); err != nil {
		t.Fatal(err)
	}
	blocks := []int32{0, 1, 2}
	data := readBlocks(t, kvC, blocks)
	if err := kvG.WriteBlocks(blocks, data); err != nil {
		t.Fatal(err)
	}
	table := []int32{0, 1, 2, 3}
	want, got := decodeStep(t, cpu, kvC, table, 40), decodeStep(t, gpu, kvG, table, 40)
	e = relErr(got, want)
	fmt.Printf("RESULT|mla|deepseek-v2-lite-attn blocks cpu->gpu, next token: logits rel. error|%.2e|\n", e)
	if !(e <= 1e-4) {
		t.Errorf("blocks moved from the CPU: the GPU's next logits %.3e from the CPU's", e)
	}
}

// TestBackendMLAQuantizedCache: an int8 cache of deepseek-v2-tiny (64 values a token, the
// values its keys: the rope_kvq write stores the keys alone) gives the CPU's int8 cache's
// logits on a 24-token prompt within 3e-2 (the GPU's prefill rounds the dequantized tiles
// to BF16 for its tensor cores; 8 greedy tokens are printed); an int8 cache of the
// released 576-value vectors is refused with an error naming the float types it takes.
func TestBackendMLAQuantizedCache(t *testing.T) {
	be := newBackend(t)
	shape, err := synth.Lookup("deepseek-v2-tiny")
	if err != nil {
		t.Fatal(err)
	}
	fm, err := synth.Model(shape, quant.F32, 18)
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	prompt := make([]int32, 24)
	for i := range prompt {
		prompt[i] = int32(3 + (i*131)%500)
	}
	cb := cpubackend.New(0)
	defer cb.Close()
	var logits [2][][]float32
	var tokens [2][]int32
	for i, b := range []backend.Backend{be, cb} {
		m, err := model.New(fm, model.Options{Backends: []backend.Backend{b}, KVCacheDType: quant.KVInt8})
		if err != nil {
			t.Fatal(err)
		}
		logits[i], tokens[i] = greedyRun(t, m, prompt, 8)
		m.Close()
	}
	e := relErr(logits[0][0], logits[1][0])
	fmt.Printf("RESULT|mla|deepseek-v2-tiny int8 cache: logits rel. error cuda vs cpu|%.2e|greedy %v vs %v\n", e, tokens[0], tokens[1])
	if !(e <= 3e-2) {
		t.Errorf("int8 cache: logits %.3e apart, over 3e-2", e)
	}

	lite, err := synth.Lookup("deepseek-v2-lite-attn")
	if err != nil {
		t.Fatal(err)
	}
	fl, err := synth.Model(lite, quant.F32, 18)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	m, err := model.New(fl, model.Options{Backends: []backend.Backend{be}, KVCacheDType: quant.KVInt8})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.NewKVCache(4, 16); err == nil || !strings.Contains(err.Error(), "f32, f16 or bf16") {
		t.Errorf("an int8 cache of 576-value heads: %v, want an error naming f32, f16 or bf16", err)
	}
}
