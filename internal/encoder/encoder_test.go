package encoder

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// refModel is an independent float64 BERT forward over one sequence, read straight from
// the file's tensors: the oracle the encoder is checked against.
type refModel struct {
	f *File
	t *testing.T
}

func (r refModel) w(name string) []float64 {
	t := r.f.Tensors[name]
	if t == nil {
		r.t.Fatalf("reference: tensor %s is missing", name)
	}
	v := make([]float32, t.Elements())
	if err := quant.Dequantize(t.Type, t.Data, v); err != nil {
		r.t.Fatal(err)
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// wOpt is w, or nil when the file has no such tensor.
func (r refModel) wOpt(name string) []float64 {
	if r.f.Tensors[name] == nil {
		return nil
	}
	return r.w(name)
}

// linear returns x·Wᵀ + b for x of n rows (b nil: no bias).
func linear(x []float64, n int, w, b []float64) []float64 {
	in := len(x) / n
	outDim := len(w) / in
	if b == nil {
		b = make([]float64, outDim)
	}
	y := make([]float64, n*outDim)
	for t := range n {
		for o := range outDim {
			s := b[o]
			for i := range in {
				s += x[t*in+i] * w[o*in+i]
			}
			y[t*outDim+o] = s
		}
	}
	return y
}

func layerNorm(x []float64, dim int, w, b []float64, eps float64) {
	for t := 0; t < len(x)/dim; t++ {
		row := x[t*dim : (t+1)*dim]
		var mean, v float64
		for _, a := range row {
			mean += a
		}
		mean /= float64(dim)
		for _, a := range row {
			v += (a - mean) * (a - mean)
		}
		v /= float64(dim)
		for i := range row {
			row[i] = (row[i]-mean)/math.Sqrt(v+eps)*w[i] + b[i]
		}
	}
}

// refSlopes are ALiBi's slopes for maximum bias 8, written out from the rule of the ALiBi
// paper (2^(-8/n) powers for a power of two n, the odd powers of 2^(-4/n) for the heads
// beyond the largest power of two n).
var refSlopes = map[int][]float64{
	4: {1.0 / 4, 1.0 / 16, 1.0 / 64, 1.0 / 256},
	6: {1.0 / 4, 1.0 / 16, 1.0 / 64, 1.0 / 256, 1.0 / 2, 1.0 / 8},
}

// rotate applies NeoX-style RoPE with base theta to each head of x ([n][heads*hd]) at
// positions 0..n-1.
func rotate(x []float64, n, heads, hd int, theta float64) {
	for t := range n {
		for h := range heads {
			v := x[t*heads*hd+h*hd:][:hd]
			for i := range hd / 2 {
				a := float64(t) * math.Pow(theta, -float64(2*i)/float64(hd))
				x1, x2 := v[i], v[i+hd/2]
				v[i], v[i+hd/2] = x1*math.Cos(a)-x2*math.Sin(a), x2*math.Cos(a)+x1*math.Sin(a)
			}
		}
	}
}

func gelu(a float64) float64 { return 0.5 * a * (1 + math.Erf(a/math.Sqrt2)) }

// hidden runs the reference over tokens (segments types, nil for all 0) and returns the
// last layer's hidden states, [n][dim].
func (r refModel) hidden(tokens, types []int32) []float64 {
	c := r.f.Config
	d, n := c.Dim, len(tokens)
	te, pe := r.w("token_embd.weight"), r.wOpt("position_embd.weight")
	if c.Arch != ArchBERT {
		pe = nil
	}
	ty := r.w("token_types.weight")
	x := make([]float64, n*d)
	for t, tok := range tokens {
		seg := int32(0)
		if types != nil {
			seg = types[t]
		}
		for i := range d {
			x[t*d+i] = te[int(tok)*d+i] + ty[int(seg)*d+i]
			if pe != nil {
				x[t*d+i] += pe[t*d+i]
			}
		}
	}
	layerNorm(x, d, r.w("token_embd_norm.weight"), r.w("token_embd_norm.bias"), c.NormEps)
	hd := c.Dim / c.Heads
	for l := range c.Layers {
		p := "blk." + strconv.Itoa(l) + "."
		q := linear(x, n, r.w(p+"attn_q.weight"), r.wOpt(p+"attn_q.bias"))
		k := linear(x, n, r.w(p+"attn_k.weight"), r.wOpt(p+"attn_k.bias"))
		v := linear(x, n, r.w(p+"attn_v.weight"), r.wOpt(p+"attn_v.bias"))
		if c.QKNorm {
			layerNorm(q, d, r.w(p+"attn_q_norm.weight"), r.w(p+"attn_q_norm.bias"), c.NormEps)
			layerNorm(k, d, r.w(p+"attn_k_norm.weight"), r.w(p+"attn_k_norm.bias"), c.NormEps)
		}
		if c.Arch == ArchNomic {
			rotate(q, n, c.Heads, hd, c.RopeTheta)
			rotate(k, n, c.Heads, hd, c.RopeTheta)
		}
		att := make([]float64, n*d)
		for h := range c.Heads {
			for i := range n {
				sc := make([]float64, n)
				best := math.Inf(-1)
				for j := range n {
					for e := range hd {
						sc[j] += q[i*d+h*hd+e] * k[j*d+h*hd+e]
					}
					sc[j] /= math.Sqrt(float64(hd))
					if c.Arch == ArchJina {
						sc[j] -= refSlopes[c.Heads][h] * math.Abs(float64(i-j))
					}
					best = math.Max(best, sc[j])
				}
				var z float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - best)
					z += sc[j]
				}
				for j := range n {
					for e := range hd {
						att[i*d+h*hd+e] += sc[j] / z * v[j*d+h*hd+e]
					}
				}
			}
		}
		o := linear(att, n, r.w(p+"attn_output.weight"), r.wOpt(p+"attn_output.bias"))
		for i := range o {
			o[i] += x[i]
		}
		layerNorm(o, d, r.w(p+"attn_output_norm.weight"), r.w(p+"attn_output_norm.bias"), c.NormEps)
		if c.AttnNorm2 {
			for i := range o {
				o[i] += x[i]
			}
			layerNorm(o, d, r.w(p+"attn_norm_2.weight"), r.w(p+"attn_norm_2.bias"), c.NormEps)
		}
		u := linear(o, n, r.w(p+"ffn_up.weight"), r.wOpt(p+"ffn_up.bias"))
		switch c.Arch {
		case ArchBERT:
			for i, a := range u {
				u[i] = gelu(a)
			}
		case ArchNomic:
			g := linear(o, n, r.w(p+"ffn_gate.weight"), nil)
			for i, a := range g {
				u[i] *= a / (1 + math.Exp(-a))
			}
		case ArchJina:
			g := linear(o, n, r.w(p+"ffn_gate.weight"), nil)
			for i, a := range g {
				u[i] *= gelu(a)
			}
		}
		x = linear(u, n, r.w(p+"ffn_down.weight"), r.wOpt(p+"ffn_down.bias"))
		for i := range x {
			x[i] += o[i]
		}
		layerNorm(x, d, r.w(p+"layer_output_norm.weight"), r.w(p+"layer_output_norm.bias"), c.NormEps)
	}
	return x
}

func (r refModel) pool(h []float64, mode backend.PoolMode) []float64 {
	d := r.f.Config.Dim
	n := len(h) / d
	switch mode {
	case backend.PoolCLS:
		return h[:d]
	case backend.PoolLast:
		return h[(n-1)*d:]
	}
	out := make([]float64, d)
	for t := range n {
		for i := range d {
			out[i] += h[t*d+i] / float64(n)
		}
	}
	return out
}

func cosine(a []float32, b []float64) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * b[i]
		aa += float64(a[i]) * float64(a[i])
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}

func maxDiff(a []float32, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// synthFile writes shape name in format ext ("gguf" or "hf") and opens it.
func synthFile(t *testing.T, name, ext string) *File {
	t.Helper()
	c, ok := SynthConfig(name)
	if !ok {
		t.Fatalf("no shape %s", name)
	}
	c.Layers = 2
	p := filepath.Join(t.TempDir(), name)
	if ext == "gguf" {
		p += ".gguf"
	}
	if err := WriteSynth(p, name, c, 11); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func newCPU(t *testing.T) backend.Backend {
	be := cpubackend.New(2)
	t.Cleanup(func() { be.Close() })
	return be
}

func testSeqs() []Sequence {
	return []Sequence{
		{Tokens: []int32{2, 60, 61, 130, 3}},
		{Tokens: []int32{2, 7, 3}},
		{Tokens: []int32{2, 100, 101, 102, 103, 104, 105, 106, 107, 108, 3, 120, 121, 3}, Types: []int32{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1}},
		{Tokens: []int32{2}},
	}
}

// TestForwardMatchesReference checks every pooling mode, GGUF and HF alike, against the
// float64 reference, with sequences of different lengths in one batch.
func TestForwardMatchesReference(t *testing.T) {
	for _, ext := range []string{"gguf", "hf"} {
		f := synthFile(t, "bert-tiny", ext)
		ref := refModel{f, t}
		for _, mode := range []backend.PoolMode{backend.PoolMean, backend.PoolCLS, backend.PoolLast} {
			enc, err := New(f, newCPU(t), &mode)
			if err != nil {
				t.Fatal(err)
			}
			out, err := enc.Forward(testSeqs())
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range testSeqs() {
				want := ref.pool(ref.hidden(s.Tokens, s.Types), mode)
				if c, d := cosine(out[i], want), maxDiff(out[i], want); c < 0.99999 || d > 1e-4 {
					t.Errorf("%s %s sequence %d: cosine %.7f, max diff %.2g from the reference", ext, mode, i, c, d)
				}
			}
			enc.Close()
		}
	}
}

// TestVariantsMatchReference checks nomic-bert (RoPE, fused qkv, SwiGLU; GGUF and a
// NomicBertModel folder) and jina-bert-v2 (ALiBi, GEGLU, with and without its optional
// norms; GGUF and a JinaBertModel folder, its gate and up rows fused) against the float64
// reference, every pooling mode, sequences of different lengths
// in one batch.
func TestVariantsMatchReference(t *testing.T) {
	for _, v := range [][2]string{{"nomic-bert-tiny", "gguf"}, {"nomic-bert-tiny", "hf"}, {"jina-bert-v2-tiny", "gguf"}, {"jina-bert-v2-tiny", "hf"}, {"jina-bert-v2-tiny-norms", "gguf"}, {"jina-bert-v2-tiny-norms", "hf"}} {
		shape, ext := v[0], v[1]
		f := synthFile(t, shape, ext)
		if want, _ := SynthConfig(shape); f.Config.Arch != want.Arch || f.Config.RopeTheta != want.RopeTheta || f.Config.Pooling != want.Pooling {
			t.Fatalf("%s %s: config %+v", shape, ext, f.Config)
		}
		c := f.Config
		if c.Arch == ArchJina && (c.QKNorm != strings.HasSuffix(shape, "norms") || c.AttnNorm2 != c.QKNorm) {
			t.Fatalf("%s: QKNorm %v, AttnNorm2 %v read from the tensors", shape, c.QKNorm, c.AttnNorm2)
		}
		ref := refModel{f, t}
		for _, mode := range []backend.PoolMode{backend.PoolMean, backend.PoolCLS, backend.PoolLast} {
			enc, err := New(f, newCPU(t), &mode)
			if err != nil {
				t.Fatal(err)
			}
			out, err := enc.Forward(testSeqs())
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range testSeqs() {
				want := ref.pool(ref.hidden(s.Tokens, s.Types), mode)
				if c, d := cosine(out[i], want), maxDiff(out[i], want); c < 0.99999 || d > 1e-4 {
					t.Errorf("%s %s %s sequence %d: cosine %.7f, max diff %.2g from the reference", shape, ext, mode, i, c, d)
				}
			}
			enc.Close()
		}
	}
}

// TestBatchInvariance: a sequence's embedding does not depend on what it is batched with.
func TestBatchInvariance(t *testing.T) {
	f := synthFile(t, "bert-tiny", "gguf")
	enc, err := New(f, newCPU(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	all, err := enc.Forward(testSeqs())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range testSeqs() {
		one, err := enc.Forward([]Sequence{s})
		if err != nil {
			t.Fatal(err)
		}
		for j := range one[0] {
			if d := math.Abs(float64(one[0][j] - all[i][j])); d > 1e-5 {
				t.Fatalf("sequence %d value %d: %v alone, %v in the batch", i, j, one[0][j], all[i][j])
			}
		}
	}
}

// TestClassifierMatchesReference checks the cross-encoder head on the pooled [CLS] state.
func TestClassifierMatchesReference(t *testing.T) {
	for _, ext := range []string{"gguf", "hf"} {
		f := synthFile(t, "bert-tiny-reranker", ext)
		if f.Config.Labels != 1 || !f.Config.Pooler || f.Config.Pooling != backend.PoolCLS {
			t.Fatalf("%s: config %+v: want a one-label head with a pooler, cls pooling", ext, f.Config)
		}
		enc, err := New(f, newCPU(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		ref := refModel{f, t}
		pw, pb, cw, cb := ref.w("cls.weight"), ref.w("cls.bias"), ref.w("cls.output.weight"), ref.w("cls.output.bias")
		out, err := enc.Forward(testSeqs())
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range testSeqs() {
			h := ref.pool(ref.hidden(s.Tokens, s.Types), backend.PoolCLS)
			pooled := linear(h, 1, pw, pb)
			for j := range pooled {
				pooled[j] = math.Tanh(pooled[j])
			}
			want := linear(pooled, 1, cw, cb)[0]
			got, err := enc.Classify(out[i])
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(float64(got[0])-want) > 1e-4 {
				t.Errorf("%s sequence %d: logit %v, reference %v", ext, i, got[0], want)
			}
		}
		enc.Close()
	}
}

// TestForwardRejects: bad inputs are errors naming the problem, not panics.
func TestForwardRejects(t *testing.T) {
	f := synthFile(t, "bert-tiny", "gguf")
	enc, err := New(f, newCPU(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	long := make([]int32, f.Config.MaxPositions+1)
	for _, seqs := range [][]Sequence{
		nil,
		{{Tokens: nil}},
		{{Tokens: long}},
		{{Tokens: []int32{2, int32(f.Config.VocabSize)}}},
		{{Tokens: []int32{2, -1}}},
		{{Tokens: []int32{2, 3}, Types: []int32{0}}},
		{{Tokens: []int32{2, 3}, Types: []int32{0, 2}}},
	} {
		if _, err := enc.Forward(seqs); err == nil {
			t.Errorf("Forward(%v...) succeeded", len(seqs))
		}
	}
}

// TestHFVariantsRefused: a NomicBertModel or JinaBertModel folder of a variant the encoder
// does not run is refused at open with the config field that says so.
func TestHFVariantsRefused(t *testing.T) {
	for _, v := range []struct {
		shape, key string
		val        any
	}{
		{"nomic-bert-tiny", "activation_function", "gelu"}, {"nomic-bert-tiny", "qkv_proj_bias", true},
		{"nomic-bert-tiny", "prenorm", true}, {"nomic-bert-tiny", "rotary_emb_fraction", 0.5},
		{"nomic-bert-tiny", "rotary_emb_interleaved", true}, {"nomic-bert-tiny", "rotary_scaling_factor", 2.0},
		{"jina-bert-v2-tiny", "feed_forward_type", "reglu"}, {"jina-bert-v2-tiny", "position_embedding_type", "absolute"},
		{"jina-bert-v2-tiny", "hidden_act", "relu"},
	} {
		key, val := v.key, v.val
		c, _ := SynthConfig(v.shape)
		c.Layers = 1
		dir := filepath.Join(t.TempDir(), v.shape)
		if err := WriteSynth(dir, v.shape, c, 1); err != nil {
			t.Fatal(err)
		}
		if !IsEncoder(dir) {
			t.Fatalf("IsEncoder: false for a %s folder", v.shape)
		}
		p := filepath.Join(dir, "config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		cfg[key] = val
		if b, err = json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if f, err := Open(dir); err == nil || !strings.Contains(err.Error(), key) {
			if err == nil {
				f.Close()
			}
			t.Errorf("%s %s = %v: %v, want an error naming it", v.shape, key, val, err)
		}
	}
}
