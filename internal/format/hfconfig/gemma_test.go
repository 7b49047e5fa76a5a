package hfconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestParseGemmaConfigs reads Gemma 2 2B's and Gemma 3 1B's config.json: the Gemma keys,
// tied embeddings by default, the window alternation (every other layer from the first;
// five of every six) and null soft-capping.
func TestParseGemmaConfigs(t *testing.T) {
	for _, tc := range []struct {
		file                string
		arch                string
		window              int
		attnCap, finalCap   float64
		localBase           float64
		fullLayers          []int
		kvHeads, eos0, eos1 int
	}{
		{"gemma2.json", Gemma2, 4096, 50, 30, 0, []int{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25}, 4, 1, 107},
		{"gemma3.json", Gemma3, 512, 0, 0, 10000, []int{5, 11, 17, 23}, 1, 1, 106},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			c, err := ParseConfig(data)
			if err != nil {
				t.Fatal(err)
			}
			g := c.Gemma
			if c.Architecture != tc.arch || !c.TieWordEmbeddings || c.HeadDim != 256 || c.NumKeyValueHeads != tc.kvHeads ||
				c.SlidingWindow != tc.window || g.HiddenActivation != "gelu_pytorch_tanh" || g.QueryPreAttnScalar != 256 ||
				g.AttnLogitSoftcapping != tc.attnCap || g.FinalLogitSoftcapping != tc.finalCap || g.RopeLocalBaseFreq != tc.localBase ||
				!slices.Equal(c.EOSTokenIDs, TokenIDs{tc.eos0, tc.eos1}) {
				t.Errorf("parsed %+v", c)
			}
			var full []int
			for l, typ := range g.LayerTypes {
				if typ == FullAttention {
					full = append(full, l)
				}
			}
			if !slices.Equal(full, tc.fullLayers) {
				t.Errorf("full-attention layers %v, want %v", full, tc.fullLayers)
			}
			// Marshal and parse again: the same Gemma settings.
			out, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			c2, err := ParseConfig(out)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !slices.Equal(c2.Gemma.LayerTypes, g.LayerTypes) || c2.Gemma.AttnLogitSoftcapping != g.AttnLogitSoftcapping ||
				c2.Gemma.FinalLogitSoftcapping != g.FinalLogitSoftcapping || c2.Gemma.RopeLocalBaseFreq != g.RopeLocalBaseFreq ||
				c2.SlidingWindow != c.SlidingWindow || c2.Gemma.QueryPreAttnScalar != g.QueryPreAttnScalar {
				t.Errorf("round trip: %+v, want %+v", c2, c)
			}
		})
	}
}

// TestGemmaConfigErrors: bad Gemma keys are refused with the key named.
func TestGemmaConfigErrors(t *testing.T) {
	base := `{"architectures":["Gemma2ForCausalLM"],"vocab_size":32,"hidden_size":8,"intermediate_size":16,` +
		`"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":4,`
	for _, tc := range []struct{ extra, want string }{
		{`"layer_types":["full_attention"]}`, "layer_types has 1 entries"},
		{`"layer_types":["sliding_attention","local"]}`, `layer_types[1] is "local"`},
		{`"query_pre_attn_scalar":0}`, "query_pre_attn_scalar"},
		{`"attn_logit_softcapping":-1}`, "soft-capping"},
		{`"final_logit_softcapping":"x"}`, "final_logit_softcapping"},
	} {
		_, err := ParseConfig([]byte(base + tc.extra))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.extra, err, tc.want)
		}
	}
}

// TestMarshalGemmaSoftcapsAsFloats: the soft-capping values are written as floats with a
// decimal point, which transformers' strict Gemma 2 config demands (30 was refused).
func TestMarshalGemmaSoftcapsAsFloats(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "gemma2.json"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"final_logit_softcapping":30.0`, `"attn_logit_softcapping":50.0`} {
		if !strings.Contains(strings.ReplaceAll(string(out), " ", ""), want) {
			t.Errorf("config.json lacks %s:\n%s", want, out)
		}
	}
	again, err := ParseConfig(out)
	if err != nil || again.Gemma.FinalLogitSoftcapping != 30 {
		t.Errorf("re-read: %v, final cap %v", err, again.Gemma.FinalLogitSoftcapping)
	}
}
