package format

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/hfconfig"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// liteConfig reads DeepSeek-V2-Lite's config.json, edited by edit (nil: as it is).
func liteConfig(t *testing.T, edit func(m map[string]any)) (Config, error) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("hfconfig", "testdata", "deepseek_v2_lite.json"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		if data, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	h, err := hfconfig.ParseConfig(data)
	if err != nil {
		return Config{}, err
	}
	return ConfigFromHF(h)
}

// TestDeepSeekV2LiteConfig: DeepSeek-V2-Lite's config.json gives the MLA geometry (one
// cached vector of 64 + 512 a token, scores scaled by 1/sqrt(128 + 64) and by YaRN's
// m(mscale_all_dim)², cos and sin by m(mscale)/m(mscale_all_dim) = 1) and its expert
// layout (one leading dense layer, two shared experts of 1408); a V3-style sigmoid
// scoring, linear scaling and a YaRN attention_factor are refused by name.
func TestDeepSeekV2LiteConfig(t *testing.T) {
	c, err := liteConfig(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := 0.1*0.707*math.Log(40) + 1
	if s := c.Scaling; s.Type != "yarn" || s.Factor != 40 || s.OriginalContextLen != 4096 || s.AttnFactor != 1 ||
		math.Abs(c.AttnScale-m*m/math.Sqrt(192)) > 1e-12 {
		t.Errorf("yarn: scaling %+v, attention scale %v (want %v)", s, c.AttnScale, m*m/math.Sqrt(192))
	}
	c, err = liteConfig(t, func(m map[string]any) { delete(m, "rope_scaling") })
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Arch: "deepseek2", Heads: 16, KVHeads: 1, HeadDim: 576, RopeDim: 64, QLoRARank: 0, KVLoRARank: 512,
		QKNopeDim: 128, VHeadDim: 128, Experts: 64, ExpertsUsed: 6, ExpertFFNDim: 1408, SharedExpertFFN: 2816,
		LeadingDenseLayers: 1, FFNDim: 10944, ExpertScale: 1, RopeStyle: RopeInterleaved}
	got := Config{Arch: c.Arch, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, RopeDim: c.RopeDim, QLoRARank: c.QLoRARank,
		KVLoRARank: c.KVLoRARank, QKNopeDim: c.QKNopeDim, VHeadDim: c.VHeadDim, Experts: c.Experts, ExpertsUsed: c.ExpertsUsed,
		ExpertFFNDim: c.ExpertFFNDim, SharedExpertFFN: c.SharedExpertFFN, LeadingDenseLayers: c.LeadingDenseLayers,
		FFNDim: c.FFNDim, ExpertScale: c.ExpertScale, RopeStyle: c.RopeStyle}
	if got != want {
		t.Errorf("config\n got %+v\nwant %+v", got, want)
	}
	if d := c.AttnScale - 1/math.Sqrt(192); math.Abs(d) > 1e-12 {
		t.Errorf("attention scale %v, want 1/sqrt(192)", c.AttnScale)
	}
	if c.SharedExpertGated() || c.MoELayer(0) || !c.MoELayer(1) {
		t.Errorf("shared expert gated %v, layer 0 MoE %v, layer 1 MoE %v", c.SharedExpertGated(), c.MoELayer(0), c.MoELayer(1))
	}
	v3, err := liteConfig(t, func(m map[string]any) {
		m["scoring_func"], m["topk_method"], m["n_group"], m["topk_group"] = "sigmoid", "noaux_tc", 8, 3
	})
	if err != nil || !v3.ExpertSigmoid || v3.ExpertGroups != 8 || v3.ExpertGroupsUsed != 3 {
		t.Errorf("V3 routing: sigmoid %v, groups %d of %d, %v", v3.ExpertSigmoid, v3.ExpertGroupsUsed, v3.ExpertGroups, err)
	}
	for want, edit := range map[string]func(m map[string]any){
		"noaux_tc needs":   func(m map[string]any) { m["topk_method"] = "noaux_tc" },
		"group_limited":    func(m map[string]any) { m["topk_method"] = "group_limited_greedy" },
		"linear":           func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "linear", "factor": 2} },
		"attention_factor": func(m map[string]any) { m["rope_scaling"].(map[string]any)["attention_factor"] = 1.2 },
		"tanh":             func(m map[string]any) { m["scoring_func"] = "tanh" },
	} {
		if _, err := liteConfig(t, edit); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
}

// mlaTestConfig is a small MLA model with a q rank, a leading dense layer and experts.
func mlaTestConfig() Config {
	c := Config{Arch: "deepseek2", VocabSize: 32, Dim: 16, Layers: 2, Heads: 2, FFNDim: 24, ContextLen: 64,
		NormEps: 1.0 / 1024, RopeTheta: 10000, RopeDim: 4, QLoRARank: 8, KVLoRARank: 12, Experts: 4, ExpertsUsed: 2,
		ExpertFFNDim: 8, SharedExpertFFN: 8, LeadingDenseLayers: 1, ExpertScale: 1.5}
	if err := mlaFromFile(&c, 6+4, 5); err != nil {
		panic(err)
	}
	return c
}

// zeroTensors returns F32 zero tensors of every shape c calls for, experts stacked (as
// GGUF holds them).
func zeroTensors(c Config) []OutTensor { return zeroTensorsOf(c, true) }

// zeroTensorsOf is zeroTensors with the experts stacked or one tensor each.
func zeroTensorsOf(c Config, stacked bool) []OutTensor {
	n := &configNames
	var es []expectation
	es = append(es, expectation{name: "token_embd.weight", shape: []int{c.VocabSize, c.Dim}},
		expectation{name: "output_norm.weight", shape: []int{c.Dim}}, expectation{name: "output.weight", shape: []int{c.VocabSize, c.Dim}})
	var out []OutTensor
	add := func(prefix string, es []expectation) {
		for _, e := range es {
			out = append(out, OutTensor{Name: prefix + e.name, Type: quant.F32, Shape: e.shape, Data: make([]byte, 4*product(e.shape))})
		}
	}
	add("", es)
	for l := range c.Layers {
		p := "blk." + strconv.Itoa(l) + "."
		add(p, layerExpectations(&c, n, !c.MoELayer(l)))
		if c.MoELayer(l) {
			add(p, expertExpectations(&c, n, stacked))
		}
		for e := range c.Experts {
			if stacked || !c.MoELayer(l) {
				break
			}
			x := strconv.Itoa(e)
			add(p, []expectation{{name: "ffn_gate." + x + ".weight", shape: []int{c.ExpertFFNDim, c.Dim}},
				{name: "ffn_up." + x + ".weight", shape: []int{c.ExpertFFNDim, c.Dim}},
				{name: "ffn_down." + x + ".weight", shape: []int{c.Dim, c.ExpertFFNDim}}})
		}
	}
	return out
}

// TestDeepSeek2GGUF: an MLA config written as a "deepseek2" GGUF (llama.cpp's keys: the
// head's key and value sizes, head_count_kv the query heads) opens as the same config;
// sigmoid gating, group-limited routing and a missing key_length are refused by name.
func TestDeepSeek2GGUF(t *testing.T) {
	c := mlaTestConfig()
	contents := Contents{Name: "ds", Config: c}
	kvs := contents.GGUFMetadata(quant.F32)
	keys := map[string]uint32{}
	for _, kv := range kvs {
		if v, ok := kv.Value.Uint64(); ok {
			keys[kv.Key] = uint32(v)
		}
	}
	if keys["deepseek2.attention.key_length"] != 10 || keys["deepseek2.attention.value_length"] != 5 ||
		keys["deepseek2.attention.head_count_kv"] != 2 || keys["deepseek2.attention.kv_lora_rank"] != 12 ||
		keys["deepseek2.expert_shared_count"] != 1 || keys["deepseek2.leading_dense_block_count"] != 1 {
		t.Errorf("metadata %v", keys)
	}
	write := func(extra ...gguf.KV) string {
		path := filepath.Join(t.TempDir(), "ds.gguf")
		var wts []gguf.WriterTensor
		for _, ot := range zeroTensors(c) {
			dims := make([]uint64, len(ot.Shape))
			for j, d := range ot.Shape {
				dims[len(ot.Shape)-1-j] = uint64(d)
			}
			wts = append(wts, gguf.WriterTensor{Name: ot.Name, Type: ot.Type, Dims: dims, Data: ot.Data})
		}
		var all []gguf.KV
		for _, kv := range kvs {
			drop := false
			for _, e := range extra {
				drop = drop || e.Key == kv.Key
			}
			if !drop {
				all = append(all, kv)
			}
		}
		for _, e := range extra {
			if e.Value.Type != gguf.StringType || e.Value.Any() != "" {
				all = append(all, e)
			}
		}
		if err := gguf.WriteFile(path, all, wts, nil); err != nil {
			t.Fatal(err)
		}
		return path
	}
	m, err := Open(write(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := m.Config
	m.Close()
	got.VocabSize, got.TiedEmbeddings = c.VocabSize, c.TiedEmbeddings
	if got != c {
		t.Errorf("opened config\n got %+v\nwant %+v", got, c)
	}
	for _, tc := range []struct {
		kv   gguf.KV
		want string
	}{
		{gguf.KV{Key: "deepseek2.expert_gating_func", Value: gguf.Uint32(3)}, "expert_gating_func 3"},
		{gguf.KV{Key: "deepseek2.expert_group_count", Value: gguf.Uint32(2)}, "group-limited"},
		{gguf.KV{Key: "deepseek2.attention.key_length", Value: gguf.String("")}, "key_length is missing"},
		{gguf.KV{Key: "deepseek2.attention.key_length", Value: gguf.Uint32(4)}, "must exceed the rotary head size"},
	} {
		if _, err := Open(write(tc.kv), Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.kv.Key, err, tc.want)
		}
	}
}

// mlaCountKeys are the "deepseek2." keys FuzzDeepSeek2Counts sets.
var mlaCountKeys = []string{
	"attention.q_lora_rank", "attention.kv_lora_rank", "attention.key_length", "attention.value_length",
	"attention.key_length_mla", "attention.value_length_mla", "rope.dimension_count", "leading_dense_block_count",
	"expert_shared_count", "expert_gating_func", "expert_group_count", "attention.head_count",
	"attention.head_count_kv", "expert_count", "expert_used_count", "expert_feed_forward_length", "block_count",
	"embedding_length", "feed_forward_length",
}

// FuzzDeepSeek2Counts sets one count of a small deepseek2 GGUF to any value: opening never
// panics, an error names the file, and what is accepted has the geometry the tensors have.
func FuzzDeepSeek2Counts(f *testing.F) {
	for i := range mlaCountKeys {
		f.Add(uint8(i), uint64(1)<<62)
		f.Add(uint8(i), uint64(0))
		f.Add(uint8(i), uint64(3))
	}
	c := mlaTestConfig()
	tensors := zeroTensors(c)
	f.Fuzz(func(t *testing.T, key uint8, value uint64) {
		k := "deepseek2." + mlaCountKeys[int(key)%len(mlaCountKeys)]
		data := ggufBytes(t, c, tinyVocab(32), func(kvs []gguf.KV) []gguf.KV { return setKV(kvs, k, gguf.Uint64(value)) }, tensors)
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
		g := m.Config
		if g.Layers != c.Layers || g.Dim != c.Dim || g.Heads != c.Heads || g.HeadDim != c.HeadDim || g.KVHeads != 1 ||
			g.QLoRARank != c.QLoRARank || g.KVLoRARank != c.KVLoRARank || g.QKNopeDim != c.QKNopeDim ||
			g.VHeadDim != c.VHeadDim || g.LeadingDenseLayers != c.LeadingDenseLayers || g.SharedExpertFFN != c.SharedExpertFFN {
			t.Fatalf("accepted a header the tensors contradict: %+v", g)
		}
	})
}

// TestDeepSeekHFSkipsMTPLayers: a DeepSeek folder's layers past num_hidden_layers
// (DeepSeek-V3's multi-token-prediction layer) are not read, and the model opens.
func TestDeepSeekHFSkipsMTPLayers(t *testing.T) {
	c := mlaTestConfig()
	ts := append(zeroTensorsOf(c, false), OutTensor{Name: "blk.2.attn_q_a.weight", Type: quant.F32, Shape: []int{c.QLoRARank, c.Dim},
		Data: make([]byte, 4*c.QLoRARank*c.Dim)})
	dir := t.TempDir()
	if err := WriteHF(dir, Contents{Name: "ds", Config: c}, quant.F32, ts, 0, nil); err != nil {
		t.Fatal(err)
	}
	m, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, ok := m.Tensor("blk.2.attn_q_a.weight"); ok || m.Config.Layers != 2 {
		t.Errorf("layer 2 read (%v), %d layers", ok, m.Config.Layers)
	}
}
