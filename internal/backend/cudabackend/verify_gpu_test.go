package cudabackend_test

// Device tests of speculative decoding's steps on the GPU: verify steps of 1+k tokens per
// sequence replayed as graphs, their agreement with decode steps, and the first-layers view
// of self-speculation.

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/sample"
)

// gpuSeqs are sequences of random tokens over one KV cache, sequence i in blocks
// i*perSeq .. (i+1)*perSeq-1.
type gpuSeqs struct {
	tokens [][]int32
	tables [][]int32
	bs     int
}

// newGPUSeqs makes n sequences of maxLen random tokens each (ids from 3 on), in blocks of
// bs slots.
func newGPUSeqs(r *rand.Rand, n, maxLen, bs, vocab int) *gpuSeqs {
	g := &gpuSeqs{bs: bs}
	per := (maxLen + bs - 1) / bs
	for i := range n {
		toks := make([]int32, maxLen)
		for j := range toks {
			toks[j] = int32(3 + r.IntN(vocab-3))
		}
		table := make([]int32, per)
		for j := range table {
			table[j] = int32(i*per + j)
		}
		g.tokens, g.tables = append(g.tokens, toks), append(g.tables, table)
	}
	return g
}

// blocks returns the cache blocks the sequences need.
func (g *gpuSeqs) blocks() int { return len(g.tables) * len(g.tables[0]) }

// batch returns the step of every sequence's tokens [from[i], to[i]), with the logits of
// every token (all) or of each sequence's last.
func (g *gpuSeqs) batch(from, to []int, all bool) *model.Batch {
	b := &model.Batch{}
	for i := range g.tokens {
		start := len(b.Tokens)
		for p := from[i]; p < to[i]; p++ {
			b.Tokens = append(b.Tokens, g.tokens[i][p])
			b.Positions = append(b.Positions, int32(p))
			b.SlotMapping = append(b.SlotMapping, g.tables[i][p/g.bs]*int32(g.bs)+int32(p%g.bs))
			if all || p == to[i]-1 {
				b.LogitsIndices = append(b.LogitsIndices, len(b.Tokens)-1)
			}
		}
		b.Seqs = append(b.Seqs, model.Seq{BlockTable: g.tables[i], QueryStart: start, QueryLen: to[i] - from[i], ContextLen: to[i]})
	}
	return b
}

// forward runs b on m over kv and returns the logits.
func forward(t *testing.T, m *model.Model, b *model.Batch, kv *model.KVCache) []float32 {
	t.Helper()
	l, err := m.Forward(b, kv)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sameBits counts the values of a and b with the same bits.
func sameBits(a, b []float32) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if math.Float32bits(a[i]) == math.Float32bits(b[i]) {
			n++
		}
	}
	return n
}

// verifyModels opens the models the verify tests run: stories260K (f32 weights, small
// heads) and, when synthesized under KVASIR_GPU_MODELS, BF16 llama-3.2-1b and qwen3-0.6b.
func verifyModels(t *testing.T) map[string]func(t *testing.T) *format.Model {
	open := func(name string) func(t *testing.T) *format.Model {
		return func(t *testing.T) *format.Model {
			fm, err := format.Open(synthFile(t, name), format.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fm.Close() })
			return fm
		}
	}
	return map[string]func(t *testing.T) *format.Model{
		"stories260K": func(t *testing.T) *format.Model {
			fm := openStories(t)
			t.Cleanup(func() { fm.Close() })
			return fm
		},
		"llama-3.2-1b.gguf": open("llama-3.2-1b.gguf"),
		"qwen3-0.6b.gguf":   open("qwen3-0.6b.gguf"),
	}
}

// TestBackendVerifySteps: verify steps of 1+k tokens per sequence (k = 1, 4, 16; one
// sequence, and three padded to a bucket of four), over f32 and bf16 KV caches, run eagerly
// the first time, are captured as graphs the second and replayed the third, and all three
// give the same logits, bit for bit; they agree with the CPU backend's (f32 cache) within
// the CPU-GPU test's tolerance (5e-2 over a bf16 cache), and the device's greedy ids are the
// argmax of those logits.
func TestBackendVerifySteps(t *testing.T) {
	for name, open := range verifyModels(t) {
		for _, kvDT := range []quant.Type{quant.F32, quant.BF16} {
			t.Run(fmt.Sprintf("%s/%s", name, kvDT), func(t *testing.T) {
				testVerifySteps(t, open(t), name, kvDT)
			})
		}
	}
}

// testVerifySteps is TestBackendVerifySteps for one model and KV cache type.
func testVerifySteps(t *testing.T, fm *format.Model, name string, kvDT quant.Type) {
	be := newBackend(t)
	gpu, err := model.New(fm, model.Options{Backends: []backend.Backend{be}, KVCacheDType: kvDT})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	cpuBackend := cpubackend.New(0)
	defer cpuBackend.Close()
	cpu, err := model.New(fm, model.Options{Backends: []backend.Backend{cpuBackend}})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	tol := 2e-2
	if kvDT != quant.F32 {
		tol = 5e-2
	}
	vocab := fm.Config.VocabSize
	r := rand.New(rand.NewPCG(9, 10))
	shapes, captured := 0, 0
	for _, seqs := range []int{1, 3} {
		for _, k := range []int{1, 4, 16} {
			g := newGPUSeqs(r, seqs, 64, 16, vocab)
			gkv, err := gpu.NewKVCache(g.blocks(), 16)
			if err != nil {
				t.Fatal(err)
			}
			ckv, err := cpu.NewKVCache(g.blocks(), 16)
			if err != nil {
				t.Fatal(err)
			}
			from, to := make([]int, seqs), make([]int, seqs)
			for i := range seqs {
				from[i] = 30 + 3*i
				to[i] = from[i] + 1 + k
			}
			pre := g.batch(make([]int, seqs), from, false)
			forward(t, gpu, pre, gkv)
			forward(t, cpu, pre, ckv)
			step := g.batch(from, to, true)
			// The first run is eager (and may grow buffers, which drops earlier graphs);
			// the second captures the step's graph and the third replays it.
			runs := [3][]float32{}
			var eager int
			for i := range runs {
				runs[i] = forward(t, gpu, step, gkv) // rewrites the same slots with the same values
				if i == 0 {
					eager, _, _ = be.GraphStats()
				}
			}
			if after, _, _ := be.GraphStats(); after != eager+1 {
				t.Errorf("%d seqs x 1+%d: %d graphs after the eager run, %d after capture and replay", seqs, k, eager, after)
			} else {
				captured++
			}
			want := forward(t, cpu, step, ckv)
			label := fmt.Sprintf("%s %s KV, %d seqs x 1+%d", name, kvDT, seqs, k)
			same := min(sameBits(runs[1], runs[0]), sameBits(runs[2], runs[0]))
			e := relErr(runs[0], want)
			fmt.Printf("RESULT|graph|%s: capture and replay vs eager|%d/%d bit-identical|logits rel. error vs cpu %.2e\n",
				label, same, len(runs[0]), e)
			if same != len(runs[0]) {
				t.Errorf("%s: graph replays differ from the eager step in %d of %d logits", label, len(runs[0])-same, len(runs[0]))
			}
			if e > tol || math.IsNaN(e) {
				t.Errorf("%s: logits rel. error %.3e vs the CPU > %.0e", label, e, tol)
			}
			ids, err := gpu.ForwardGreedy(step, gkv, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				if w := sample.Greedy(runs[0][i*vocab : (i+1)*vocab]); int(id) != w {
					t.Errorf("%s: row %d: device greedy %d, argmax of the logits %d", label, i, id, w)
				}
			}
			shapes++
		}
	}
	_, failed, ferr := be.GraphStats()
	fmt.Printf("RESULT|graph|%s %s KV verify steps: shapes captured and replayed|%d of %d|failed %d (%v)\n", name, kvDT, captured, shapes, failed, ferr)
	if failed > 0 {
		t.Errorf("%d verify shapes failed to capture: %v", failed, ferr)
	}
}

// TestBackendVerifyMatchesDecode: on the synthesized BF16 models, a verify step of 1+k
// tokens (k = 1, 4, 7: at most the GEMV kernels' 8 rows) of one sequence gives, row for row,
// the very logits of the k+1 decode steps of those tokens one after another, bit for bit:
// its matmuls sum each row as a one-row step does and its attention kernel computes each
// query as the decode kernel does, so greedy speculative decoding on the GPU keeps the
// tokens of plain decoding.
func TestBackendVerifyMatchesDecode(t *testing.T) {
	for _, name := range []string{"llama-3.2-1b.gguf", "qwen3-0.6b.gguf"} {
		t.Run(name, func(t *testing.T) {
			fm := verifyModels(t)[name](t)
			be := newBackend(t)
			gpu, err := model.New(fm, model.Options{Backends: []backend.Backend{be}, KVCacheDType: quant.BF16})
			if err != nil {
				t.Fatal(err)
			}
			defer gpu.Close()
			vocab := fm.Config.VocabSize
			r := rand.New(rand.NewPCG(11, 12))
			for _, k := range []int{1, 4, 7} {
				g := newGPUSeqs(r, 1, 64, 16, vocab)
				const plen = 40
				var kvs [2]*model.KVCache
				for i := range kvs {
					if kvs[i], err = gpu.NewKVCache(g.blocks(), 16); err != nil {
						t.Fatal(err)
					}
					forward(t, gpu, g.batch([]int{0}, []int{plen}, false), kvs[i])
				}
				var decode []float32
				for p := plen; p <= plen+k; p++ {
					decode = append(decode, forward(t, gpu, g.batch([]int{p}, []int{p + 1}, true), kvs[0])...)
				}
				verify := forward(t, gpu, g.batch([]int{plen}, []int{plen + 1 + k}, true), kvs[1])
				same := sameBits(verify, decode)
				fmt.Printf("RESULT|model|%s verify 1+%d vs %d decode steps|%d/%d bit-identical|max rel. diff %.2e\n",
					name, k, k+1, same, len(decode), relErr(verify, decode))
				if same != len(decode) {
					t.Errorf("verify 1+%d: %d of %d logits differ from the decode steps' (rel. %.3e)", k, len(decode)-same, len(decode), relErr(verify, decode))
				}
				for j := range k + 1 {
					if a, b := sample.Greedy(verify[j*vocab:(j+1)*vocab]), sample.Greedy(decode[j*vocab:(j+1)*vocab]); a != b {
						t.Errorf("verify 1+%d: row %d: greedy %d, the decode step's %d", k, j, a, b)
					}
				}
			}
		})
	}
}

// truncated returns fm as a model of its first n layers (the others stay in the file,
// unbound): the independent reference of FirstLayers(n).
func truncated(fm *format.Model, n int) *format.Model {
	t := *fm
	t.Config.Layers = n
	return &t
}

// TestBackendFirstLayers: on the GPU, the view of a model's first layers (self-speculation's
// draft) runs on the full model's cache and gives, for decode steps (graphs of its own) and
// a verify step, the logits of a model loaded with only those layers, bit for bit; it
// writes into layers < n only, the bytes the truncated model writes into its own cache;
// and the full model's logits are bit-identical before and after it ran.
func TestBackendFirstLayers(t *testing.T) {
	for name, open := range verifyModels(t) {
		t.Run(name, func(t *testing.T) {
			fm := open(t)
			be := newBackend(t)
			kvDT := quant.BF16
			full, err := model.New(fm, model.Options{Backends: []backend.Backend{be}, KVCacheDType: kvDT})
			if err != nil {
				t.Fatal(err)
			}
			defer full.Close()
			n := fm.Config.Layers / 2
			trunc, err := model.New(truncated(fm, n), model.Options{Backends: []backend.Backend{be}, KVCacheDType: kvDT})
			if err != nil {
				t.Fatal(err)
			}
			defer trunc.Close()
			r := rand.New(rand.NewPCG(13, 14))
			g := newGPUSeqs(r, 2, 64, 16, fm.Config.VocabSize)
			kv, err := full.NewKVCache(g.blocks(), 16)
			if err != nil {
				t.Fatal(err)
			}
			tkv, err := trunc.NewKVCache(g.blocks(), 16)
			if err != nil {
				t.Fatal(err)
			}
			pre := g.batch([]int{0, 0}, []int{30, 33}, false)
			forward(t, full, pre, kv)
			forward(t, trunc, pre, tkv)
			probe := g.batch([]int{30, 33}, []int{31, 34}, true)
			var fullBefore []float32
			for range 3 { // eager, capture, replay
				fullBefore = forward(t, full, probe, kv)
			}
			forward(t, trunc, probe, tkv)
			all := make([]int32, g.blocks())
			for i := range all {
				all[i] = int32(i)
			}
			read := func(c *model.KVCache) []byte {
				buf := make([]byte, len(all)*c.BlockBytes())
				if err := c.ReadBlocks(all, buf); err != nil {
					t.Fatal(err)
				}
				return buf
			}
			kvBefore := read(kv)
			view, err := full.FirstLayers(n)
			if err != nil {
				t.Fatal(err)
			}
			captured, _, _ := be.GraphStats()
			var got, want []float32
			steps := []*model.Batch{g.batch([]int{31, 34}, []int{32, 35}, true), g.batch([]int{32, 35}, []int{33, 36}, true),
				g.batch([]int{33, 36}, []int{34, 37}, true), g.batch([]int{34, 37}, []int{39, 42}, true)}
			for i, b := range steps {
				got = append(got, forward(t, view, b, kv)...)
				want = append(want, forward(t, trunc, b, tkv)...)
				if i == 2 {
					// Three decode steps: the view's and the truncated model's graphs were
					// captured (the verify step's larger buffers may drop them after).
					if now, _, _ := be.GraphStats(); now < captured+2 {
						t.Errorf("the view's decode steps captured no graph of their own (%d graphs before, %d after)", captured, now)
					}
				}
			}
			same := sameBits(got, want)
			fmt.Printf("RESULT|model|%s first %d of %d layers vs the truncated model (3 decode steps, 1 verify 1+4)|%d/%d bit-identical|rel. diff %.2e\n",
				name, n, fm.Config.Layers, same, len(want), relErr(got, want))
			if same != len(want) {
				t.Errorf("the view's logits differ from the truncated model's in %d of %d values (rel. %.3e)", len(want)-same, len(want), relErr(got, want))
			}
			spec := kv.Specs()[0]
			per := spec.BlockBytes() / spec.Layers
			kvAfter, tkvAfter := read(kv), read(tkv)
			tper := tkv.Specs()[0].BlockBytes() / n
			for l := range spec.Layers {
				var a, p, tr []byte
				for b := range all {
					a = append(a, kvAfter[b*spec.BlockBytes()+l*per:][:per]...)
					p = append(p, kvBefore[b*spec.BlockBytes()+l*per:][:per]...)
					if l < n {
						tr = append(tr, tkvAfter[b*tkv.BlockBytes()+l*tper:][:tper]...)
					}
				}
				if l < n && !bytes.Equal(a, tr) {
					t.Errorf("layer %d: the view wrote other keys and values than the truncated model", l)
				}
				if l >= n && !bytes.Equal(a, p) {
					t.Errorf("layer %d: the view wrote into a layer it does not run", l)
				}
			}
			fullAfter := forward(t, full, probe, kv)
			if !slices.Equal(fullAfter, fullBefore) {
				t.Errorf("the full model's logits changed after the view ran (rel. %.3e)", relErr(fullAfter, fullBefore))
			}
			fmt.Printf("RESULT|model|%s full model before/after its first-layers view ran|%v|bit-identical\n", name, slices.Equal(fullAfter, fullBefore))
		})
	}
}
