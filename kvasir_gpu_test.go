package kvasir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/backend/cudabackend"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
	"github.com/kvasir-llm/kvasir/internal/synth"
	"github.com/kvasir-llm/kvasir/internal/testdata"
)

// gpuEngine starts an engine on a small synthesized llama-3.2-1b-shaped BF16 model on
// CUDA device 0, or skips the test when there is no CUDA driver or device (CI).
func gpuEngine(t *testing.T) *Engine {
	t.Helper()
	if _, n, err := cuda.Devices(); n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	be, err := cudabackend.NewBackend(cudabackend.BackendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	shape, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	shape.Config.Layers, shape.Config.VocabSize = 2, 512
	fm, err := synth.Model(shape, quant.BF16, 3)
	if err != nil {
		t.Fatal(err)
	}
	e, err := OpenModel(fm, Options{Backends: []backend.Backend{be}, Device: Device{CUDA: true}, KVCacheMemory: 256 << 20, MaxModelLen: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// tokens runs requests at once and returns each choice's tokens.
func tokens(t *testing.T, e *Engine, reqs []Request) [][][]int32 {
	t.Helper()
	out := make([][][]int32, len(reqs))
	chans := make([]<-chan Output, len(reqs))
	for i, r := range reqs {
		ch, err := e.Generate(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		chans[i], out[i] = ch, make([][]int32, max(r.Params.N, 1))
	}
	for i, ch := range chans {
		for o := range ch {
			if o.Err != nil {
				t.Fatalf("request %d: %v", i, o.Err)
			}
			out[i][o.Index] = append(out[i][o.Index], o.TokenIDs...)
		}
	}
	return out
}

// TestGPUDeviceSampling: on the GPU, steps of plainly sampled sequences draw their tokens
// on the device. Top-1 and a tiny top-p draw the greedy tokens whatever the random draw;
// a greedy request batched with sampled ones keeps its greedy tokens; seeded sampling is
// reproducible; and sampling with a temperature departs from greedy.
func TestGPUDeviceSampling(t *testing.T) {
	e := gpuEngine(t)
	seed := func(v uint64) *uint64 { return &v }
	prompt := []int32{1, 17, 300, 42, 9, 77, 5}
	params := func(p SamplingParams) Request {
		p.MaxTokens, p.IgnoreEOS = 24, true
		return Request{PromptTokens: prompt, Params: p}
	}
	greedy := tokens(t, e, []Request{params(SamplingParams{})})[0][0]
	mixedReqs := []Request{
		params(SamplingParams{}),
		params(SamplingParams{Temperature: 1, TopK: 1, Seed: seed(1)}),
		params(SamplingParams{Temperature: 0.7, TopP: 1e-6, Seed: seed(2)}),
		params(SamplingParams{Temperature: 1.5, Seed: seed(3), N: 3}),
		params(SamplingParams{Temperature: 0.9, TopK: 50, TopP: 0.9, Seed: seed(4)}),
	}
	mixed := tokens(t, e, mixedReqs)
	for i, name := range []string{"greedy in a mixed batch", "top-1", "tiny top-p"} {
		if !slices.Equal(mixed[i][0], greedy) {
			t.Errorf("%s: %v, greedy alone: %v", name, mixed[i][0], greedy)
		}
	}
	if slices.Equal(mixed[3][0], greedy) && slices.Equal(mixed[3][1], greedy) {
		t.Errorf("temperature 1.5 gave the greedy tokens twice: %v", mixed[3])
	}
	// The same seeded workload again gives the same tokens. (Across different batch
	// compositions the GPU's logits differ in their last bits, GEMV and GEMM kernels
	// summing in different orders, which may move a draw that falls on a boundary.)
	again := tokens(t, e, mixedReqs)
	if fmt.Sprint(again) != fmt.Sprint(mixed) {
		t.Errorf("seeded sampling is not reproducible:\n%v\n%v", mixed, again)
	}
	for _, r := range mixed {
		for _, c := range r {
			for _, tok := range c {
				if tok < 0 || int(tok) >= e.VocabSize() {
					t.Fatalf("token %d outside the vocabulary of %d", tok, e.VocabSize())
				}
			}
		}
	}
}

// splitTieGap bounds the top-2 log-probability gap at which a split model may pick the
// other token: the ranks' partial sums meet in another order than one GPU's, and such a
// near-tie of random weights can go either way.
const splitTieGap = 0.05

// TestGPUSplit: on a machine with two or more CUDA devices, a synthesized llama-3.2-1b-shaped
// BF16 model split by tensor (TP=2, NCCL all-reduces) and by pipeline (PP=2, NCCL send and
// receive) across cuda:0 and cuda:1 gives, for a batch of greedy requests, the tokens of
// the whole model on cuda:0 — up to a near-tie (a top-2 gap under splitTieGap on one GPU,
// the split model taking the runner-up), after which the sequences may differ. It skips
// with fewer devices.
func TestGPUSplit(t *testing.T) {
	if _, n, err := cuda.Devices(); n < 2 {
		t.Skipf("skipping multi-GPU test: %d CUDA devices (%v)", n, err)
	}
	shape, err := synth.Lookup("llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	shape.Config.Layers, shape.Config.VocabSize = 4, 2048
	fm, err := synth.Model(shape, quant.BF16, 5)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for i := range 6 {
		ids := make([]int32, 5+7*i)
		for j := range ids {
			ids[j] = int32(1 + (j*131+i*17)%2000)
		}
		reqs = append(reqs, Request{PromptTokens: ids, Params: SamplingParams{MaxTokens: 32, IgnoreEOS: true, Logprobs: true, TopLogprobs: 2}})
	}
	run := func(opt Options, devices int) ([][]int32, [][]Logprob) {
		bes := make([]*cudabackend.Backend, devices)
		for i := range bes {
			be, err := cudabackend.NewBackend(cudabackend.BackendOptions{Ordinal: i})
			if err != nil {
				t.Fatal(err)
			}
			bes[i] = be
		}
		opt.KVCacheMemory, opt.MaxModelLen, opt.Device = 256<<20, 512, Device{CUDA: true}
		for _, be := range bes {
			opt.Backends = append(opt.Backends, be)
		}
		e, err := OpenModel(fm, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			e.Close()
			for _, be := range bes {
				be.Close()
			}
		}()
		ids, lps := make([][]int32, len(reqs)), make([][]Logprob, len(reqs))
		chans := make([]<-chan Output, len(reqs))
		for i, r := range reqs {
			if chans[i], err = e.Generate(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		for i, ch := range chans {
			for o := range ch {
				if o.Err != nil {
					t.Fatalf("request %d: %v", i, o.Err)
				}
				ids[i], lps[i] = append(ids[i], o.TokenIDs...), append(lps[i], o.Logprobs...)
			}
		}
		return ids, lps
	}
	want, wantLP := run(Options{}, 1)
	for _, c := range []struct {
		name string
		opt  Options
	}{{"TP=2", Options{TensorParallel: 2}}, {"PP=2", Options{PipelineParallel: 2}}} {
		got, _ := run(c.opt, 2)
		same, ties := 0, ""
		for i := range want {
			j := 0
			for j < min(len(got[i]), len(want[i])) && got[i][j] == want[i][j] {
				j++
			}
			if j == len(want[i]) && len(got[i]) == len(want[i]) {
				same++
				continue
			}
			top := wantLP[i][j].Top
			if j >= len(got[i]) || len(top) < 2 || got[i][j] != top[1].ID || top[0].Logprob-top[1].Logprob > splitTieGap {
				t.Errorf("%s: request %d departs from one GPU at token %d: %v, want %v (one GPU's top 2 there: %+v)",
					c.name, i, j, got[i], want[i], top)
				continue
			}
			ties += fmt.Sprintf(" request %d at token %d (gap %.4f)", i, j, top[0].Logprob-top[1].Logprob)
		}
		fmt.Printf("RESULT|parallel|%s on 2 GPUs (NCCL) vs 1 GPU, 6 greedy requests x 32 tokens|%d/%d equal|near-ties:%s\n", c.name, same, len(want), ties)
	}
}

// allowSet is a processor that allows a fixed set of tokens.
type allowSet struct{ mask sample.Mask }

func (a allowSet) Mask() sample.Mask      { return a.mask }
func (a allowSet) Accept([]int32) error   { return nil }
func (a allowSet) Rollback(int)           {}
func (a allowSet) Clone() sample.Stateful { return a }

// TestGPUProcessorMask: a stateful processor's vocabulary mask reaches the device sampler:
// greedy and sampled requests with a mask of eight tokens, each alone (so their tokens are
// picked on the device), draw only those, and masked greedy decoding equals greedy
// decoding under a logit bias of -100 on every other token (a different road: host
// logits), and masked greedy with logprobs (host sampling, its masks computed while the
// forward pass runs).
func TestGPUProcessorMask(t *testing.T) {
	e := gpuEngine(t)
	allowed := []int32{4, 9, 33, 100, 101, 250, 400, 511}
	bias := map[int32]float32{}
	for id := range int32(512) {
		if !slices.Contains(allowed, id) {
			bias[id] = -100
		}
	}
	prompt := []int32{1, 17, 300, 42, 9, 77, 5}
	seed := uint64(5)
	mk := func(p SamplingParams, masked bool) Request {
		p.MaxTokens, p.IgnoreEOS = 24, true
		r := Request{PromptTokens: prompt, Params: p}
		if masked {
			r.Processors = []sample.Stateful{allowSet{sample.NewMask(512, allowed...)}}
		}
		return r
	}
	// One at a time: a step with the biased request takes host logits for all.
	var got [][][]int32
	for _, r := range []Request{mk(SamplingParams{}, true), mk(SamplingParams{LogitBias: bias}, false), mk(SamplingParams{Temperature: 1, Seed: &seed}, true),
		mk(SamplingParams{Logprobs: true}, true)} {
		got = append(got, tokens(t, e, []Request{r})[0])
	}
	for i, r := range [][]int32{got[0][0], got[2][0]} {
		for _, tok := range r {
			if !slices.Contains(allowed, tok) {
				t.Fatalf("request %d drew token %d, not allowed", i, tok)
			}
		}
	}
	if !slices.Equal(got[0][0], got[1][0]) {
		t.Errorf("masked greedy %v, logit-biased greedy %v", got[0][0], got[1][0])
	}
	if !slices.Equal(got[0][0], got[3][0]) {
		t.Errorf("masked greedy %v, masked greedy with logprobs (host sampling) %v", got[0][0], got[3][0])
	}
	fmt.Printf("RESULT|engine|processor mask on the device sampler (greedy = biased greedy)|%v|\n", slices.Equal(got[0][0], got[1][0]))
}

// TestGPUOpenDevice: with Device cuda, Load makes the CUDA backends itself and the KV
// cache's element type reaches the GPU by the spec alone: auto is bf16, f16 and f32 are
// held as asked. With an f32 cache, the engine's greedy story of stories260K from BOS is
// llama2.c's. With two or more GPUs, a tensor-parallel split makes one backend per GPU.
func TestGPUOpenDevice(t *testing.T) {
	if _, n, err := cuda.Devices(); n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	bin, tok := gpuStoriesFile(t, "stories260K.bin"), gpuStoriesFile(t, "tok512.bin")
	want, err := os.ReadFile(gpuStoriesFile(t, "ref_runc_greedy200.txt"))
	if err != nil {
		t.Fatal(err)
	}
	story := func(opt Options) (string, *Engine) {
		opt.Tokenizer, opt.Device, opt.KVCacheMemory = tok, Device{CUDA: true}, 64<<20
		e, err := Open(bin, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		bos := int32(e.Loaded().Tokenizer().Vocab().BOS)
		ch, err := e.Generate(context.Background(), Request{PromptTokens: []int32{bos}, Params: SamplingParams{MaxTokens: 200}})
		if err != nil {
			t.Fatal(err)
		}
		var text string
		for o := range ch {
			text += o.Text
		}
		return text, e
	}
	for _, tc := range []struct {
		dt    KVCacheDType
		bytes int
	}{{KVCacheAuto, 2}, {KVCacheBF16, 2}, {KVCacheF16, 2}, {KVCacheF32, 4}} {
		text, e := story(Options{KVCacheDType: tc.dt})
		if !e.Loaded().OnDevice() || e.sizing.BytesPerElem != tc.bytes || text == "" {
			t.Errorf("%s cache: on device %v, %d bytes per element (want %d), story %q", tc.dt, e.Loaded().OnDevice(), e.sizing.BytesPerElem, tc.bytes, text)
		}
		if tc.dt == KVCacheF32 && text != string(want) {
			t.Errorf("f32 cache on the GPU: story\n%q\nwant llama2.c's\n%q", text, want)
		}
		fmt.Printf("RESULT|kvasir|stories260K greedy 200 through Open on cuda, %s KV|%d bytes per element|equal to run.c: %v\n", tc.dt, e.sizing.BytesPerElem, text == string(want))
	}
	if _, n, _ := cuda.Devices(); n >= 2 {
		text, e := story(Options{KVCacheDType: KVCacheF32, TensorParallel: 2})
		if sizing := e.KVCacheSizing(); !strings.Contains(sizing, "on each of 2 ranks") || text == "" {
			t.Errorf("tensor-parallel 2 on cuda: sizing %q, story %q", sizing, text)
		}
		fmt.Printf("RESULT|kvasir|stories260K greedy 200 through Open on cuda, TP=2 f32 KV|equal to run.c: %v|\n", text == string(want))
	}
}

// gpuStoriesFile returns the path of a stories260K file: in KVASIR_GPU_TESTDATA when it is
// set (as the CUDA package's GPU tests take it), else in the shared test data.
func gpuStoriesFile(t *testing.T, name string) string {
	t.Helper()
	if d := os.Getenv("KVASIR_GPU_TESTDATA"); d != "" {
		return filepath.Join(d, name)
	}
	return testdata.Path(t, "models/stories260K/"+name)
}

// TestGPUSpeculativeGreedy: on the GPU, with an f32 KV cache, greedy output of stories260K
// is the same with each proposer as without (ngram, llama2xs as a draft model, and the
// first two layers as a layer-skip draft; fixed K = 4, so that every step verifies), one
// request at a time and four at once, and the drafts were verified and partly kept.
func TestGPUSpeculativeGreedy(t *testing.T) {
	if _, n, err := cuda.Devices(); n == 0 {
		t.Skipf("skipping GPU test: no CUDA device (%v)", err)
	}
	bin, tok, draft := gpuStoriesFile(t, "stories260K.bin"), gpuStoriesFile(t, "tok512.bin"), gpuStoriesFile(t, "llama2xs.bin")
	open := func(sc *SpeculativeConfig) *Engine {
		e, err := Open(bin, Options{Tokenizer: tok, Device: Device{CUDA: true}, KVCacheDType: KVCacheF32, KVCacheMemory: 64 << 20, MaxModelLen: 256, Speculative: sc})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	var reqs []Request
	for i, p := range []string{"Once upon a time", "Lily and Ben", "The cat sat", "One day, a little"} {
		reqs = append(reqs, Request{Prompt: p, Params: SamplingParams{MaxTokens: 48 + 8*i, IgnoreEOS: true}})
	}
	run := func(e *Engine) (alone, batched [][]int32) {
		for _, r := range reqs {
			alone = append(alone, tokens(t, e, []Request{r})[0][0])
		}
		for _, c := range tokens(t, e, reqs) {
			batched = append(batched, c[0])
		}
		return alone, batched
	}
	ref, refBatched := run(open(nil))
	for i := range ref {
		if !slices.Equal(ref[i], refBatched[i]) {
			t.Errorf("without speculation, request %d alone %v, batched %v", i, ref[i], refBatched[i])
		}
	}
	for _, js := range []string{
		`{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "dynamic": false}`,
		`{"model": "` + draft + `", "num_speculative_tokens": 4, "dynamic": false}`,
		`{"method": "layer_skip", "draft_layers": 2, "num_speculative_tokens": 4, "dynamic": false}`,
	} {
		sc := mustSpec(t, js)
		e := open(sc)
		alone, batched := run(e)
		same := 0
		for i := range ref {
			if slices.Equal(alone[i], ref[i]) && slices.Equal(batched[i], ref[i]) {
				same++
				continue
			}
			t.Errorf("%s: request %d alone %v, batched %v, without speculation %v", sc.Method, i, alone[i], batched[i], ref[i])
		}
		st := e.Stats()
		if st.SpecDrafts == 0 || st.AcceptedDrafts == 0 {
			t.Errorf("%s: %d verifications, %d drafts kept: the test did not speculate", sc.Method, st.SpecDrafts, st.AcceptedDrafts)
		}
		fmt.Printf("RESULT|engine|stories260K greedy with %s on cuda (f32 KV), alone and batched|%d/%d equal|%d verifications, %d of %d drafts kept\n",
			sc.Method, same, len(ref), st.SpecDrafts, st.AcceptedDrafts, st.DraftTokens)
	}
}
