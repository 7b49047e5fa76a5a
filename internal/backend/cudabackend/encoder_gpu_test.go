package cudabackend_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/encoder"
)

// TestGPUEncoderMatchesCPU runs a synthesized BERT encoder and its cross-encoder twin,
// nomic-bert (RoPE, SwiGLU) and jina-bert-v2 (ALiBi with 4 and 6 heads, GEGLU, q/k norms) on
// the GPU and on the CPU backend (itself checked against a float64 reference in package
// encoder): every pooling mode, sequences of different lengths and segments in one batch,
// pooled states within 1e-4 (cosine >= 0.99999), classifier logits within 1e-4.
func TestGPUEncoderMatchesCPU(t *testing.T) {
	gpu := newBackend(t)
	cpu := cpubackend.New(4)
	defer cpu.Close()
	seqs := []encoder.Sequence{{Tokens: []int32{2, 60, 61, 130, 3}}, {Tokens: []int32{2}}}
	long := encoder.Sequence{Tokens: []int32{2}, Types: []int32{0}}
	for i := range 300 {
		long.Tokens = append(long.Tokens, int32(5+i%100))
		long.Types = append(long.Types, int32(i/150))
	}
	seqs = append(seqs, long)
	for _, shape := range []string{"bert-tiny", "bert-tiny-reranker", "nomic-bert-tiny", "jina-bert-v2-tiny", "jina-bert-v2-tiny-norms"} {
		c, _ := encoder.SynthConfig(shape)
		path := filepath.Join(t.TempDir(), shape+".gguf")
		if err := encoder.WriteSynth(path, shape, c, 3); err != nil {
			t.Fatal(err)
		}
		f, err := encoder.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, mode := range []backend.PoolMode{backend.PoolMean, backend.PoolCLS, backend.PoolLast} {
			var outs [2][][]float32
			var encs [2]*encoder.Encoder
			for i, be := range []backend.Backend{cpu, gpu} {
				if encs[i], err = encoder.New(f, be, &mode); err != nil {
					t.Fatal(err)
				}
				defer encs[i].Close()
				if outs[i], err = encs[i].Forward(seqs); err != nil {
					t.Fatal(err)
				}
			}
			for s := range seqs {
				var ab, aa, bb, maxd float64
				for j, w := range outs[0][s] {
					g := float64(outs[1][s][j])
					ab, aa, bb = ab+g*float64(w), aa+float64(w)*float64(w), bb+g*g
					maxd = math.Max(maxd, math.Abs(g-float64(w)))
				}
				if cos := ab / math.Sqrt(aa*bb); cos < 0.99999 || maxd > 1e-4 {
					t.Errorf("%s %s sequence %d: cosine %.7f, max diff %.2g", shape, mode, s, cos, maxd)
				}
				if c.Labels > 0 {
					lc, _ := encs[0].Classify(outs[0][s])
					lg, _ := encs[1].Classify(outs[1][s])
					if math.Abs(float64(lc[0]-lg[0])) > 1e-4 {
						t.Errorf("%s %s sequence %d: logit %v on the GPU, %v on the CPU", shape, mode, s, lg[0], lc[0])
					}
				}
			}
		}
	}
}
