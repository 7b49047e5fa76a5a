package format

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// fp8Set writes a safetensors file holding an F8_E4M3 weight "w.weight" of rows x cols
// bytes q and, when scale is not nil, its weight_scale, and opens it.
func fp8Set(t testing.TB, rows, cols int, q []byte, scale *safetensors.WriteTensor) *safetensors.Set {
	t.Helper()
	ts := []safetensors.WriteTensor{{Name: "w.weight", DType: safetensors.F8E4M3, Shape: []int{rows, cols}, Data: q}}
	if scale != nil {
		scale.Name = "w.weight" + FP8ScaleSuffix
		ts = append(ts, *scale)
	}
	dir := t.TempDir()
	if err := safetensors.Write(filepath.Join(dir, safetensors.SingleFileName), ts, nil, nil); err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return set
}

// f32Bytes returns v as little-endian float32 bytes.
func f32Bytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// readFP8 reads "w.weight" of set through fp8FromSafetensors.
func readFP8(set *safetensors.Set) (*Tensor, error) {
	ti, _ := set.Tensor("w.weight")
	return fp8FromSafetensors(set, "w.weight", "blk.0.attn_q.weight", ti)
}

// TestFP8FromSafetensors reads per-tensor and per-channel scales (F32 and BF16, [out],
// [out, 1] and scalar shapes) into FP8 rows that decode to scale * E4M3(byte).
func TestFP8FromSafetensors(t *testing.T) {
	const rows, cols = 3, 5
	q := []byte{0x38, 0xB8, 0x00, 0x7E, 0x01, 0x40, 0x44, 0x48, 0x4C, 0x50, 0xC0, 0x08, 0x80, 0x30, 0x34}
	bf := func(v ...float32) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], quant.F32ToBF16(x))
		}
		return b
	}
	for _, c := range []struct {
		name   string
		scale  safetensors.WriteTensor
		scales []float32
	}{
		{"per-tensor scalar", safetensors.WriteTensor{DType: safetensors.F32, Shape: []int{}, Data: f32Bytes(0.5)}, []float32{0.5, 0.5, 0.5}},
		{"per-tensor [1]", safetensors.WriteTensor{DType: safetensors.BF16, Shape: []int{1}, Data: bf(0.25)}, []float32{0.25, 0.25, 0.25}},
		{"per-channel [out, 1]", safetensors.WriteTensor{DType: safetensors.F32, Shape: []int{rows, 1}, Data: f32Bytes(1, 2, 0.125)}, []float32{1, 2, 0.125}},
		{"per-channel [out] bf16", safetensors.WriteTensor{DType: safetensors.BF16, Shape: []int{rows}, Data: bf(4, 0.5, 1)}, []float32{4, 0.5, 1}},
	} {
		ft, err := readFP8(fp8Set(t, rows, cols, q, &c.scale))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ft.Type != quant.FP8 || ft.Check() != nil {
			t.Fatalf("%s: read as %s (%v)", c.name, ft.Type, ft.Check())
		}
		rb, _ := quant.FP8.RowBytes(cols)
		row := make([]float32, cols)
		for r := range rows {
			if err := quant.Dequantize(quant.FP8, ft.Data[r*rb:(r+1)*rb], row); err != nil {
				t.Fatal(err)
			}
			for i, v := range row {
				if want := c.scales[r] * quant.E4M3ToF32(q[r*cols+i]); v != want {
					t.Fatalf("%s: [%d, %d] = %v, want %v", c.name, r, i, v, want)
				}
			}
		}
	}
}

// TestFP8FromSafetensorsRefuses: what kvasir cannot read right is an error naming it.
func TestFP8FromSafetensorsRefuses(t *testing.T) {
	const rows, cols = 2, 4
	good := []byte{0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38}
	nan := append([]byte(nil), good...)
	nan[5] = 0xFF
	for _, c := range []struct {
		name  string
		q     []byte
		scale *safetensors.WriteTensor
		want  string
	}{
		{"no scale", good, nil, "is missing"},
		{"block-wise", good, &safetensors.WriteTensor{DType: safetensors.F32, Shape: []int{1, 2}, Data: f32Bytes(1, 1)}, "block-wise"},
		{"NaN byte", nan, &safetensors.WriteTensor{DType: safetensors.F32, Shape: []int{}, Data: f32Bytes(1)}, "NaN"},
		{"negative scale", good, &safetensors.WriteTensor{DType: safetensors.F32, Shape: []int{rows, 1}, Data: f32Bytes(1, -1)}, "non-negative"},
		{"infinite scale", good, &safetensors.WriteTensor{DType: safetensors.F32, Shape: []int{}, Data: f32Bytes(float32(math.Inf(1)))}, "finite"},
		{"integer scale", good, &safetensors.WriteTensor{DType: safetensors.I32, Shape: []int{}, Data: f32Bytes(1)}, "want F32, BF16 or F16"},
	} {
		_, err := readFP8(fp8Set(t, rows, cols, c.q, c.scale))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// FuzzFP8FromSafetensors feeds arbitrary weight bytes and scale tensors (any dtype, shape
// and bytes) to the FP8 reader: it returns a tensor that checks out or an error, never
// panics.
func FuzzFP8FromSafetensors(f *testing.F) {
	f.Add(uint8(2), uint8(4), []byte{0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38}, uint8(0), uint8(0), f32Bytes(1))
	f.Add(uint8(2), uint8(2), []byte{1, 2, 3, 4}, uint8(1), uint8(2), f32Bytes(1, 2))
	f.Fuzz(func(t *testing.T, rows, cols uint8, q []byte, dtype, shape uint8, scale []byte) {
		r, c := int(rows%8)+1, int(cols%8)+1
		if len(q) < r*c {
			return
		}
		dt := []safetensors.DType{safetensors.F32, safetensors.BF16, safetensors.F16, safetensors.I32}[dtype%4]
		sh := [][]int{{}, {1}, {r}, {r, 1}, {1, r}, {2, 2}}[shape%6]
		n := 1
		for _, d := range sh {
			n *= d
		}
		if len(scale) < n*dt.Size() {
			return
		}
		set := fp8Set(t, r, c, q[:r*c], &safetensors.WriteTensor{DType: dt, Shape: sh, Data: scale[:n*dt.Size()]})
		ft, err := readFP8(set)
		if err == nil && ft.Check() != nil {
			t.Fatalf("read a tensor that fails its check: %v", ft.Check())
		}
	})
}
