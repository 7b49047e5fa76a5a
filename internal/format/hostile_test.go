package format

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/format/gguf"
	"github.com/kvasir-llm/kvasir/internal/format/llama2c"
	"github.com/kvasir-llm/kvasir/internal/quant"
	"github.com/kvasir-llm/kvasir/internal/tokenizer"
)

// tinyConfig is a valid two-layer model, small enough to write in every test case.
func tinyConfig() Config {
	return Config{Arch: "llama", VocabSize: 32, Dim: 8, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 4,
		RopeDim: 4, FFNDim: 16, ContextLen: 64, NormEps: 1e-5, RopeTheta: 10000}
}

// tinyMoEConfig is tinyConfig with four routed experts, two used per token.
func tinyMoEConfig() Config {
	c := tinyConfig()
	c.Experts, c.ExpertsUsed, c.ExpertFFNDim = 4, 2, 16
	return c
}

// tinyTensors returns zero F32 tensors of every weight c calls for (experts stacked).
func tinyTensors(c Config) []OutTensor {
	var out []OutTensor
	add := func(name string, shape ...int) {
		out = append(out, OutTensor{Name: name, Type: quant.F32, Shape: shape, Data: make([]byte, 4*product(shape))})
	}
	add("token_embd.weight", c.VocabSize, c.Dim)
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	for l := range c.Layers {
		p := "blk." + strconv.Itoa(l) + "."
		add(p+"attn_norm.weight", c.Dim)
		add(p+"attn_q.weight", q, c.Dim)
		add(p+"attn_k.weight", kv, c.Dim)
		add(p+"attn_v.weight", kv, c.Dim)
		add(p+"attn_output.weight", c.Dim, q)
		add(p+"ffn_norm.weight", c.Dim)
		if c.Experts == 0 {
			add(p+"ffn_gate.weight", c.FFNDim, c.Dim)
			add(p+"ffn_up.weight", c.FFNDim, c.Dim)
			add(p+"ffn_down.weight", c.Dim, c.FFNDim)
			continue
		}
		add(p+"ffn_gate_inp.weight", c.Experts, c.Dim)
		add(p+"ffn_gate_exps.weight", c.Experts, c.ExpertFFNDim, c.Dim)
		add(p+"ffn_up_exps.weight", c.Experts, c.ExpertFFNDim, c.Dim)
		add(p+"ffn_down_exps.weight", c.Experts, c.Dim, c.ExpertFFNDim)
	}
	add("output_norm.weight", c.Dim)
	add("output.weight", c.VocabSize, c.Dim)
	return out
}

// tinyVocab returns an SPM vocabulary of n tokens.
func tinyVocab(n int) *tokenizer.Vocab {
	v := &tokenizer.Vocab{Model: "llama", BOS: 1, EOS: 2, UNK: 0, PAD: -1, SEP: -1, CLS: -1, MASK: -1, EOT: -1}
	for i := range n {
		v.Tokens = append(v.Tokens, "t"+strconv.Itoa(i))
		v.Scores = append(v.Scores, 0)
	}
	return v
}

// setKV replaces the value of key in kvs, or appends it.
func setKV(kvs []gguf.KV, key string, v gguf.Value) []gguf.KV {
	for i := range kvs {
		if kvs[i].Key == key {
			kvs[i].Value = v
			return kvs
		}
	}
	return append(kvs, gguf.KV{Key: key, Value: v})
}

// ggufBytes encodes a GGUF of c's metadata (with vocab when not nil) changed by edit, and
// of the tensors.
func ggufBytes(t testing.TB, c Config, vocab *tokenizer.Vocab, edit func([]gguf.KV) []gguf.KV, tensors []OutTensor) []byte {
	t.Helper()
	kvs := Contents{Name: "tiny", Config: c, Vocab: vocab}.GGUFMetadata(quant.F32)
	if edit != nil {
		kvs = edit(kvs)
	}
	return encodeGGUF(t, kvs, tensors)
}

// encodeGGUF encodes a GGUF of the metadata and tensors in memory.
func encodeGGUF(t testing.TB, kvs []gguf.KV, tensors []OutTensor) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := gguf.NewWriter(&buf, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range tensors {
		dims := make([]uint64, len(tn.Shape))
		for j, d := range tn.Shape {
			dims[len(tn.Shape)-1-j] = uint64(d)
		}
		if err := w.AddTensor(gguf.WriterTensor{Name: tn.Name, Type: tn.Type, Dims: dims, Data: tn.Data}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// writeFile writes data to a new file called name and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every hostile file must be refused within refuseTime, allocating at most refuseBytes.
const (
	refuseTime  = time.Second
	refuseBytes = 50 << 20
)

// checkRefused opens path and requires a refusal naming want, within refuseTime and
// refuseBytes of allocation (runtime.MemStats.TotalAlloc, which counts every allocation,
// freed or not, so it bounds the heap's growth).
func checkRefused(t *testing.T, path string, opt Options, want string) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	m, err := Open(path, opt)
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil {
		m.Close()
		t.Fatalf("opened; want an error containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want one containing %q", err, want)
	}
	if elapsed > refuseTime {
		t.Errorf("refused after %v, want within %v", elapsed, refuseTime)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > refuseBytes {
		t.Errorf("allocated %d MB before refusing, want at most %d MB", grew>>20, refuseBytes>>20)
	}
}

// TestTinyModelsOpen: the fixtures the hostile cases start from are valid, so that each
// case is refused for its one change.
func TestTinyModelsOpen(t *testing.T) {
	for _, c := range []Config{tinyConfig(), tinyMoEConfig()} {
		p := writeFile(t, "ok.gguf", ggufBytes(t, c, tinyVocab(c.VocabSize), nil, tinyTensors(c)))
		m := openT(t, p, Options{})
		if m.Config.Layers != 2 || m.Config.Experts != c.Experts || len(m.Vocab.Tokens) != 32 {
			t.Errorf("opened %+v with %d tokens, want the tiny model", m.Config, len(m.Vocab.Tokens))
		}
	}
}

// TestHostileGGUFCounts: a GGUF whose metadata declares counts that its tensors disagree
// with, or beyond the limits, or that do not fit an int, is refused at once with an error
// naming the key, whatever the count.
func TestHostileGGUFCounts(t *testing.T) {
	u32 := func(v uint32) gguf.Value { return gguf.Uint32(v) }
	cases := []struct {
		name  string
		moe   bool
		key   string // without the "llama." prefix
		value gguf.Value
		want  string
	}{
		{"layers 1e6", false, "block_count", u32(1_000_000), "llama.block_count is 1000000, but the tensors hold only 2 layers (blk.0 to blk.1)"},
		{"layers 2^62", false, "block_count", gguf.Uint64(1 << 62), "llama.block_count 4611686018427387904 is out of range"},
		{"layers 2^64-1", false, "block_count", gguf.Uint64(math.MaxUint64), "llama.block_count 18446744073709551615 is out of range"},
		{"layers 2^31-1", false, "block_count", u32(math.MaxInt32), "llama.block_count is 2147483647, but the tensors hold only 2 layers"},
		{"layers -1", false, "block_count", gguf.Int32(-1), "llama.block_count -1 is out of range"},
		{"layers as text", false, "block_count", gguf.String("2"), "llama.block_count is STRING, want an integer"},
		{"layers too few", false, "block_count", u32(1), "llama.block_count is 1, but tensor blk.1."},
		{"layers 0", false, "block_count", u32(0), "llama.block_count is 0, but tensor blk.1."},
		{"heads 2^20", false, "attention.head_count", u32(1 << 20), "llama.attention.head_count 1048576 exceeds the limit of 1024 (format.Limits.MaxHeads)"},
		{"heads 2^31-1", false, "attention.head_count", u32(math.MaxInt32), "llama.attention.head_count 2147483647 exceeds the limit of 1024"},
		{"heads 4", false, "attention.head_count", u32(4),
			"tensor blk.0.attn_q.weight: shape [8 8], want [16 8] (from llama.attention.head_count x llama.attention.key_length, llama.embedding_length)"},
		{"kv heads 2^32-1", false, "attention.head_count_kv", u32(math.MaxUint32), "llama.attention.head_count_kv 4294967295 is out of range (0..2147483647)"},
		{"kv heads 3", false, "attention.head_count_kv", u32(3), "llama.attention.head_count_kv 3 does not divide llama.attention.head_count 2"},
		{"head dim 2^30", false, "attention.key_length", u32(1 << 30), "llama.attention.key_length 1073741824 exceeds the limit of 4096"},
		{"head dim 6", false, "attention.key_length", u32(6), "tensor blk.0.attn_q.weight: shape [8 8], want [12 8]"},
		{"dim 2^31-1", false, "embedding_length", u32(math.MaxInt32), "llama.embedding_length 2147483647 exceeds the limit of 131072"},
		{"dim 16", false, "embedding_length", u32(16), "tensor token_embd.weight: shape [32 8], want [32 16]"},
		{"ffn 2^30", false, "feed_forward_length", u32(1 << 30), "llama.feed_forward_length 1073741824 exceeds the limit of 1048576"},
		{"ffn 17", false, "feed_forward_length", u32(17), "tensor blk.0.ffn_gate.weight: shape [16 8], want [17 8] (from llama.feed_forward_length, llama.embedding_length)"},
		{"vocab 2^30", false, "vocab_size", u32(1 << 30), "llama.vocab_size 1073741824 exceeds the limit of 4194304"},
		{"vocab 1e6", false, "vocab_size", u32(1_000_000), "tensor token_embd.weight: shape [32 8], want [1000000 8] (from llama.vocab_size, llama.embedding_length)"},
		{"context 2^31-1", false, "context_length", u32(math.MaxInt32), "llama.context_length 2147483647 exceeds the limit of 134217728"},
		{"window 2^31-1", false, "attention.sliding_window", u32(math.MaxInt32), "llama.attention.sliding_window 2147483647 exceeds the limit"},
		{"rope dims 2^20", false, "rope.dimension_count", u32(1 << 20), "llama.rope.dimension_count 1048576 is more than 4"},
		{"norm eps NaN", false, "attention.layer_norm_rms_epsilon", gguf.Float32(float32(math.NaN())), "llama.attention.layer_norm_rms_epsilon NaN is out of range"},
		{"rope theta -1", false, "rope.freq_base", gguf.Float32(-1), "llama.rope.freq_base -1 must be positive"},
		{"experts on a dense model", false, "expert_count", u32(64), "llama.expert_used_count is 0; it must be at least 1"},
		{"experts 2^20", true, "expert_count", u32(1 << 20), "llama.expert_count 1048576 exceeds the limit of 4096"},
		{"experts 8 of 4", true, "expert_count", u32(8), "tensor blk.0.ffn_gate_inp.weight: shape [4 8], want [8 8] (from llama.expert_count, llama.embedding_length)"},
		{"experts used 5 of 4", true, "expert_used_count", u32(5), "llama.expert_used_count 5 is more than 4"},
		{"expert ffn 2^30", true, "expert_feed_forward_length", u32(1 << 30), "llama.expert_feed_forward_length 1073741824 exceeds the limit"},
		{"expert ffn 32", true, "expert_feed_forward_length", u32(32), "tensor blk.0.ffn_gate_exps.weight: shape [4 16 8], want [4 32 8]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig()
			if tc.moe {
				c = tinyMoEConfig()
			}
			edit := func(kvs []gguf.KV) []gguf.KV { return setKV(kvs, "llama."+tc.key, tc.value) }
			p := writeFile(t, "hostile.gguf", ggufBytes(t, c, tinyVocab(c.VocabSize), edit, tinyTensors(c)))
			checkRefused(t, p, Options{}, tc.want)
		})
	}
}

// TestHostileGGUFTensors: tensors that disagree with sound counts are refused: a wrong
// shape, a missing tensor, a layer beyond the count, more tokens than embedding rows.
func TestHostileGGUFTensors(t *testing.T) {
	c := tinyConfig()
	reshape := func(name string, shape ...int) []OutTensor {
		ts := tinyTensors(c)
		for i := range ts {
			if ts[i].Name == name {
				ts[i].Shape, ts[i].Data = shape, make([]byte, 4*product(shape))
			}
		}
		return ts
	}
	drop := func(name string) []OutTensor {
		var out []OutTensor
		for _, tn := range tinyTensors(c) {
			if tn.Name != name {
				out = append(out, tn)
			}
		}
		return out
	}
	stray := append(tinyTensors(c), OutTensor{Name: "blk.1000000.attn_norm.weight", Type: quant.F32, Shape: []int{8}, Data: make([]byte, 32)})
	cases := []struct {
		name    string
		vocab   *tokenizer.Vocab
		tensors []OutTensor
		want    string
	}{
		{"kv rows", nil, reshape("blk.1.attn_k.weight", 8, 8), "tensor blk.1.attn_k.weight: shape [8 8], want [4 8]"},
		{"embedding rows", nil, reshape("token_embd.weight", 64, 8), "tensor token_embd.weight: shape [64 8], want [32 8]"},
		{"output cols", nil, reshape("output.weight", 32, 4), "tensor output.weight: shape [32 4], want [32 8]"},
		{"missing", nil, drop("blk.1.ffn_down.weight"), "tensor blk.1.ffn_down.weight is missing"},
		{"stray layer", nil, stray, "llama.block_count is 2, but tensor blk.1000000.attn_norm.weight belongs to layer 1000000"},
		{"tokens beyond vocab", tinyVocab(40), tinyTensors(c), "tokenizer: 40 tokens, more than the 32 of llama.vocab_size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "hostile.gguf", ggufBytes(t, c, tc.vocab, nil, tc.tensors))
			checkRefused(t, p, Options{}, tc.want)
		})
	}
}

// TestLimitsConfigurable: Options.Limits lowers (or raises) what Open accepts.
func TestLimitsConfigurable(t *testing.T) {
	c := tinyConfig()
	p := writeFile(t, "ok.gguf", ggufBytes(t, c, nil, nil, tinyTensors(c)))
	checkRefused(t, p, Options{Limits: Limits{MaxLayers: 1}}, "llama.block_count 2 exceeds the limit of 1 (format.Limits.MaxLayers)")
	checkRefused(t, p, Options{Limits: Limits{MaxVocab: 31}}, "llama.vocab_size 32 exceeds the limit of 31 (format.Limits.MaxVocab)")
	openT(t, p, Options{Limits: Limits{MaxLayers: 2, MaxVocab: 32}})
}

// writeHF writes the tiny model as a Hugging Face folder whose config.json has the given
// keys changed, and returns the folder.
func writeHF(t *testing.T, change map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	c := tinyConfig()
	if err := WriteHF(dir, Contents{Name: "tiny", Config: c}, quant.F32, tinyTensors(c), 0, nil); err != nil {
		t.Fatal(err)
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
	for k, v := range change {
		cfg[k] = v
	}
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHostileHFConfig: a config.json whose counts disagree with the safetensors, or exceed
// the limits, is refused at once with an error naming the key.
func TestHostileHFConfig(t *testing.T) {
	openT(t, writeHF(t, nil), Options{})
	cases := []struct {
		name   string
		change map[string]any
		want   string
	}{
		{"layers 1e7", map[string]any{"num_hidden_layers": 10_000_000}, "num_hidden_layers is 10000000, but the tensors hold only 2 layers"},
		{"layers 2^31-1", map[string]any{"num_hidden_layers": math.MaxInt32}, "num_hidden_layers is 2147483647, but the tensors hold only 2 layers"},
		{"layers 2^40", map[string]any{"num_hidden_layers": 1 << 40}, "num_hidden_layers 1099511627776 is implausibly large"},
		{"layers 1", map[string]any{"num_hidden_layers": 1}, "num_hidden_layers is 1, but tensor blk.1."},
		{"hidden 2^30", map[string]any{"hidden_size": 1 << 30}, "hidden_size 1073741824 exceeds the limit of 131072"},
		{"vocab 2^23", map[string]any{"vocab_size": 1 << 23}, "vocab_size 8388608 exceeds the limit of 4194304"},
		{"vocab 1e6", map[string]any{"vocab_size": 1_000_000}, "tensor token_embd.weight: shape [32 8], want [1000000 8] (from vocab_size, hidden_size)"},
		{"context 2^30", map[string]any{"max_position_embeddings": 1 << 30}, "max_position_embeddings 1073741824 exceeds the limit of 134217728"},
		{"ffn 2^30", map[string]any{"intermediate_size": 1 << 30}, "intermediate_size 1073741824 exceeds the limit of 1048576"},
		{"ffn 24", map[string]any{"intermediate_size": 24}, "(from intermediate_size, hidden_size)"},
		{"kv heads 2", map[string]any{"num_key_value_heads": 2}, "tensor blk.0.attn_k.weight: shape [4 8], want [8 8] (from num_key_value_heads x head_dim, hidden_size)"},
		{"head dim 2^20", map[string]any{"head_dim": 1 << 20}, "head_dim 1048576 exceeds the limit of 4096"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkRefused(t, writeHF(t, tc.change), Options{}, tc.want)
		})
	}
}

// llama2cFile returns a checkpoint of cfg, zeros after the header, sized as its header
// says.
func llama2cFile(t *testing.T, cfg llama2c.Config) []byte {
	t.Helper()
	lay, err := llama2c.NewLayout(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return append(cfg.AppendHeader(nil), make([]byte, lay.FileSize-llama2c.HeaderSize)...)
}

// TestHostileLlama2cHeader: a llama2.c header beyond the limits is refused before the
// checkpoint is laid out (an entry per layer), even when the file is as long as the header
// says; one the file's size disagrees with is refused by its size.
func TestHostileLlama2cHeader(t *testing.T) {
	// 2000 layers of width 2 fit in 208 KB.
	deep := llama2c.Config{Dim: 2, HiddenDim: 1, Layers: 2000, Heads: 1, KVHeads: 1, VocabSize: 1, SeqLen: 1, SharedClassifier: true}
	p := writeFile(t, "deep.bin", llama2cFile(t, deep))
	checkRefused(t, p, Options{}, "n_layers 2000 exceeds the limit of 1024 (format.Limits.MaxLayers)")
	if m, err := Open(p, Options{Limits: Limits{MaxLayers: 2000}}); err != nil {
		t.Errorf("with MaxLayers 2000: %v", err)
	} else {
		m.Close()
	}
	small := llama2c.Config{Dim: 8, HiddenDim: 16, Layers: 2, Heads: 2, KVHeads: 1, VocabSize: 32, SeqLen: 16, SharedClassifier: true}
	good := llama2cFile(t, small)
	for _, tc := range []struct {
		name string
		vals [7]int32
		want string
	}{
		{"layers 2^31-1", [7]int32{8, 16, math.MaxInt32, 2, 1, 32, 16}, "n_layers 2147483647"},
		{"seq_len 2^31-1", [7]int32{8, 16, 2, 2, 1, 32, math.MaxInt32}, "seq_len 2147483647"},
		{"vocab 2^31-1", [7]int32{8, 16, 2, 2, 1, math.MaxInt32, 16}, "vocab_size 2147483647"},
		{"hidden 2^31-1", [7]int32{8, math.MaxInt32, 2, 2, 1, 32, 16}, "hidden_dim 2147483647"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := append([]byte(nil), good...)
			for i, v := range tc.vals {
				data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
			}
			checkRefused(t, writeFile(t, "hostile.bin", data), Options{}, tc.want)
		})
	}
}

// TestInspectKeepsRefusedModel: Inspect hands back what a refused header declares, with
// the reason, and Open refuses the same file.
func TestInspectKeepsRefusedModel(t *testing.T) {
	c := tinyConfig()
	edit := func(kvs []gguf.KV) []gguf.KV { return setKV(kvs, "llama.block_count", gguf.Uint32(1_000_000)) }
	p := writeFile(t, "hostile.gguf", ggufBytes(t, c, tinyVocab(32), edit, tinyTensors(c)))
	m, err := Inspect(p, Options{})
	if m == nil || err == nil || !strings.Contains(err.Error(), "llama.block_count is 1000000") {
		t.Fatalf("Inspect = %v, %v; want the model and the refusal", m, err)
	}
	defer m.Close()
	if m.Config.Layers != 1_000_000 || m.Config.Dim != 8 || len(m.Tensors) != 21 || len(m.Vocab.Tokens) != 32 {
		t.Errorf("inspected %+v, %d tensors, want the header as declared and the 21 tensors", m.Config, len(m.Tensors))
	}
	deep := llama2c.Config{Dim: 2, HiddenDim: 1, Layers: 2000, Heads: 1, KVHeads: 1, VocabSize: 1, SeqLen: 1, SharedClassifier: true}
	m2, err := Inspect(writeFile(t, "deep.bin", llama2cFile(t, deep)), Options{})
	if m2 == nil || err == nil || m2.Config.Layers != 2000 || len(m2.Tensors) != 0 {
		t.Fatalf("Inspect(llama2c) = %v, %v; want the header alone and the refusal", m2, err)
	}
	m2.Close()
}
