package hfconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseRealConfigs(t *testing.T) {
	tests := []struct {
		file string
		want Config
		qkv  bool
		qkn  bool
	}{
		{"llama31.json", Config{
			Architecture: Llama, ModelType: "llama", TorchDType: "bfloat16",
			VocabSize: 128256, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 131072,
			RMSNormEps: 1e-5, RopeTheta: 500000,
			RopeScaling: &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4,
				OriginalMaxPositionEmbeddings: 8192, BetaFast: 32, BetaSlow: 1},
			BOSTokenID: TokenIDs{128000}, EOSTokenIDs: TokenIDs{128001, 128008, 128009},
		}, false, false},
		{"mistral.json", Config{
			Architecture: Mistral, ModelType: "mistral", TorchDType: "bfloat16",
			VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-5, RopeTheta: 10000, SlidingWindow: 4096, UseSlidingWindow: true,
			BOSTokenID: TokenIDs{1}, EOSTokenIDs: TokenIDs{2},
		}, false, false},
		{"qwen25.json", Config{
			Architecture: Qwen2, ModelType: "qwen2", TorchDType: "bfloat16",
			VocabSize: 151936, HiddenSize: 896, IntermediateSize: 4864, NumHiddenLayers: 24,
			NumAttentionHeads: 14, NumKeyValueHeads: 2, HeadDim: 64, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, MaxWindowLayers: 21,
			BOSTokenID: TokenIDs{151643}, EOSTokenIDs: TokenIDs{151645},
		}, true, false},
		{"qwen3.json", Config{
			Architecture: Qwen3, ModelType: "qwen3", TorchDType: "bfloat16",
			VocabSize: 151936, HiddenSize: 1024, IntermediateSize: 3072, NumHiddenLayers: 28,
			NumAttentionHeads: 16, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 40960,
			RMSNormEps: 1e-6, RopeTheta: 1e6, TieWordEmbeddings: true, MaxWindowLayers: 28,
			BOSTokenID: TokenIDs{151643}, EOSTokenIDs: TokenIDs{151645},
		}, false, true},
		{"mixtral.json", Config{
			Architecture: Mixtral, ModelType: "mixtral", TorchDType: "bfloat16",
			VocabSize: 32000, HiddenSize: 4096, IntermediateSize: 14336, NumHiddenLayers: 32,
			NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, MaxPositionEmbeddings: 32768,
			RMSNormEps: 1e-5, RopeTheta: 1e6,
			BOSTokenID: TokenIDs{1}, EOSTokenIDs: TokenIDs{2},
			NumExperts: 8, NumExpertsPerTok: 2, MoEIntermediateSize: 14336, NormTopKProb: true, DecoderSparseStep: 1,
		}, false, false},
		{"qwen2moe.json", Config{
			Architecture: Qwen2MoE, ModelType: "qwen2_moe", TorchDType: "bfloat16",
			VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 5632, NumHiddenLayers: 24,
			NumAttentionHeads: 16, NumKeyValueHeads: 16, HeadDim: 128, MaxPositionEmbeddings: 8192,
			RMSNormEps: 1e-6, RopeTheta: 1e6, MaxWindowLayers: 21,
			BOSTokenID: TokenIDs{151643}, EOSTokenIDs: TokenIDs{151643},
			NumExperts: 60, NumExpertsPerTok: 4, MoEIntermediateSize: 1408, SharedExpertIntermediateSize: 5632,
			DecoderSparseStep: 1,
		}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := ReadConfig(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Architectures = []string{tt.want.Architecture}
			if !reflect.DeepEqual(*c, tt.want) {
				t.Errorf("got  %+v\nwant %+v", *c, tt.want)
				if c.RopeScaling != nil {
					t.Errorf("rope scaling %+v", *c.RopeScaling)
				}
			}
			if c.QKVBias() != tt.qkv || c.QKNorm() != tt.qkn || c.OutputBias() {
				t.Errorf("QKVBias %v QKNorm %v OutputBias %v", c.QKVBias(), c.QKNorm(), c.OutputBias())
			}
			// Marshal and parse again: the same configuration comes back.
			data, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			again, err := ParseConfig(data)
			if err != nil {
				t.Fatalf("%v\n%s", err, data)
			}
			if !reflect.DeepEqual(again, c) {
				t.Errorf("after Marshal:\n got  %+v\n want %+v\n%s", *again, *c, data)
			}
		})
	}
}

// parse applies edits (a nil value deletes the key) to a base config and parses it.
func parse(t *testing.T, file string, edits map[string]any) (*Config, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range edits {
		if v == nil {
			delete(m, k)
		} else if v == "null" {
			m[k] = nil
		} else {
			m[k] = v
		}
	}
	data, _ = json.Marshal(m)
	return ParseConfig(data)
}

func TestDefaults(t *testing.T) {
	c, err := parse(t, "llama31.json", map[string]any{
		"num_key_value_heads": nil, "rms_norm_eps": nil, "rope_theta": nil, "max_position_embeddings": nil,
		"rope_scaling": nil, "bos_token_id": nil, "eos_token_id": nil, "tie_word_embeddings": nil, "torch_dtype": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 32 || c.RMSNormEps != 1e-6 || c.RopeTheta != 10000 || c.MaxPositionEmbeddings != 2048 ||
		c.RopeScaling != nil || !slices.Equal(c.BOSTokenID, TokenIDs{1}) || !slices.Equal(c.EOSTokenIDs, TokenIDs{2}) ||
		c.TieWordEmbeddings || c.TorchDType != "" || c.HeadDim != 128 {
		t.Errorf("llama defaults: %+v", *c)
	}
	// Mistral: an absent window is 4096, a null one is none.
	if c, _ := parse(t, "mistral.json", map[string]any{"sliding_window": nil}); c.SlidingWindow != 4096 {
		t.Errorf("mistral absent window %d", c.SlidingWindow)
	}
	if c, _ := parse(t, "mistral.json", map[string]any{"sliding_window": "null"}); c.SlidingWindow != 0 || c.UseSlidingWindow {
		t.Errorf("mistral null window %d", c.SlidingWindow)
	}
	// Qwen2 windows only with use_sliding_window.
	if c, _ := parse(t, "qwen25.json", map[string]any{"use_sliding_window": true}); c.SlidingWindow != 32768 {
		t.Errorf("qwen2 window %d", c.SlidingWindow)
	}
	// Qwen2's attention_bias key does not switch off its q/k/v bias.
	if c, _ := parse(t, "qwen25.json", map[string]any{"attention_bias": false}); !c.QKVBias() {
		t.Error("qwen2 lost its qkv bias")
	}
	// Llama with attention_bias has all four biases.
	if c, _ := parse(t, "llama31.json", map[string]any{"attention_bias": true}); !c.QKVBias() || !c.OutputBias() {
		t.Error("llama attention_bias")
	}
	// head_dim null or absent means hidden/heads, except Qwen3 where transformers says 128.
	if c, _ := parse(t, "mistral.json", map[string]any{"head_dim": "null"}); c.HeadDim != 128 {
		t.Errorf("mistral head_dim %d", c.HeadDim)
	}
	if c, _ := parse(t, "qwen3.json", map[string]any{"head_dim": nil, "hidden_size": 512}); c.HeadDim != 128 {
		t.Errorf("qwen3 default head_dim %d", c.HeadDim)
	}
	// model_type alone identifies the architecture.
	if c, err := parse(t, "qwen3.json", map[string]any{"architectures": nil}); err != nil || c.Architecture != Qwen3 {
		t.Errorf("by model_type: %v %v", c, err)
	}
	// Mixtral defaults for experts.
	if c, _ := parse(t, "mixtral.json", map[string]any{"num_local_experts": nil, "num_experts_per_tok": nil}); c.NumExperts != 8 || c.NumExpertsPerTok != 2 {
		t.Errorf("mixtral experts %d/%d", c.NumExpertsPerTok, c.NumExperts)
	}
	// transformers 5 rope_parameters.
	c, err = parse(t, "llama31.json", map[string]any{"rope_scaling": nil, "rope_theta": nil,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 123456.0}})
	if err != nil || c.RopeTheta != 123456 || c.RopeScaling != nil {
		t.Errorf("rope_parameters: %+v %v", c, err)
	}
}

func TestRopeScaling(t *testing.T) {
	tests := []struct {
		name string
		rope map[string]any
		want *RopeScaling
		err  string
	}{
		{"linear old key", map[string]any{"type": "linear", "factor": 2.0},
			&RopeScaling{Type: "linear", Factor: 2, OriginalMaxPositionEmbeddings: 131072, BetaFast: 32, BetaSlow: 1}, ""},
		{"dynamic", map[string]any{"rope_type": "dynamic", "factor": 4.0},
			&RopeScaling{Type: "dynamic", Factor: 4, OriginalMaxPositionEmbeddings: 131072, BetaFast: 32, BetaSlow: 1}, ""},
		{"yarn", map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "attention_factor": 1.2, "beta_fast": 16.0},
			&RopeScaling{Type: "yarn", Factor: 4, OriginalMaxPositionEmbeddings: 32768, BetaFast: 16, BetaSlow: 1, AttentionFactor: 1.2}, ""},
		{"yarn mscale", map[string]any{"type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},
			&RopeScaling{Type: "yarn", Factor: 40, OriginalMaxPositionEmbeddings: 4096, BetaFast: 32, BetaSlow: 1, MScale: 1, MScaleAllDim: 1}, ""},
		{"default type", map[string]any{"rope_type": "default"}, nil, ""},
		{"unknown", map[string]any{"rope_type": "longrope", "factor": 2.0}, nil, `unsupported type "longrope"`},
		{"no factor", map[string]any{"rope_type": "linear"}, nil, "factor missing"},
		{"zero factor", map[string]any{"rope_type": "linear", "factor": 0.0}, nil, "must be positive"},
		{"llama3 missing", map[string]any{"rope_type": "llama3", "factor": 8.0}, nil, "low_freq_factor"},
		{"llama3 equal", map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 2.0, "original_max_position_embeddings": 8192}, nil, "high_freq_factor"},
		{"disagree", map[string]any{"rope_type": "linear", "type": "yarn", "factor": 2.0}, nil, "disagree"},
		{"yarn betas", map[string]any{"rope_type": "yarn", "factor": 2.0, "beta_fast": 1.0, "beta_slow": 32.0}, nil, "beta_slow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse(t, "llama31.json", map[string]any{"rope_scaling": tt.rope})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "rope_scaling") {
					t.Fatalf("error %v, want one mentioning %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.RopeScaling, tt.want) {
				t.Fatalf("got %+v, want %+v", c.RopeScaling, tt.want)
			}
			// Round trip through Marshal.
			data, _ := c.Marshal()
			again, err := ParseConfig(data)
			if err != nil || !reflect.DeepEqual(again.RopeScaling, tt.want) {
				t.Fatalf("after Marshal: %+v, %v", again, err)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		file  string
		edits map[string]any
		want  string
	}{
		{"llama31.json", map[string]any{"architectures": []string{"GPT2LMHeadModel"}}, `unsupported architecture "GPT2LMHeadModel"`},
		{"llama31.json", map[string]any{"architectures": nil, "model_type": "gpt2"}, `unsupported model_type "gpt2"`},
		{"llama31.json", map[string]any{"architectures": nil, "model_type": nil}, "neither"},
		{"llama31.json", map[string]any{"model_type": "qwen2"}, "does not match model_type"},
		{"llama31.json", map[string]any{"num_hidden_layers": 0}, "num_hidden_layers is 0"},
		{"llama31.json", map[string]any{"hidden_size": nil}, "hidden_size missing"},
		{"llama31.json", map[string]any{"num_attention_heads": 30}, "does not divide hidden_size"},
		{"llama31.json", map[string]any{"num_key_value_heads": 5}, "does not divide num_attention_heads"},
		{"llama31.json", map[string]any{"num_key_value_heads": 0}, "num_key_value_heads is 0"},
		{"llama31.json", map[string]any{"vocab_size": -3}, "vocab_size is -3"},
		{"llama31.json", map[string]any{"rms_norm_eps": 0}, "rms_norm_eps"},
		{"llama31.json", map[string]any{"rope_theta": -1}, "rope_theta"},
		{"llama31.json", map[string]any{"eos_token_id": 200000}, "eos_token_id 200000"},
		{"llama31.json", map[string]any{"eos_token_id": "x"}, "token id"},
		{"llama31.json", map[string]any{"head_dim": 127}, "odd"},
		{"llama31.json", map[string]any{"hidden_size": 1e12}, "implausibly large"},
		{"mistral.json", map[string]any{"sliding_window": "x"}, "sliding_window"},
		{"mixtral.json", map[string]any{"num_experts_per_tok": 9}, "num_experts_per_tok 9"},
		{"qwen2moe.json", map[string]any{"moe_intermediate_size": 0}, "moe_intermediate_size"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := parse(t, tt.file, tt.edits)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := ParseConfig([]byte("{")); err == nil {
		t.Error("bad JSON: no error")
	}
	if _, err := ReadConfig("testdata/missing.json"); err == nil {
		t.Error("missing file: no error")
	}
}

func TestNewConfigMarshal(t *testing.T) {
	for arch := range archs {
		c, err := NewConfig(arch, 512, 64, 172, 5, 8, 4)
		if err != nil {
			t.Fatal(err)
		}
		c.TorchDType = "float16"
		data, err := c.Marshal()
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		var m map[string]any
		json.Unmarshal(data, &m)
		if m["architectures"].([]any)[0] != arch || m["model_type"] != archs[arch].modelType || m["torch_dtype"] != "float16" {
			t.Errorf("%s: %s", arch, data)
		}
		again, err := ParseConfig(data)
		if err != nil {
			t.Fatalf("%s: %v\n%s", arch, err, data)
		}
		if !reflect.DeepEqual(again, c) {
			t.Errorf("%s after Marshal:\n got  %+v\n want %+v", arch, *again, *c)
		}
	}
	if _, err := NewConfig("BertModel", 1, 1, 1, 1, 1, 1); err == nil {
		t.Error("unsupported architecture: no error")
	}
	c, _ := NewConfig(Llama, 512, 64, 172, 0, 8, 4)
	if _, err := c.Marshal(); err == nil {
		t.Error("invalid config marshaled")
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, name := range []string{"llama31.json", "mistral.json", "qwen25.json", "qwen3.json", "mixtral.json", "qwen2moe.json", "gemma2.json", "gemma3.json", "phi3.json", "granite.json", "olmo2.json", "deepseek_v2_lite.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"model_type":"llama","rope_scaling":{"type":"yarn"}}`))
	// Counts far beyond any real model's, and past int32 and int64.
	for _, counts := range []string{
		`"num_hidden_layers":10000000,"num_attention_heads":2,"num_key_value_heads":1`,
		`"num_hidden_layers":2,"num_attention_heads":2147483647,"num_key_value_heads":1`,
		`"num_hidden_layers":4611686018427387904,"num_attention_heads":2,"num_key_value_heads":1`,
		`"num_hidden_layers":2,"num_attention_heads":2,"num_key_value_heads":1,"max_position_embeddings":99999999999999999999`,
	} {
		f.Add([]byte(`{"model_type":"llama","vocab_size":32,"hidden_size":8,"intermediate_size":16,` + counts + `}`))
	}
	f.Add([]byte(`{"model_type":"mixtral","vocab_size":32,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,` +
		`"num_attention_heads":2,"num_local_experts":1000000,"num_experts_per_tok":999999}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		// Anything accepted is valid and survives Marshal.
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		if _, err := ParseConfig(out); err != nil {
			t.Fatalf("marshaled config does not parse: %v\n%s", err, out)
		}
	})
}
