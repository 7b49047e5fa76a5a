package format

import (
	"bytes"
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// phi3Fused returns a Phi-3 model's tensors with fused attn_qkv and ffn_up whose rows
// count up from 0 (row r of a fused tensor holds r in every column), so that a split can
// be read back row by row.
func phi3Fused(c Config, qkvRows, upRows int) []OutTensor {
	mat := func(name string, rows, cols int) OutTensor {
		var b bytes.Buffer
		for r := range rows {
			for range cols {
				binary.Write(&b, binary.LittleEndian, float32(r))
			}
		}
		return OutTensor{Name: name, Type: quant.F32, Shape: []int{rows, cols}, Data: b.Bytes()}
	}
	vec := func(name string, n int) OutTensor { return mat(name, 1, n) }
	ts := []OutTensor{mat("token_embd.weight", c.VocabSize, c.Dim), vec("output_norm.weight", c.Dim), mat("output.weight", c.VocabSize, c.Dim)}
	for l := range c.Layers {
		p := "blk." + string(rune('0'+l)) + "."
		ts = append(ts, vec(p+"attn_norm.weight", c.Dim), mat(p+"attn_qkv.weight", qkvRows, c.Dim),
			mat(p+"attn_output.weight", c.Dim, c.Heads*c.HeadDim), vec(p+"ffn_norm.weight", c.Dim),
			mat(p+"ffn_up.weight", upRows, c.Dim), mat(p+"ffn_down.weight", c.Dim, c.FFNDim))
	}
	for i := range ts {
		if len(ts[i].Shape) == 2 && ts[i].Shape[0] == 1 {
			ts[i].Shape = ts[i].Shape[1:]
		}
	}
	return ts
}

// TestPhi3SplitsFusedTensors: a Phi-3 GGUF's attn_qkv and ffn_up open as q, k, v and
// gate, up: each the right rows of the fused matrix; a fused tensor of the wrong rows, a
// LongRoPE model and a conversion are refused with the reason.
func TestPhi3SplitsFusedTensors(t *testing.T) {
	c := Config{Arch: "phi3", VocabSize: 32, Dim: 8, Layers: 2, Heads: 2, KVHeads: 1, HeadDim: 4, RopeDim: 4,
		FFNDim: 16, ContextLen: 64, NormEps: 1e-5, RopeTheta: 10000, RopeStyle: RopeNeox, SlidingWindow: 5}
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	path := filepath.Join(t.TempDir(), "phi3.gguf")
	if err := WriteGGUF(path, Contents{Name: "phi3", Config: c}, quant.F32, phi3Fused(c, q+2*kv, 2*c.FFNDim), nil); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config.SlidingWindow != 5 || m.Config.RopeStyle != RopeNeox {
		t.Errorf("config %+v", m.Config)
	}
	firstRow := func(name string) float32 {
		tt, ok := m.Tensor(name)
		if !ok {
			t.Fatalf("tensor %s missing", name)
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(tt.Data))
	}
	for name, want := range map[string]float32{
		"blk.1.attn_q.weight": 0, "blk.1.attn_k.weight": float32(q), "blk.1.attn_v.weight": float32(q + kv),
		"blk.1.ffn_gate.weight": 0, "blk.1.ffn_up.weight": float32(c.FFNDim),
	} {
		if got := firstRow(name); got != want {
			t.Errorf("%s starts at fused row %v, want %v", name, got, want)
		}
	}
	if _, ok := m.Tensor("blk.0.attn_qkv.weight"); ok {
		t.Error("the fused attn_qkv is still there")
	}
	if err := Convert(m, filepath.Join(t.TempDir(), "out.gguf"), ConvertOptions{}); err == nil || !strings.Contains(err.Error(), "phi3") {
		t.Errorf("convert: %v", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.gguf")
	if err := WriteGGUF(bad, Contents{Name: "phi3", Config: c}, quant.F32, phi3Fused(c, q+kv, 2*c.FFNDim), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad, Options{}); err == nil || !strings.Contains(err.Error(), "attn_qkv") {
		t.Errorf("fused qkv of the wrong rows: %v", err)
	}
	long := filepath.Join(t.TempDir(), "long.gguf")
	ts := append(phi3Fused(c, q+2*kv, 2*c.FFNDim), OutTensor{Name: "rope_factors_long.weight", Type: quant.F32, Shape: []int{2}, Data: make([]byte, 8)})
	if err := WriteGGUF(long, Contents{Name: "phi3", Config: c}, quant.F32, ts, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(long, Options{}); err == nil || !strings.Contains(err.Error(), "LongRoPE") {
		t.Errorf("LongRoPE: %v", err)
	}
}
