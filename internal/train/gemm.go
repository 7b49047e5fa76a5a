package train

import (
	"unsafe"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// f32Bytes views a float32 slice as the bytes of an F32 weight (little-endian, as the CPU
// backend reads it).
func f32Bytes(x []float32) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// matmulT computes out[n][r] = sum_c a[r][c] * x[n][c]: out is [n][rows], a is [rows][cols],
// x is [n][cols]. It runs on the CPU backend's F32 GEMM, split over the pool's threads.
func matmulT(p *cpu.Pool, out, a []float32, rows, cols int, x []float32, n int) {
	w := cpu.Weight{Type: quant.F32, Rows: rows, Cols: cols, Data: f32Bytes(a[:rows*cols])}
	if err := cpu.MatMul(p, out[:n*rows], w, x[:n*cols], n); err != nil {
		panic(err) // shapes are the trainer's own; a mismatch is a bug
	}
}

// transpose writes the [cols][rows] transpose of the [rows][cols] matrix a into dst, in
// square tiles so that both matrices are read and written a cache line at a time.
func transpose(dst, a []float32, rows, cols int) {
	const tile = 32
	for r0 := 0; r0 < rows; r0 += tile {
		r1 := min(r0+tile, rows)
		for c0 := 0; c0 < cols; c0 += tile {
			c1 := min(c0+tile, cols)
			for r := r0; r < r1; r++ {
				row := a[r*cols+c0 : r*cols+c1]
				for i, v := range row {
					dst[(c0+i)*rows+r] = v
				}
			}
		}
	}
}
