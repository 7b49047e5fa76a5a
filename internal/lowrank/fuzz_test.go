package lowrank

import (
	"path/filepath"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/model"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// FuzzFactoredShapes writes stories260K with layer 0's q projection as a factor pair of
// any shapes: opening the file accepts exactly the pairs of a q shape ([rank][64] and
// [64][rank]), refusing the rest with an error, and an accepted file runs.
func FuzzFactoredShapes(f *testing.F) {
	f.Add(8, 64, 64, 8)
	f.Add(64, 64, 64, 64)
	f.Add(8, 63, 64, 8)
	f.Add(8, 64, 65, 8)
	f.Add(8, 64, 64, 9)
	f.Fuzz(func(t *testing.T, rank, aCols, bRows, bCols int) {
		for _, d := range []int{rank, aCols, bRows, bCols} {
			if d < 1 || d > 130 {
				return
			}
		}
		m := open(t, "models/stories260K/stories260K.gguf")
		mat := func(name string, rows, cols int) *format.Tensor {
			v := make([]float32, rows*cols)
			for i := range v {
				v[i] = float32(i%7) * 0.01
			}
			data := make([]byte, 4*len(v))
			if err := quant.Quantize(quant.F32, v, data); err != nil {
				t.Fatal(err)
			}
			return &format.Tensor{Name: name, Type: quant.F32, Shape: []int{rows, cols}, Data: data}
		}
		var ts []*format.Tensor
		for _, x := range m.Tensors {
			if x.Name == "blk.0.attn_q.weight" {
				ts = append(ts, mat("blk.0.attn_q"+format.LowRankA, rank, aCols), mat("blk.0.attn_q"+format.LowRankB, bRows, bCols))
				continue
			}
			ts = append(ts, x)
		}
		path := filepath.Join(t.TempDir(), "f.gguf")
		if err := format.Convert(m.WithTensors(ts), path, format.ConvertOptions{}); err != nil {
			t.Fatal(err)
		}
		fm, err := format.Open(path, format.Options{})
		valid := aCols == 64 && bRows == 64 && bCols == rank
		if err != nil {
			if valid {
				t.Fatalf("a valid pair refused: %v", err)
			}
			return
		}
		defer fm.Close()
		if !valid {
			t.Fatalf("A [%d][%d], B [%d][%d] accepted", rank, aCols, bRows, bCols)
		}
		r, err := model.NewReference(fm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Forward(1); err != nil {
			t.Fatal(err)
		}
	})
}
