package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/lora"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// baseNames are the GGUF names of the targets' base weights.
var baseNames = [lora.NumTargets]string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}

// mergeInto replaces fm's weights by the merged W + scale·B·A of adapter a (F32): the
// model the adapter must be equal to.
func mergeInto(t *testing.T, fm *format.Model, a *lora.Adapter) {
	t.Helper()
	for l := range fm.Config.Layers {
		for tg := range lora.NumTargets {
			w, ok := fm.Tensor(fmt.Sprintf("blk.%d.%s.weight", l, baseNames[tg]))
			if !ok {
				t.Fatalf("no base tensor for layer %d %s", l, tg)
			}
			vals := make([]float32, w.Elements())
			if err := quant.Dequantize(w.Type, w.Data, vals); err != nil {
				t.Fatal(err)
			}
			merged := a.Merged(l, tg, vals)
			data := make([]byte, 4*len(merged))
			for i, v := range merged {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
			}
			w.Type, w.Data = quant.F32, data
		}
	}
}

// loraRun is one sequence of a multi-sequence greedy generation: its prompt, its adapter
// and its blocks.
type loraRun struct {
	prompt  []int32
	adapter *lora.Adapter
	table   []int32
}

// generateLoRA prefills the runs together in one step, then decodes n tokens of each, all
// runs in every step, and returns each run's tokens and the logits of each of its steps.
func generateLoRA(t *testing.T, m *Model, kv *KVCache, runs []loraRun, n int) ([][]int32, [][][]float32) {
	t.Helper()
	bs := kv.BlockSize
	toks := make([][]int32, len(runs))
	logits := make([][][]float32, len(runs))
	ctx := make([]int, len(runs))
	for step := 0; step <= n; step++ {
		b := &Batch{}
		for i, r := range runs {
			in := r.prompt
			if step > 0 {
				in = toks[i][len(toks[i])-1:]
			}
			q := len(b.Tokens)
			for _, tok := range in {
				p := ctx[i]
				b.Tokens = append(b.Tokens, tok)
				b.Positions = append(b.Positions, int32(p))
				b.SlotMapping = append(b.SlotMapping, r.table[p/bs]*int32(bs)+int32(p%bs))
				ctx[i]++
			}
			b.Seqs = append(b.Seqs, Seq{BlockTable: r.table, QueryStart: q, QueryLen: len(in), ContextLen: ctx[i], Adapter: r.adapter})
			b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
		}
		out, err := m.Forward(b, kv)
		if err != nil {
			t.Fatal(err)
		}
		v := m.Config().VocabSize
		for i := range runs {
			row := out[i*v : (i+1)*v]
			logits[i] = append(logits[i], row)
			toks[i] = append(toks[i], int32(sample.Greedy(row)))
		}
	}
	return toks, logits
}

// loraModel makes a CPU model of fm with LoRA enabled (slots of maxRank) and a cache.
func loraModel(t *testing.T, fm *format.Model, slots, maxRank int) (*Model, *KVCache) {
	t.Helper()
	m, err := New(fm, Options{Backends: cpuBackends(t, 2, Parallel{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if slots > 0 {
		if err := m.EnableLoRA(slots, maxRank); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := m.NewKVCache(32, 16)
	if err != nil {
		t.Fatal(err)
	}
	return m, kv
}

func closeLogits(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	for s := range want {
		for j := range want[s] {
			if d := math.Abs(float64(got[s][j] - want[s][j])); d > 2e-3*(1+math.Abs(float64(want[s][j]))) {
				t.Fatalf("%s: step %d logit %d = %v, want %v", what, s, j, got[s][j], want[s][j])
			}
		}
	}
}

// TestLoRAEqualsMergedWeights is the oracle of multi-LoRA serving on the real stories260K:
// a base request and requests of two adapters of ranks 8 and 64 (written as a PEFT folder
// and a GGUF LoRA file, read back as a server reads them), batched in every step, give
// the greedy tokens of the base model and of each merged-weights model W + (alpha/r)·B·A
// run alone, with logits close; and each equals its request run alone through the
// adapters.
func TestLoRAEqualsMergedWeights(t *testing.T) {
	fm, tok := openStories(t, "stories260K.gguf")
	c := fm.Config
	dir := t.TempDir()
	all := []lora.Target{lora.Q, lora.K, lora.V, lora.O, lora.Gate, lora.Up, lora.Down}
	if err := lora.WritePEFT(filepath.Join(dir, "peft"), lora.Random(c, 8, 16, all, 0.08, 1), c, true); err != nil {
		t.Fatal(err)
	}
	if err := lora.WriteGGUF(filepath.Join(dir, "a.gguf"), lora.Random(c, 64, 32, []lora.Target{lora.Q, lora.V, lora.O, lora.Down}, 0.04, 2), c); err != nil {
		t.Fatal(err)
	}
	reg := lora.NewRegistry(c, 64)
	a8, err := reg.Load("r8", filepath.Join(dir, "peft"))
	if err != nil {
		t.Fatal(err)
	}
	a64, err := reg.Load("r64", filepath.Join(dir, "a.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	ids := func(s string) []int32 {
		var out []int32
		for _, id := range tok.Encode(s, tokenizer.EncodeOptions{AddSpecial: true}) {
			out = append(out, int32(id))
		}
		return out
	}
	prompts := [][]int32{ids("Once upon a time"), ids("The little dog"), ids("One day, Lily")}
	adapters := []*lora.Adapter{nil, a8, a64}
	const n = 24
	runs := make([]loraRun, 3)
	for i := range runs {
		runs[i] = loraRun{prompt: prompts[i], adapter: adapters[i], table: []int32{int32(4 * i), int32(4*i + 1), int32(4*i + 2), int32(4*i + 3)}}
	}
	m, kv := loraModel(t, fm, 2, 64)
	batched, batchedLogits := generateLoRA(t, m, kv, runs, n)

	for i, a := range adapters {
		// The merged-weights model, alone.
		mf, _ := openStories(t, "stories260K.gguf")
		if a != nil {
			mergeInto(t, mf, a)
		}
		mm, mkv := loraModel(t, mf, 0, 0)
		alone := runs[i]
		alone.adapter = nil
		want, wantLogits := generateLoRA(t, mm, mkv, []loraRun{alone}, n)
		if !slices.Equal(batched[i], want[0]) {
			t.Errorf("request %d: batched %v, merged model alone %v", i, batched[i], want[0])
		}
		closeLogits(t, fmt.Sprintf("request %d", i), batchedLogits[i], wantLogits[0])
		// The same request alone through the adapters.
		m1, kv1 := loraModel(t, fm, 1, 64)
		one, _ := generateLoRA(t, m1, kv1, []loraRun{runs[i]}, n)
		if !slices.Equal(batched[i], one[0]) {
			t.Errorf("request %d: batched %v, alone %v", i, batched[i], one[0])
		}
	}
	// The adapters change the model: otherwise the test above proves nothing.
	base := runs[1]
	base.adapter = nil
	mb, kvb := loraModel(t, fm, 0, 0)
	plain, _ := generateLoRA(t, mb, kvb, []loraRun{base}, n)
	if slices.Equal(plain[0], batched[1]) {
		t.Fatalf("adapter r8 left the greedy tokens of the base unchanged: %v", plain[0])
	}
}

// TestLoRASlotsPage: with one slot, steps that alternate between two adapters page them in
// and out, and each step's logits equal those of a model whose slot never changes; a step
// that names more adapters than there are slots is refused with a clear error.
func TestLoRASlotsPage(t *testing.T) {
	fm, _ := openStories(t, "stories260K.gguf")
	c := fm.Config
	a1 := lora.Random(c, 4, 8, []lora.Target{lora.Q, lora.Up}, 0.1, 5)
	a2 := lora.Random(c, 16, 8, []lora.Target{lora.K, lora.Down}, 0.1, 6)
	a1.Name, a2.Name = "one", "two"
	prompt := []int32{1, 20, 30, 40, 50}
	runOne := func(m *Model, kv *KVCache, a *lora.Adapter, block int32) []float32 {
		_, lg := generateLoRA(t, m, kv, []loraRun{{prompt: prompt, adapter: a, table: []int32{block}}}, 0)
		return lg[0][0]
	}
	paged, pkv := loraModel(t, fm, 1, 16)
	fixed1, kv1 := loraModel(t, fm, 1, 16)
	fixed2, kv2 := loraModel(t, fm, 1, 16)
	for i := range 4 {
		a, fixed, fkv := a1, fixed1, kv1
		if i%2 == 1 {
			a, fixed, fkv = a2, fixed2, kv2
		}
		got, want := runOne(paged, pkv, a, int32(i)), runOne(fixed, fkv, a, int32(i))
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: logits after paging differ from a resident adapter's", i)
		}
	}
	if got := paged.LoRAPageIns(); got != 4 {
		t.Fatalf("%d page-ins, want 4", got)
	}
	if got := fixed1.LoRAPageIns(); got != 1 {
		t.Fatalf("%d page-ins of a resident adapter, want 1", got)
	}
	b := &Batch{Tokens: []int32{1, 2}, Positions: []int32{0, 0}, SlotMapping: []int32{0, 16},
		Seqs:          []Seq{{BlockTable: []int32{0}, QueryLen: 1, ContextLen: 1, Adapter: a1}, {BlockTable: []int32{1}, QueryStart: 1, QueryLen: 1, ContextLen: 1, Adapter: a2}},
		LogitsIndices: []int{0, 1}}
	if _, err := paged.Forward(b, pkv); err == nil || !strings.Contains(err.Error(), "more adapters than the 1 slots (--max-loras)") {
		t.Fatalf("two adapters in one slot: %v", err)
	}
	// A step of two adapters neither resident (a1 would take the slot, a3 finds none) is
	// refused too, and leaves no slot claiming an adapter it did not copy in: a1 alone
	// still gives its logits.
	a3 := lora.Random(c, 4, 8, []lora.Target{lora.V}, 0.1, 8)
	a3.Name = "three"
	b.Seqs[0].Adapter, b.Seqs[1].Adapter = a1, a3
	if _, err := paged.Forward(b, pkv); err == nil {
		t.Fatal("two new adapters in one slot accepted")
	}
	if got, want := runOne(paged, pkv, a1, 5), runOne(fixed1, kv1, a1, 5); !slices.Equal(got, want) {
		t.Fatal("logits after a refused step differ")
	}
	big := lora.Random(c, 32, 8, []lora.Target{lora.Q}, 0.1, 7)
	big.Name = "big"
	b.Seqs[1].Adapter = big
	b.Seqs[0].Adapter = nil
	if _, err := paged.Forward(b, pkv); err == nil || !strings.Contains(err.Error(), "rank 32: the slots hold rank 16") {
		t.Fatalf("rank beyond the slots: %v", err)
	}
	plain, pkv2 := loraModel(t, fm, 0, 0)
	if _, err := plain.Forward(b, pkv2); err == nil || !strings.Contains(err.Error(), "LoRA is not enabled") {
		t.Fatalf("adapter without LoRA: %v", err)
	}
}

// TestLoRAPaddedSteps: on a backend that pads steps to graph shapes (3 sequences run as 4,
// the padding tokens of no adapter), a batch of the base and two adapters gives the
// logits of the unpadded steps, and the steps with adapters go to RunStep as steps of
// their own kind.
func TestLoRAPaddedSteps(t *testing.T) {
	fm, _ := openStories(t, "stories260K.gguf")
	c := fm.Config
	a1 := lora.Random(c, 8, 16, []lora.Target{lora.Q, lora.V, lora.Up}, 0.08, 11)
	a2 := lora.Random(c, 16, 16, []lora.Target{lora.K, lora.O, lora.Down}, 0.08, 12)
	runs := []loraRun{{prompt: []int32{1, 30, 40}, table: []int32{0, 1}}, {prompt: []int32{1, 50}, adapter: a1, table: []int32{2, 3}},
		{prompt: []int32{1, 60, 70, 80}, adapter: a2, table: []int32{4, 5}}}
	plain, pkv := loraModel(t, fm, 2, 16)
	want, wantLogits := generateLoRA(t, plain, pkv, runs, 8)
	pb := &padBackend{Backend: cpubackend.New(2)}
	t.Cleanup(func() { pb.Close() })
	padded, err := New(fm, Options{Backends: []backend.Backend{pb}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(padded.Close)
	if err := padded.EnableLoRA(2, 16); err != nil {
		t.Fatal(err)
	}
	kv, err := padded.NewKVCache(32, 16)
	if err != nil {
		t.Fatal(err)
	}
	got, gotLogits := generateLoRA(t, padded, kv, runs, 8)
	for i := range runs {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("request %d: padded %v, unpadded %v", i, got[i], want[i])
		}
		closeLogits(t, fmt.Sprintf("request %d padded", i), gotLogits[i], wantLogits[i])
	}
	if pb.steps == 0 {
		t.Fatal("no step went to RunStep")
	}
}

// TestLoRAHuggingFaceBase: on the real TinyStories-656K Hugging Face folder (q and k rows
// in the NeoX order, no permutation), a PEFT adapter and a llama.cpp GGUF adapter (whose
// q and k rows llama.cpp keeps interleaved, permuted back on loading) each give the
// greedy tokens of their merged-weights model, batched with the base.
func TestLoRAHuggingFaceBase(t *testing.T) {
	dirPath := testdata.Path(t, "models/tinystories-656k")
	fm, err := format.Open(dirPath, format.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	c := fm.Config
	dir := t.TempDir()
	peft, gg := filepath.Join(dir, "peft"), filepath.Join(dir, "a.gguf")
	if err := lora.WritePEFT(peft, lora.Random(c, 8, 16, []lora.Target{lora.Q, lora.K, lora.O, lora.Up}, 0.1, 21), c, false); err != nil {
		t.Fatal(err)
	}
	if err := lora.WriteGGUF(gg, lora.Random(c, 16, 16, []lora.Target{lora.Q, lora.K, lora.V, lora.Down}, 0.3, 22), c); err != nil {
		t.Fatal(err)
	}
	reg := lora.NewRegistry(c, 16)
	ap, err := reg.Load("peft", peft)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := reg.Load("gguf", gg)
	if err != nil {
		t.Fatal(err)
	}
	runs := []loraRun{{prompt: []int32{1, 100, 200, 300}, table: []int32{0, 1}}, {prompt: []int32{1, 400, 500}, adapter: ap, table: []int32{2, 3}},
		{prompt: []int32{1, 600}, adapter: ag, table: []int32{4, 5}}}
	m, kv := loraModel(t, fm, 2, 16)
	got, _ := generateLoRA(t, m, kv, runs, 16)
	for i, r := range runs {
		mf, err := format.Open(dirPath, format.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mf.Close() })
		if r.adapter != nil {
			mergeInto(t, mf, r.adapter)
		}
		mm, mkv := loraModel(t, mf, 0, 0)
		alone := r
		alone.adapter = nil
		want, _ := generateLoRA(t, mm, mkv, []loraRun{alone}, 16)
		if !slices.Equal(got[i], want[0]) {
			t.Errorf("request %d: batched %v, merged model alone %v", i, got[i], want[0])
		}
	}
	if plain, _ := generateLoRA(t, m, kv, []loraRun{{prompt: runs[2].prompt, table: []int32{6, 7}}}, 16); slices.Equal(plain[0], got[2]) {
		t.Errorf("the GGUF adapter left the base's tokens unchanged: %v", plain[0])
	}
}
