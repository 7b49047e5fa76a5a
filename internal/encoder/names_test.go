package encoder

import (
	"strings"
	"testing"
)

func TestNamesRoundTrip(t *testing.T) {
	c, _ := SynthConfig("bert-tiny-reranker")
	for _, classifier := range []bool{false, true} {
		for _, ts := range tensorShapes(c, true) {
			g := ts.name
			hf, ok := hfName(g, classifier)
			if !ok {
				t.Fatalf("%s has no Hugging Face name", g)
			}
			if back, ok := ggufName(hf); !ok || back != g {
				t.Errorf("%s -> %s -> %s, %v", g, hf, back, ok)
			}
		}
	}
	for hf, want := range map[string]string{"embeddings.LayerNorm.gamma": "token_embd_norm.weight",
		"bert.encoder.layer.2.attention.output.LayerNorm.beta": "blk.2.attn_output_norm.bias"} {
		if g, ok := ggufName(hf); !ok || g != want {
			t.Errorf("%s -> %s %v, want %s", hf, g, ok, want)
		}
	}
	for _, hf := range []string{"embeddings.position_ids", "encoder.layer.x.output.dense.weight", "encoder.layer.1.output.dense.scale", "cls.predictions.bias"} {
		if g, ok := ggufName(hf); ok {
			t.Errorf("%s mapped to %s", hf, g)
		}
	}
}

func TestNomicNamesRoundTrip(t *testing.T) {
	c, _ := SynthConfig("nomic-bert-tiny")
	for _, ts := range tensorShapes(c, true) {
		hf, ok := nomicHFName(ts.name)
		if !ok {
			t.Fatalf("%s has no NomicBertModel name", ts.name)
		}
		if back, ok := nomicGGUFName(hf); !ok || back != ts.name {
			t.Errorf("%s -> %s -> %s, %v", ts.name, hf, back, ok)
		}
	}
	for _, hf := range []string{"encoder.layers.0.attn.Wqkv.scale", "encoder.layers.x.norm1.weight", "encoder.layer.0.norm1.weight", "lm_head.weight"} {
		if g, ok := nomicGGUFName(hf); ok {
			t.Errorf("%s mapped to %s", hf, g)
		}
	}
}

func TestJinaNamesRoundTrip(t *testing.T) {
	c, _ := SynthConfig("jina-bert-v2-tiny-norms")
	for _, ts := range tensorShapes(c, true) {
		g := ts.name
		if strings.HasSuffix(g, "ffn_up.weight") {
			continue // written fused with the gate
		}
		g = strings.Replace(g, "ffn_gate.weight", "ffn_gate_up.weight", 1)
		hf, ok := jinaHFName(g)
		if !ok {
			t.Fatalf("%s has no JinaBertModel name", g)
		}
		if back, ok := jinaGGUFName(hf); !ok || back != g {
			t.Errorf("%s -> %s -> %s, %v", g, hf, back, ok)
		}
	}
	for hf, want := range map[string]string{"bert.encoder.layer.1.mlp.up_gated_layer.weight": "blk.1.ffn_up_gate.weight",
		"encoder.layer.0.layer_norm_2.bias": "blk.0.layer_output_norm.bias", "encoder.layer.3.mlp.down_layer.weight": "blk.3.ffn_down.weight"} {
		if g, ok := jinaGGUFName(hf); !ok || g != want {
			t.Errorf("%s -> %s %v, want %s", hf, g, ok, want)
		}
	}
	for _, hf := range []string{"cls.predictions.bias", "encoder.layer.0.intermediate.dense.weight", "encoder.layer.x.mlp.wo.weight"} {
		if g, ok := jinaGGUFName(hf); ok {
			t.Errorf("%s mapped to %s", hf, g)
		}
	}
}

// FuzzJinaNames: any name maps to a GGUF name, or to nothing, without panicking; the names
// a folder is written with map back.
func FuzzJinaNames(f *testing.F) {
	for _, s := range []string{"bert.encoder.layer.3.mlp.gated_layers.weight", "embeddings.LayerNorm.bias", "encoder.layer.2.layer_norm_1.weight", "encoder.layer..", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hf string) {
		g, ok := jinaGGUFName(hf)
		if !ok {
			return
		}
		if back, ok := jinaHFName(g); ok {
			if g2, ok := jinaGGUFName(back); !ok || g2 != g {
				t.Fatalf("%q -> %q -> %q -> %q", hf, g, back, g2)
			}
		}
	})
}

// FuzzNomicNames: any name maps to a GGUF name that maps back to it (layer numbers in
// canonical form), or to nothing.
func FuzzNomicNames(f *testing.F) {
	for _, s := range []string{"encoder.layers.3.attn.Wqkv.weight", "emb_ln.bias", "encoder.layers.01.mlp.fc11.weight", "encoder.layers..", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hf string) {
		g, ok := nomicGGUFName(hf)
		if !ok {
			return
		}
		back, ok := nomicHFName(g)
		if !ok {
			t.Fatalf("%q -> %q has no way back", hf, g)
		}
		if g2, ok := nomicGGUFName(back); !ok || g2 != g {
			t.Fatalf("%q -> %q -> %q -> %q", hf, g, back, g2)
		}
	})
}

// FuzzNames: any name maps to a GGUF name that maps back (up to the "bert." prefix), or
// to nothing.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"bert.encoder.layer.3.attention.self.query.bias", "classifier.weight", "encoder.layer.0.output.LayerNorm.weight", "encoder.layer..", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, hf string) {
		g, ok := ggufName(hf)
		if !ok {
			return
		}
		back, ok := hfName(g, strings.HasPrefix(hf, "bert."))
		if !ok || (back != hf && "bert."+back != hf && back != strings.TrimPrefix(hf, "bert.")) {
			// Layer numbers are written back in canonical form; compare through GGUF.
			if g2, _ := ggufName(back); g2 != g {
				t.Fatalf("%q -> %q -> %q", hf, g, back)
			}
		}
	})
}
