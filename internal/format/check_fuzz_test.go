package format

import (
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// hostileCountKeys are the GGUF keys (after "llama.") FuzzGGUFCounts sets.
var hostileCountKeys = []string{
	"block_count", "attention.head_count", "attention.head_count_kv", "attention.key_length",
	"embedding_length", "feed_forward_length", "vocab_size", "context_length", "rope.dimension_count",
	"expert_count", "expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length",
	"attention.sliding_window", "rope.scaling.original_context_length",
}

// checkAcceptedTiny fails unless a model made of the tiny fixture's tensors was accepted
// with the fixture's shape: the tensors alone decide what a header may claim.
func checkAcceptedTiny(t *testing.T, m *Model, moe bool) {
	t.Helper()
	c := m.Config
	ok := c.Layers == 2 && c.Dim == 8 && c.VocabSize == 32 && c.Heads*c.HeadDim == 8 && c.KVHeads*c.HeadDim == 4
	if moe {
		ok = ok && c.Experts == 4 && c.ExpertFFNDim == 16 && c.ExpertsUsed >= 1 && c.ExpertsUsed <= 4
	} else {
		ok = ok && c.Experts == 0 && c.FFNDim == 16
	}
	if !ok {
		t.Fatalf("accepted a header the tensors contradict: %+v", c)
	}
}

// FuzzGGUFCounts sets one count of the tiny model's GGUF metadata to any value (as a
// UINT64 or an INT64) and may give one tensor another row count. Opening never panics, an
// error names the file, and what is accepted agrees with the tensors.
func FuzzGGUFCounts(f *testing.F) {
	for i := range hostileCountKeys {
		f.Add(false, uint8(i), uint64(1)<<62, false, uint8(0), uint16(0))
		f.Add(true, uint8(i), uint64(1_000_000), false, uint8(0), uint16(0))
		f.Add(false, uint8(i), uint64(1<<64-1), true, uint8(0), uint16(0))
	}
	f.Add(false, uint8(0), uint64(1), false, uint8(0), uint16(0))
	f.Add(false, uint8(0), uint64(3), false, uint8(0), uint16(0))
	f.Add(false, uint8(0), uint64(2), false, uint8(3), uint16(8))
	f.Add(true, uint8(9), uint64(4), false, uint8(9), uint16(8))
	f.Fuzz(func(t *testing.T, moe bool, key uint8, value uint64, signed bool, tensor uint8, rows uint16) {
		c := tinyConfig()
		if moe {
			c = tinyMoEConfig()
		}
		v := gguf.Uint64(value)
		if signed {
			v = gguf.Int64(int64(value))
		}
		k := "llama." + hostileCountKeys[int(key)%len(hostileCountKeys)]
		ts := tinyTensors(c)
		if rows > 0 {
			tn := &ts[int(tensor)%len(ts)]
			tn.Shape = append([]int{int(rows)}, tn.Shape[1:]...)
			tn.Data = make([]byte, 4*product(tn.Shape))
		}
		data := ggufBytes(t, c, tinyVocab(32), func(kvs []gguf.KV) []gguf.KV { return setKV(kvs, k, v) }, ts)
		file, err := gguf.Parse("fuzz.gguf", data)
		if err != nil {
			t.Fatal(err)
		}
		m, err := modelFromGGUF(file, Limits{})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf fuzz.gguf: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		checkAcceptedTiny(t, m, moe)
	})
}

// FuzzHFConfigCounts opens the tiny model's tensors with any config.json: never a panic,
// and what is accepted agrees with the tensors.
func FuzzHFConfigCounts(f *testing.F) {
	h, err := ConfigToHF(tinyConfig(), quant.F32)
	if err != nil {
		f.Fatal(err)
	}
	good, err := h.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, change := range []string{`"num_hidden_layers": 10000000`, `"num_hidden_layers": 2147483647`,
		`"hidden_size": 1073741824`, `"vocab_size": 8388608`, `"num_key_value_heads": 2`,
		`"head_dim": 1048576`, `"max_position_embeddings": 1073741824`, `"intermediate_size": 24`} {
		f.Add([]byte(strings.Replace(string(good), "{", "{"+change+",", 1)))
	}
	// The other architectures' keys, on the same sizes (their tensors differ: refused).
	for arch, modelType := range map[string]string{hfconfig.Gemma2: "gemma2", hfconfig.Gemma3: "gemma3_text",
		hfconfig.Phi3: "phi3", hfconfig.Granite: "granite", hfconfig.Olmo2: "olmo2", hfconfig.DeepSeekV2: "deepseek_v2",
		hfconfig.Qwen3MoE: "qwen3_moe"} {
		s := strings.Replace(string(good), hfconfig.Llama, arch, 1)
		f.Add([]byte(strings.Replace(s, `"model_type": "llama"`, `"model_type": "`+modelType+`"`, 1)))
	}
	tensors := tinyTensors(tinyConfig())
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := hfconfig.ParseConfig(data)
		if err != nil {
			return
		}
		cfg, err := ConfigFromHF(h)
		if err != nil {
			return
		}
		m := &Model{Path: "fuzz", Format: "safetensors", Config: cfg, names: hfNames(h.Architecture == hfconfig.Mixtral)}
		for _, tn := range tensors {
			m.addTensor(&Tensor{Name: tn.Name, Type: tn.Type, Shape: tn.Shape, Data: tn.Data})
		}
		if err := m.inferFromTensors(Limits{}); err != nil {
			return
		}
		checkAcceptedTiny(t, m, false)
	})
}
