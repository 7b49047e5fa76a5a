package synth

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// small returns the shape's config shrunk to one layer and a small width, keeping what
// makes it that architecture: head counts, biases, norms, scaling, experts.
func small(c format.Config) format.Config {
	if c.MLA() {
		c.Layers, c.VocabSize = 2, 300 // small already; a dense layer, then experts
		return c
	}
	c.Layers, c.VocabSize, c.HeadDim, c.RopeDim = 1, 300, 8, 8
	c.Dim, c.FFNDim = c.Heads*8, 64
	if c.Experts > 0 {
		c.ExpertFFNDim = 64
	}
	return Rederive(c)
}

// writeTwins writes the GGUF and the Hugging Face twin of a config and opens both; for a
// quantized dtype only the GGUF exists and h is nil.
func writeTwins(t *testing.T, c format.Config, dtype quant.Type, seed uint64) (g, h *format.Model) {
	t.Helper()
	dir := t.TempDir()
	vocab, err := ByteVocab(c.VocabSize)
	if err != nil {
		t.Fatal(err)
	}
	contents := format.Contents{Name: "twin", Config: c, Vocab: vocab}
	gt, err := Tensors(c, dtype, seed, GGUF)
	if err != nil {
		t.Fatal(err)
	}
	if err := format.WriteGGUF(filepath.Join(dir, "m.gguf"), contents, dtype, gt, nil); err != nil {
		t.Fatal(err)
	}
	g = openModel(t, filepath.Join(dir, "m.gguf"))
	if dtype != quant.F32 && dtype != quant.F16 && dtype != quant.BF16 {
		return g, nil // safetensors holds float weights only
	}
	ht, err := Tensors(c, dtype, seed, HF)
	if err != nil {
		t.Fatal(err)
	}
	hfDir := filepath.Join(dir, "hf")
	if err := format.WriteHF(hfDir, contents, dtype, ht, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := format.WriteHFTokenizer(hfDir, vocab, ""); err != nil {
		t.Fatal(err)
	}
	return g, openModel(t, hfDir)
}

func openModel(t *testing.T, path string) *format.Model {
	t.Helper()
	m, err := format.Open(path, format.Options{})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// readAll returns what a tensor writer writes.
func readAll(t *testing.T, w func(*bytes.Buffer) error) []byte {
	var b bytes.Buffer
	if err := w(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestTwinsHoldOneModel checks, for every built-in shape, that the GGUF and the Hugging Face
// twins of one seed load with the same hyperparameters and the same weights once the q/k
// rows and the experts are compared in one layout.
func TestTwinsHoldOneModel(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			s, _ := Lookup(name)
			c := small(s.Config)
			g, h := writeTwins(t, c, quant.F16, 7)
			hfStyle := format.RopeNeox
			if c.MLA() {
				hfStyle = format.RopeInterleaved // DeepSeek's checkpoints interleave the rotary pairs too
			}
			if g.Config.RopeStyle != c.RopeStyle || h.Config.RopeStyle != hfStyle {
				t.Errorf("rope styles: gguf %s (want %s), hf %s (want %s)", g.Config.RopeStyle, c.RopeStyle, h.Config.RopeStyle, hfStyle)
			}
			for _, cfg := range []format.Config{g.Config, h.Config} {
				if cfg.Dim != c.Dim || cfg.Heads != c.Heads || cfg.KVHeads != c.KVHeads || cfg.QKVBias != c.QKVBias ||
					cfg.QKNorm != c.QKNorm || cfg.TiedEmbeddings != c.TiedEmbeddings || cfg.Experts != c.Experts ||
					cfg.Scaling.Type != c.Scaling.Type || cfg.RopeTheta != c.RopeTheta {
					t.Errorf("loaded config %+v differs from the written %+v", cfg, c)
				}
			}
			compared := 0
			for _, ht := range h.Tensors {
				var want []byte
				if stacked, e, ok := expertOf(ht.Name); ok {
					gt, found := g.Tensor(stacked)
					if !found {
						t.Fatalf("GGUF twin lacks %s", stacked)
					}
					per := len(gt.Data) / gt.Shape[0]
					want = gt.Data[e*per : (e+1)*per]
				} else {
					gt, found := g.Tensor(ht.Name)
					if !found {
						t.Fatalf("GGUF twin lacks %s", ht.Name)
					}
					want = gt.Data
					if heads := qkHeads(ht.Name, c); heads > 0 && g.Config.RopeStyle == format.RopeInterleaved {
						if len(ht.Shape) == 1 {
							continue // q/k biases: only Qwen2 has them, and it stays NeoX
						}
						w, err := format.PermuteRows(ht, heads, true)
						if err != nil {
							t.Fatal(err)
						}
						got := readAll(t, func(b *bytes.Buffer) error { return w(b) })
						if !bytes.Equal(got, want) {
							t.Errorf("%s: HF rows permuted to interleaved differ from the GGUF twin", ht.Name)
						}
						compared++
						continue
					}
				}
				if !bytes.Equal(ht.Data, want) {
					t.Errorf("%s differs between the twins", ht.Name)
				}
				compared++
			}
			if compared < 8 {
				t.Errorf("only %d tensors compared", compared)
			}
			if c.Scaling.Type == "llama3" {
				if _, ok := g.Tensor("rope_freqs.weight"); !ok {
					t.Errorf("GGUF twin of a Llama 3 shape lacks rope_freqs.weight")
				}
			}
		})
	}
}

func expertOf(name string) (stacked string, expert int, ok bool) {
	var layer, e int
	var proj string
	for _, p := range []string{"gate", "up", "down"} {
		if n, _ := fmt.Sscanf(name, "blk.%d.ffn_"+p+".%d.weight", &layer, &e); n == 2 {
			proj = p
			break
		}
	}
	if proj == "" {
		return "", 0, false
	}
	return fmt.Sprintf("blk.%d.ffn_%s_exps.weight", layer, proj), e, true
}

func qkHeads(name string, c format.Config) int {
	switch {
	case c.MLA():
		return 0 // neither file permutes (see format/deepseek2.go)
	case strings.Contains(name, ".attn_q."):
		return c.Heads
	case strings.Contains(name, ".attn_k."):
		return c.KVHeads
	}
	return 0
}

// TestDeterministic checks that a seed fixes the weights, whatever the dtype, and that
// another seed changes them.
func TestDeterministic(t *testing.T) {
	s, _ := Lookup("qwen3-0.6b")
	c := small(s.Config)
	bytesOf := func(seed uint64, dtype quant.Type) []byte {
		ts, err := Tensors(c, dtype, seed, GGUF)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		for _, tn := range ts {
			if err := tn.Write(&b); err != nil {
				t.Fatal(err)
			}
		}
		return b.Bytes()
	}
	a, b := bytesOf(1, quant.Q8_0), bytesOf(1, quant.Q8_0)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different weights")
	}
	if bytes.Equal(a, bytesOf(2, quant.Q8_0)) {
		t.Fatal("different seeds gave the same weights")
	}
	// F32 and F16 of one seed are the same values, rounded.
	f32 := bytesOf(3, quant.F32)
	f16 := bytesOf(3, quant.F16)
	if len(f32) <= len(f16) {
		t.Fatalf("f32 model (%d bytes) should be larger than f16 (%d)", len(f32), len(f16))
	}
}

// TestByteVocab checks that the made-up vocabulary encodes any text and decodes it back.
func TestByteVocab(t *testing.T) {
	v, err := ByteVocab(1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Tokens) != 1000 {
		t.Fatalf("got %d tokens", len(v.Tokens))
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"Hello, world!", "kabe ro tazu", "ünïcödé ✓ 漢字", "line\nbreak\ttab"} {
		ids := tok.Encode(text, tokenizer.EncodeOptions{})
		if got := tok.Decode(ids, false); got != text {
			t.Errorf("round trip of %q gave %q (ids %v)", text, got, ids)
		}
	}
	// Syllable words merge into single tokens rather than bytes.
	if ids := tok.Encode("ba", tokenizer.EncodeOptions{}); len(ids) != 1 {
		t.Errorf(`"ba" encodes to %v, want one token`, ids)
	}
	if _, err := ByteVocab(100); err == nil {
		t.Error("a vocabulary of 100 cannot hold the byte tokens; want an error")
	}
}

// TestModelInMemory checks that an in-memory model holds what its GGUF twin holds.
func TestModelInMemory(t *testing.T) {
	s, _ := Lookup("llama-3.2-1b")
	s.Config = small(s.Config)
	m, err := Model(s, quant.Q8_0, 5)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := writeTwins(t, s.Config, quant.Q8_0, 5)
	if len(m.Tensors) != len(g.Tensors) {
		t.Fatalf("in memory %d tensors, file %d", len(m.Tensors), len(g.Tensors))
	}
	for _, gt := range g.Tensors {
		mt, ok := m.Tensor(gt.Name)
		if !ok || !bytes.Equal(mt.Data, gt.Data) || mt.Type != gt.Type {
			t.Errorf("tensor %s differs between memory and file", gt.Name)
		}
	}
	if m.Config.Scaling.Type != "llama3" || m.Vocab == nil {
		t.Errorf("in-memory model lost its rope scaling (%q) or vocabulary", m.Config.Scaling.Type)
	}
}
