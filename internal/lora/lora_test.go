package lora

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/format/gguf"
)

// tinyConfig is a small Llama shape for adapters without a real base.
func tinyConfig() format.Config {
	return format.Config{Arch: "llama", VocabSize: 32, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 4, FFNDim: 24, RopeStyle: format.RopeInterleaved}
}

func samePairs(t *testing.T, got, want *Adapter) {
	t.Helper()
	if len(got.Layers) != len(want.Layers) {
		t.Fatalf("%d layers, want %d", len(got.Layers), len(want.Layers))
	}
	for l := range want.Layers {
		for tg, w := range want.Layers[l] {
			g := got.Layers[l][tg]
			if (g == nil) != (w == nil) {
				t.Fatalf("layer %d %s: present %v, want %v", l, Target(tg), g != nil, w != nil)
			}
			if w == nil {
				continue
			}
			if g.Rank != w.Rank || g.In != w.In || g.Out != w.Out || g.Scale != w.Scale {
				t.Fatalf("layer %d %s: rank %d %dx%d scale %v, want %d %dx%d %v", l, Target(tg), g.Rank, g.In, g.Out, g.Scale, w.Rank, w.In, w.Out, w.Scale)
			}
			for i := range w.A {
				if g.A[i] != w.A[i] {
					t.Fatalf("layer %d %s: A[%d] = %v, want %v", l, Target(tg), i, g.A[i], w.A[i])
				}
			}
			for i := range w.B {
				if g.B[i] != w.B[i] {
					t.Fatalf("layer %d %s: B[%d] = %v, want %v", l, Target(tg), i, g.B[i], w.B[i])
				}
			}
		}
	}
}

func TestRoundTrip(t *testing.T) {
	c := tinyConfig()
	all := []Target{Q, K, V, O, Gate, Up, Down}
	a := Random(c, 4, 8, all, 0.5, 1)
	dir := t.TempDir()
	for _, interleaved := range []bool{true, false} {
		cc := c
		if !interleaved {
			cc.RopeStyle = format.RopeNeox
		}
		peft := filepath.Join(dir, "peft"+map[bool]string{true: "i", false: "n"}[interleaved])
		if err := WritePEFT(peft, a, cc, interleaved); err != nil {
			t.Fatal(err)
		}
		got, err := Open(peft, cc, 0)
		if err != nil {
			t.Fatal(err)
		}
		samePairs(t, got, a)
		if got.Rank != 4 || got.TargetNames() != "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" {
			t.Fatalf("rank %d targets %s", got.Rank, got.TargetNames())
		}
		g := peft + ".gguf"
		if err := WriteGGUF(g, a, cc); err != nil {
			t.Fatal(err)
		}
		if got, err = Open(g, cc, 0); err != nil {
			t.Fatal(err)
		}
		samePairs(t, got, a)
	}
	g := filepath.Join(dir, "a.gguf")
	if err := WriteGGUF(g, a, c); err != nil {
		t.Fatal(err)
	}
	got, err := Open(g, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	samePairs(t, got, a)
}

// TestPEFTPermutesQK checks the Hugging Face to interleaved reorder of q rows against a
// hand-made case: one head of 4 rows, NeoX rows (0,1,2,3) = pairs (0,2), (1,3) become
// interleaved rows 0,2,1,3 of the NeoX order.
func TestPEFTPermutesQK(t *testing.T) {
	c := format.Config{Arch: "llama", Dim: 4, Layers: 1, Heads: 1, KVHeads: 1, HeadDim: 4, FFNDim: 4, RopeStyle: format.RopeNeox}
	a := &Adapter{Rank: 1, Alpha: 1, Targets: []Target{Q}, Layers: make([][NumTargets]*Pair, 1)}
	a.Layers[0][Q] = &Pair{Rank: 1, In: 4, Out: 4, A: []float32{1, 1, 1, 1}, B: []float32{10, 11, 12, 13}, Scale: 1}
	dir := t.TempDir()
	if err := WritePEFT(dir, a, c, false); err != nil {
		t.Fatal(err)
	}
	c.RopeStyle = format.RopeInterleaved
	got, err := OpenPEFT(dir, c, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{10, 12, 11, 13}
	for i, v := range want {
		if got.Layers[0][Q].B[i] != v {
			t.Fatalf("B = %v, want %v", got.Layers[0][Q].B, want)
		}
	}
}

func TestErrors(t *testing.T) {
	c := tinyConfig()
	dir := t.TempDir()
	a := Random(c, 8, 16, []Target{Q, V}, 0.1, 2)
	peft := filepath.Join(dir, "peft")
	if err := WritePEFT(peft, a, c, true); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(dir, "a.gguf")
	if err := WriteGGUF(g, a, c); err != nil {
		t.Fatal(err)
	}
	other := c
	other.Dim = 32
	for _, tc := range []struct {
		name, path string
		c          format.Config
		maxRank    int
		want       string
	}{
		{"rank peft", peft, c, 4, "rank 8 exceeds --max-lora-rank 4"},
		{"rank gguf", g, c, 4, "rank 8 exceeds --max-lora-rank 4"},
		{"shape peft", peft, other, 0, "adapter maps 16 to 16 features, the base model's projection 32 to 16"},
		{"shape gguf", g, other, 0, "adapter maps 16 to 16 features"},
		{"missing", filepath.Join(dir, "nope"), c, 0, "no such file"},
		{"arch", g, format.Config{Arch: "qwen2", Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 4, FFNDim: 24}, 0, `adapter for architecture "llama", the base model is "qwen2"`},
	} {
		_, err := Open(tc.path, tc.c, tc.maxRank)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	// Bad configs and files.
	for _, tc := range []struct{ config, want string }{
		{`{"r":8,"lora_alpha":16,"target_modules":["q_proj","lm_head"]}`, `target module "lm_head": unknown`},
		{`{"r":8,"lora_alpha":16,"target_modules":["q_proj"],"use_dora":true}`, "DoRA"},
		{`{"r":0,"target_modules":["q_proj"]}`, "positive rank"},
		{`{"r":8,"target_modules":["q_proj"]}`, "module \"v_proj\" is not among the config's target_modules"},
		{`{"r":8,`, "adapter_config.json"},
	} {
		bad := filepath.Join(dir, "bad")
		os.RemoveAll(bad)
		if err := os.CopyFS(bad, os.DirFS(peft)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bad, peftConfigFile), []byte(tc.config), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(bad, c, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %s: error %v, want %q", tc.config, err, tc.want)
		}
	}
	junk := filepath.Join(dir, "junk.gguf")
	os.WriteFile(junk, []byte("not a gguf file at all"), 0o644)
	if _, err := Open(junk, c, 0); err == nil {
		t.Error("junk file accepted")
	}
	// A GGUF model (not an adapter) and an unknown target.
	model := filepath.Join(dir, "model.gguf")
	if err := gguf.WriteFile(model, []gguf.KV{{Key: gguf.KeyArchitecture, Value: gguf.String("llama")}}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(model, c, 0); err == nil || !strings.Contains(err.Error(), "not a GGUF adapter file") {
		t.Errorf("model file: %v", err)
	}
	if _, _, _, err := ggufTensorName("blk.0.attn_qkv.weight.lora_a", 2); err == nil || !strings.Contains(err.Error(), `unknown target "attn_qkv"`) {
		t.Errorf("unknown target: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	c := tinyConfig()
	dir := t.TempDir()
	if err := WriteGGUF(filepath.Join(dir, "a.gguf"), Random(c, 2, 4, []Target{Q}, 0.1, 3), c); err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(c, 16)
	a1, err := r.Load("one", filepath.Join(dir, "a.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Load("one", filepath.Join(dir, "a.gguf")); !errors.Is(err, ErrExists) {
		t.Fatalf("second load: %v", err)
	}
	a2, err := r.Load("two", filepath.Join(dir, "a.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if a1.ID == a2.ID || a1.CacheSalt() == a2.CacheSalt() {
		t.Fatal("two loads share an ID")
	}
	if l := r.List(); len(l) != 2 || l[0].Name != "one" || l[1].Name != "two" {
		t.Fatalf("list %v", l)
	}
	if err := r.Unload("one"); err != nil {
		t.Fatal(err)
	}
	if err := r.Unload("one"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second unload: %v", err)
	}
	if _, ok := r.Get("one"); ok {
		t.Fatal("unloaded adapter found")
	}
}

func TestMerged(t *testing.T) {
	c := format.Config{Dim: 2, Layers: 1, Heads: 1, KVHeads: 1, HeadDim: 2, FFNDim: 2}
	a := &Adapter{Layers: make([][NumTargets]*Pair, 1)}
	// B·A = [[1*3, 1*4], [2*3, 2*4]] scaled by 0.5.
	a.Layers[0][Q] = &Pair{Rank: 1, In: 2, Out: 2, A: []float32{3, 4}, B: []float32{1, 2}, Scale: 0.5}
	_ = c
	got := a.Merged(0, Q, []float32{1, 0, 0, 1})
	want := []float32{2.5, 2, 3, 5}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("merged %v, want %v", got, want)
		}
	}
}

func FuzzPEFTConfig(f *testing.F) {
	f.Add([]byte(`{"r":8,"lora_alpha":16,"target_modules":["q_proj","v_proj"]}`))
	f.Add([]byte(`{"r":8,"lora_alpha":16,"target_modules":"all-linear","use_rslora":true}`))
	f.Add([]byte(`{"r":-1,"target_modules":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, targets, err := parsePEFTConfig(data)
		if err == nil && (c.R <= 0 || targets == [NumTargets]bool{}) {
			t.Fatalf("accepted rank %d with targets %v", c.R, targets)
		}
	})
}

func FuzzGGUFAdapter(f *testing.F) {
	c := tinyConfig()
	path := filepath.Join(f.TempDir(), "a.gguf")
	if err := WriteGGUF(path, Random(c, 2, 4, []Target{Q, Down}, 0.1, 4), c); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := gguf.Parse("fuzz", data)
		if err != nil {
			return
		}
		a, err := fromGGUF(gf, c, 64)
		if err == nil && a.check(c, 64) != nil {
			t.Fatal("accepted an adapter that does not fit the base")
		}
	})
}

func TestFits(t *testing.T) {
	c := tinyConfig()
	a := Random(c, 8, 16, []Target{Q, Down}, 0.1, 9)
	if err := a.Fits(c, 8); err != nil {
		t.Fatal(err)
	}
	if err := a.Fits(c, 4); err == nil || !strings.Contains(err.Error(), "rank 8 exceeds --max-lora-rank 4") {
		t.Errorf("rank: %v", err)
	}
	other := c
	other.FFNDim = 32
	if err := a.Fits(other, 0); err == nil || !strings.Contains(err.Error(), "down_proj maps 24 to 16 features, the base 32 to 16") {
		t.Errorf("shape: %v", err)
	}
	other = c
	other.Layers = 3
	if err := a.Fits(other, 0); err == nil {
		t.Error("layer count accepted")
	}
}
