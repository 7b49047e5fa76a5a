package format

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir/internal/format/safetensors"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// FP8ScaleSuffix is what the name of an FP8 checkpoint's weight scale adds to its weight's
// ("model.layers.0.mlp.down_proj.weight_scale"), in the compressed-tensors and fbgemm
// layouts vLLM reads.
const FP8ScaleSuffix = "_scale"

// fp8FromSafetensors reads an FP8 checkpoint's weight: the float8_e4m3fn matrix ti and its
// weight_scale beside it, a scalar (per-tensor) or one value per output channel ([out, 1]
// or [out]), in F32, BF16 or F16. It returns the weight as quant.FP8 rows (each row's scale
// in front of its bytes; copied). Block-wise scales, missing scales, non-finite or negative
// scales and E4M3 NaN bytes are errors.
func fp8FromSafetensors(set *safetensors.Set, hfName, name string, ti *safetensors.TensorInfo) (*Tensor, error) {
	if len(ti.Shape) != 2 {
		return nil, fmt.Errorf("tensor %q: an FP8 tensor of shape %v: only matrices are read as FP8", hfName, ti.Shape)
	}
	rows, cols := ti.Shape[0], ti.Shape[1]
	if len(ti.Data) != rows*cols {
		return nil, fmt.Errorf("tensor %q: FP8 %v needs %d bytes, has %d", hfName, ti.Shape, rows*cols, len(ti.Data))
	}
	si, ok := set.Tensor(hfName + FP8ScaleSuffix)
	if !ok {
		return nil, fmt.Errorf("tensor %q is FP8 (F8_E4M3) but %q is missing (kvasir reads FP8 weights with a per-tensor or per-channel weight_scale)", hfName, hfName+FP8ScaleSuffix)
	}
	st, ok := dtypeOfSafetensors[si.DType]
	n := 1
	for _, d := range si.Shape {
		n *= d
	}
	if !ok || len(si.Data) != n*int(si.DType.Size()) {
		return nil, fmt.Errorf("tensor %q: dtype %s with %d bytes for shape %v: want F32, BF16 or F16 values", si.Name, si.DType, len(si.Data), si.Shape)
	}
	perChannel := n == rows && rows > 1 && (len(si.Shape) == 1 || (len(si.Shape) == 2 && si.Shape[1] == 1))
	if n != 1 && !perChannel {
		return nil, fmt.Errorf("tensor %q: shape %v: want a scalar (per-tensor) or one scale per output channel ([%d, 1]); block-wise FP8 scales are not supported", si.Name, si.Shape, rows)
	}
	scales := make([]float32, n)
	if err := quant.Dequantize(st, si.Data, scales); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", si.Name, err)
	}
	for i, s := range scales {
		if !(s >= 0) || math.IsInf(float64(s), 0) {
			return nil, fmt.Errorf("tensor %q: scale %d is %v: want a finite, non-negative scale", si.Name, i, s)
		}
	}
	rb, err := quant.FP8.RowBytes(cols)
	if err != nil {
		return nil, fmt.Errorf("tensor %q: %w", hfName, err)
	}
	data := make([]byte, rows*rb)
	for r := range rows {
		row := data[r*rb : (r+1)*rb]
		s := scales[0]
		if perChannel {
			s = scales[r]
		}
		src := ti.Data[r*cols : (r+1)*cols]
		for c, b := range src {
			if b&0x7F == 0x7F {
				return nil, fmt.Errorf("tensor %q: element [%d, %d] is an E4M3 NaN (%#x)", hfName, r, c, b)
			}
		}
		putFP8Row(row, s, src)
	}
	return &Tensor{Name: name, Type: quant.FP8, Shape: []int{rows, cols}, Data: data}, nil
}

// putFP8Row writes one quant.FP8 row: the scale (little-endian float32) and the bytes.
func putFP8Row(row []byte, scale float32, q []byte) {
	binary.LittleEndian.PutUint32(row, math.Float32bits(scale))
	copy(row[4:], q)
}

// fp8ToSafetensors splits a quant.FP8 matrix (held in memory) into the F8_E4M3 weight hfName
// and its F32 weight_scale of shape [out, 1].
func fp8ToSafetensors(t *OutTensor, hfName string) (w, scale safetensors.WriteTensor, err error) {
	if len(t.Shape) != 2 || t.Data == nil {
		return w, scale, fmt.Errorf("tensor %q: FP8 weights are written from a matrix in memory (shape %v)", t.Name, t.Shape)
	}
	rows, cols := t.Shape[0], t.Shape[1]
	rb, err := quant.FP8.RowBytes(cols)
	if err != nil || len(t.Data) != rows*rb {
		return w, scale, fmt.Errorf("tensor %q: FP8 %v needs %d bytes, has %d", t.Name, t.Shape, rows*rb, len(t.Data))
	}
	q := make([]byte, 0, rows*cols)
	s := make([]byte, 0, 4*rows)
	for r := range rows {
		row := t.Data[r*rb : (r+1)*rb]
		s = append(s, row[:4]...) // the scale, little-endian float32 as safetensors stores it
		q = append(q, row[4:]...)
	}
	return safetensors.WriteTensor{Name: hfName, DType: safetensors.F8E4M3, Shape: []int{rows, cols}, Data: q},
		safetensors.WriteTensor{Name: hfName + FP8ScaleSuffix, DType: safetensors.F32, Shape: []int{rows, 1}, Data: s}, nil
}
