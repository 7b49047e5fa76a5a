package format

import (
	"bytes"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/testdata"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

func openT(t *testing.T, path string, opt Options) *Model {
	t.Helper()
	m, err := Open(path, opt)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// dequant returns a tensor's values as float32.
func dequant(t *testing.T, tn *Tensor) []float32 {
	t.Helper()
	out := make([]float32, tn.Elements())
	if err := quant.Dequantize(tn.Type, tn.Data, out); err != nil {
		t.Fatalf("tensor %s: %v", tn.Name, err)
	}
	return out
}

// TestStoriesGGUFEqualsBin checks that llama.cpp's conversion of stories260K holds exactly
// the llama2.c checkpoint's weights, as both readers see them.
func TestStoriesGGUFEqualsBin(t *testing.T) {
	dir := "models/stories260K/"
	bin := openT(t, testdata.Path(t, dir+"stories260K.bin"), Options{Tokenizer: testdata.Path(t, dir+"tok512.bin")})
	gg := openT(t, testdata.Path(t, dir+"stories260K.gguf"), Options{})
	if len(bin.Tensors) != 47 {
		t.Fatalf("stories260K.bin has %d tensors, want 47", len(bin.Tensors))
	}
	for _, bt := range bin.Tensors {
		gt, ok := gg.Tensor(bt.Name)
		if !ok {
			t.Fatalf("stories260K.gguf lacks %s", bt.Name)
		}
		if gt.Type != quant.F32 || !slices.Equal(gt.Shape, bt.Shape) || !bytes.Equal(gt.Data, bt.Data) {
			t.Errorf("%s differs: gguf %s %v, bin %s %v", bt.Name, gt.Type, gt.Shape, bt.Type, bt.Shape)
		}
	}
	// The GGUF carries the shared classifier as its own tensor.
	out, _ := gg.Tensor("output.weight")
	emb, _ := bin.Tensor("token_embd.weight")
	if !bytes.Equal(out.Data, emb.Data) {
		t.Errorf("output.weight of the GGUF differs from the checkpoint's shared embedding")
	}
	if !bin.Config.TiedEmbeddings || gg.Config.TiedEmbeddings {
		t.Errorf("tied embeddings: bin %v (want true), gguf %v (want false)", bin.Config.TiedEmbeddings, gg.Config.TiedEmbeddings)
	}
	for _, c := range []Config{bin.Config, gg.Config} {
		if c.Dim != 64 || c.Layers != 5 || c.Heads != 8 || c.KVHeads != 4 || c.FFNDim != 172 || c.VocabSize != 512 {
			t.Errorf("config %+v is not stories260K's", c)
		}
	}
	// Both vocabularies tokenize alike.
	tb, err := tokenizer.New(bin.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := tokenizer.New(gg.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	text := "Once upon a time, there was a little girl named Lily. She loved to play outside!"
	a := tb.Encode(text, tokenizer.EncodeOptions{AddSpecial: true})
	b := tg.Encode(text, tokenizer.EncodeOptions{AddSpecial: true})
	if !slices.Equal(a, b) {
		t.Errorf("tok512.bin encodes %v, the GGUF vocabulary %v", a, b)
	}
}

// TestStoriesQuantizedWithinBound checks that the F16, Q8_0 and Q4_0 conversions of
// stories260K dequantize to the F32 weights within each format's error bound.
func TestStoriesQuantizedWithinBound(t *testing.T) {
	dir := "models/stories260K/"
	ref := openT(t, testdata.Path(t, dir+"stories260K.gguf"), Options{})
	for _, name := range []string{"stories260K-F16.gguf", "stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf"} {
		m := openT(t, testdata.Path(t, dir+name), Options{})
		seen := map[quant.Type]int{}
		for _, qt := range m.Tensors {
			rt, ok := ref.Tensor(qt.Name)
			if !ok {
				t.Fatalf("%s: tensor %s not in the F32 file", name, qt.Name)
			}
			seen[qt.Type]++
			want, got := dequant(t, rt), dequant(t, qt)
			bs := qt.Type.BlockSize()
			for b := 0; b < len(want); b += bs {
				bound, err := quant.ErrorBound(qt.Type, want[b:b+bs])
				if err != nil {
					t.Fatal(err)
				}
				for i := b; i < b+bs; i++ {
					if d := math.Abs(float64(got[i] - want[i])); d > bound {
						t.Fatalf("%s: %s (%s) element %d: |%g - %g| = %g exceeds the bound %g", name, qt.Name, qt.Type, i, got[i], want[i], d, bound)
					}
				}
			}
		}
		t.Logf("%s: tensor types %v", name, seen)
		if name != "stories260K-F16.gguf" && seen[quant.Q8_0]+seen[quant.Q4_0] == 0 {
			t.Errorf("%s holds no quantized tensors: %v", name, seen)
		}
	}
}

// sameTensors checks that two models hold the same tensors, byte for byte, with q/k rows
// compared in one rotary order.
func sameTensors(t *testing.T, a, b *Model) {
	t.Helper()
	if len(a.Tensors) != len(b.Tensors) {
		t.Errorf("%s has %d tensors, %s has %d", a.Path, len(a.Tensors), b.Path, len(b.Tensors))
	}
	for _, ta := range a.Tensors {
		tb, ok := b.Tensor(ta.Name)
		if !ok {
			t.Errorf("%s lacks %s", b.Path, ta.Name)
			continue
		}
		if ta.Type != tb.Type || !slices.Equal(ta.Shape, tb.Shape) {
			t.Errorf("%s: %s %v vs %s %v", ta.Name, ta.Type, ta.Shape, tb.Type, tb.Shape)
			continue
		}
		bData := tb.Data
		if heads := qkHeads(ta.Name, a.Config); heads > 0 && a.Config.RopeStyle != b.Config.RopeStyle && len(tb.Shape) == 2 {
			w, err := PermuteRows(tb, heads, a.Config.RopeStyle == RopeInterleaved)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := w(&buf); err != nil {
				t.Fatal(err)
			}
			bData = buf.Bytes()
		}
		if !bytes.Equal(ta.Data, bData) {
			t.Errorf("tensor %s differs between %s and %s", ta.Name, a.Path, b.Path)
		}
	}
	ca, cb := a.Config, b.Config
	ca.RopeStyle, cb.RopeStyle = 0, 0
	if ca.Scaling != cb.Scaling || ca.Dim != cb.Dim || ca.Layers != cb.Layers || ca.Heads != cb.Heads ||
		ca.KVHeads != cb.KVHeads || ca.HeadDim != cb.HeadDim || ca.FFNDim != cb.FFNDim || ca.VocabSize != cb.VocabSize ||
		ca.ContextLen != cb.ContextLen || ca.TiedEmbeddings != cb.TiedEmbeddings || ca.QKVBias != cb.QKVBias ||
		ca.QKNorm != cb.QKNorm || ca.Experts != cb.Experts || ca.ExpertsUsed != cb.ExpertsUsed ||
		ca.ExpertFFNDim != cb.ExpertFFNDim || ca.NormTopKProbs != cb.NormTopKProbs ||
		math.Abs(ca.NormEps-cb.NormEps) > 1e-6*ca.NormEps || ca.RopeTheta != cb.RopeTheta {
		t.Errorf("configs differ:\n%+v\n%+v", a.Config, b.Config)
	}
}

// TestConvertRoundTrip converts the llama2.c checkpoint to GGUF, that to a Hugging Face
// folder and back, and checks every step holds the same weights and vocabulary.
func TestConvertRoundTrip(t *testing.T) {
	dir := "models/stories260K/"
	src := openT(t, testdata.Path(t, dir+"stories260K.bin"), Options{Tokenizer: testdata.Path(t, dir+"tok512.bin")})
	tmp := t.TempDir()
	g1, hf, g2 := filepath.Join(tmp, "a.gguf"), filepath.Join(tmp, "hf"), filepath.Join(tmp, "b.gguf")
	for _, step := range []struct{ from, to string }{{"", g1}, {g1, hf}, {hf, g2}} {
		m := src
		if step.from != "" {
			m = openT(t, step.from, Options{})
		}
		if err := Convert(m, step.to, ConvertOptions{}); err != nil {
			t.Fatalf("convert to %s: %v", step.to, err)
		}
		back := openT(t, step.to, Options{})
		sameTensors(t, m, back)
		if back.Vocab == nil || !slices.Equal(back.Vocab.Tokens, src.Vocab.Tokens) || back.Vocab.AddBOS != src.Vocab.AddBOS {
			t.Fatalf("%s: vocabulary not carried over", step.to)
		}
	}
	hfModel := openT(t, hf, Options{})
	if hfModel.Config.RopeStyle != RopeNeox {
		t.Errorf("the Hugging Face folder should load in the NeoX rotary order")
	}
	// Re-encoding to Q8_0 stays within the format's bound.
	q := filepath.Join(tmp, "q8.gguf")
	if err := Convert(src, q, ConvertOptions{DType: quant.Q8_0, Recode: true}); err != nil {
		t.Fatal(err)
	}
	qm := openT(t, q, Options{})
	wq, _ := qm.Tensor("blk.0.attn_q.weight")
	wf, _ := src.Tensor("blk.0.attn_q.weight")
	if wq.Type != quant.Q8_0 {
		t.Fatalf("recoded tensor has type %s", wq.Type)
	}
	got, want := dequant(t, wq), dequant(t, wf)
	for b := 0; b < len(want); b += quant.QK {
		bound, err := quant.ErrorBound(quant.Q8_0, want[b:b+quant.QK])
		if err != nil {
			t.Fatal(err)
		}
		for i := b; i < b+quant.QK; i++ {
			if math.Abs(float64(got[i]-want[i])) > bound {
				t.Fatalf("element %d: %g vs %g beyond %g", i, got[i], want[i], bound)
			}
		}
	}
	if fd, _ := qm.Tensor("blk.0.ffn_down.weight"); fd.Type != quant.F16 {
		t.Errorf("ffn_down rows of 172 are not whole Q8_0 blocks and should fall back to F16, got %s", fd.Type)
	}
}

// TestPermuteRowsInverse checks the two rotary row orders are each other's inverse.
func TestPermuteRowsInverse(t *testing.T) {
	const heads, hd, cols = 3, 8, 2
	data := make([]byte, heads*hd*cols*4)
	for i := range data {
		data[i] = byte(i / 8) // row index, repeated over the row's bytes
	}
	src := &Tensor{Name: "q", Type: quant.F32, Shape: []int{heads * hd, cols}, Data: data}
	there, err := PermuteRows(src, heads, true)
	if err != nil {
		t.Fatal(err)
	}
	var a bytes.Buffer
	there(&a)
	// Interleaved row 1 of head 0 is NeoX row hd/2.
	if got := a.Bytes()[1*cols*4]; got != hd/2 {
		t.Errorf("interleaved row 1 came from NeoX row %d, want %d", got, hd/2)
	}
	back, _ := PermuteRows(&Tensor{Name: "q", Type: quant.F32, Shape: src.Shape, Data: a.Bytes()}, heads, false)
	var b bytes.Buffer
	back(&b)
	if !bytes.Equal(b.Bytes(), data) {
		t.Errorf("permuting there and back does not give the original rows")
	}
	if _, err := PermuteRows(src, 5, true); err == nil {
		t.Errorf("5 heads do not divide 24 rows, want an error")
	}
}

// TestOpenRejectsBadInput checks that files that are not models get clear errors.
func TestOpenRejectsBadInput(t *testing.T) {
	tmp := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		path, want string
	}{
		{filepath.Join(tmp, "missing.gguf"), "no such file"},
		{write("text.txt", []byte("hello")), "not a GGUF file"},
		{write("short.bin", []byte{1, 2, 3}), "llama2c"},
		{write("trunc.gguf", []byte("GGUF\x03\x00\x00\x00")), "gguf"},
		{write("vocab-only.gguf", vocabOnlyGGUF(t)), "token_embd.weight is missing"},
	}
	for _, c := range cases {
		_, err := Open(c.path, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s) = %v, want an error containing %q", filepath.Base(c.path), err, c.want)
		}
	}
}

// vocabOnlyGGUF returns a GGUF file with llama metadata but no tensors.
func vocabOnlyGGUF(t *testing.T) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "v.gguf")
	c := Contents{Name: "v", Config: Config{Arch: "llama", Dim: 8, Layers: 1, Heads: 2, KVHeads: 2, HeadDim: 4, RopeDim: 4, FFNDim: 16, VocabSize: 4}}
	if err := WriteGGUF(p, c, quant.F32, nil, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return b
}

// TestConvertWidensHalfVectors checks that a GGUF gets its norm weights in F32 when the
// source holds them in F16 (as F16 Hugging Face checkpoints do): llama.cpp's CPU backend
// multiplies by norms only in F32.
func TestConvertWidensHalfVectors(t *testing.T) {
	dir := "models/stories260K/"
	src := openT(t, testdata.Path(t, dir+"stories260K.bin"), Options{Tokenizer: testdata.Path(t, dir+"tok512.bin")})
	norm, _ := src.Tensor("blk.0.attn_norm.weight")
	vals := dequant(t, norm)
	half := make([]byte, 2*len(vals))
	if err := quant.Quantize(quant.F16, vals, half); err != nil {
		t.Fatal(err)
	}
	var tensors []*Tensor
	for _, tt := range src.Tensors {
		if tt.Name == norm.Name {
			tt = &Tensor{Name: tt.Name, Type: quant.F16, Shape: tt.Shape, Data: half}
		}
		tensors = append(tensors, tt)
	}
	out := filepath.Join(t.TempDir(), "h.gguf")
	if err := Convert(src.WithTensors(tensors), out, ConvertOptions{}); err != nil {
		t.Fatal(err)
	}
	back := openT(t, out, Options{})
	got, _ := back.Tensor(norm.Name)
	if got.Type != quant.F32 {
		t.Fatalf("%s written as %s, want F32", norm.Name, got.Type)
	}
	for i, v := range dequant(t, got) {
		if v != quant.F16ToF32(quant.F32ToF16(vals[i])) {
			t.Fatalf("element %d: %g, want the F16 value of %g", i, v, vals[i])
		}
	}
}
