package quantize

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend/cpu"
	"github.com/kvasir-llm/kvasir/internal/calibrate"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// correlatedInputs returns n inputs of c features mixed from a few latent ones plus noise,
// with a few channels much larger than the rest (as LLM activations have).
func correlatedInputs(rng *rand.Rand, n, c int) *calibrate.Dense {
	const latent = 8
	mix := make([]float64, latent*c)
	for i := range mix {
		mix[i] = rng.NormFloat64()
	}
	x := &calibrate.Dense{Rows: n, Cols: c, Data: make([]float32, n*c)}
	z := make([]float64, latent)
	for t := range n {
		for k := range z {
			z[k] = rng.NormFloat64()
		}
		for j := range c {
			v := 0.3 * rng.NormFloat64()
			for k := range z {
				v += z[k] * mix[k*c+j]
			}
			if j%17 == 0 {
				v *= 8
			}
			x.Data[t*c+j] = float32(v)
		}
	}
	return x
}

func randomWeights(rng *rand.Rand, rows, cols int) *calibrate.Dense {
	w := &calibrate.Dense{Name: "w", Rows: rows, Cols: cols, Data: make([]float32, rows*cols)}
	for i := range w.Data {
		w.Data[i] = float32(rng.NormFloat64() * 0.05)
	}
	return w
}

// outputError is sum over inputs and outputs of (x.w - x.q)^2, computed plainly.
func outputError(x, w, q *calibrate.Dense) float64 {
	var e float64
	for t := range x.Rows {
		xr := x.Row(t)
		for r := range w.Rows {
			var d float64
			wr, qr := w.Row(r), q.Row(r)
			for j, v := range xr {
				d += float64(v) * float64(wr[j]-qr[j])
			}
			e += d * d
		}
	}
	return e
}

func rtn(t *testing.T, w *calibrate.Dense, typ quant.Type) *calibrate.Dense {
	rb, _ := typ.RowBytes(w.Cols)
	b := make([]byte, rb*w.Rows)
	if err := quant.Quantize(typ, w.Data, b); err != nil {
		t.Fatal(err)
	}
	q := &calibrate.Dense{Rows: w.Rows, Cols: w.Cols, Data: make([]float32, len(w.Data))}
	if err := quant.Dequantize(typ, b, q.Data); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestGPTQBeatsRoundToNearest checks, on correlated inputs, that GPTQ's quantized layer
// changes the outputs less than round-to-nearest onto the same grid does (with and without
// act-order, with GPTQ's error weights in the scale searches, with the grids chosen again
// from the compensated weights; legacy and k-quant grids), and that the encoded rows decode to exactly the
// values GPTQ left in w.
func TestGPTQBeatsRoundToNearest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := correlatedInputs(rng, 1024, 256)
	p := cpu.NewPool(2)
	defer p.Close()
	h, err := Hessian(p, x)
	if err != nil {
		t.Fatal(err)
	}
	// The Hessian against a plain sum.
	for _, ij := range [][2]int{{0, 0}, {3, 17}, {255, 100}} {
		var s float64
		for r := range x.Rows {
			s += float64(x.Row(r)[ij[0]]) * float64(x.Row(r)[ij[1]])
		}
		if want := 2 * s / float64(x.Rows); math.Abs(h[ij[0]*256+ij[1]]-want) > 1e-3*math.Abs(want)+1e-4 {
			t.Fatalf("H[%d][%d] = %g, want %g", ij[0], ij[1], h[ij[0]*256+ij[1]], want)
		}
	}
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K} {
		orig := randomWeights(rng, 48, 256)
		base := outputError(x, orig, rtn(t, orig, typ))
		var plain float64 // GPTQ's output error with the default options
		for _, o := range []GPTQOptions{{}, {ActOrder: true}, {Weighted: true}, {Regrid: true}, {Weighted: true, Regrid: true}, {ActOrder: true, Regrid: true}} {
			actOrder := o.ActOrder
			w := &calibrate.Dense{Name: orig.Name, Rows: orig.Rows, Cols: orig.Cols, Data: append([]float32(nil), orig.Data...)}
			o.BlockSize = 64
			prep, err := Prepare(h, 256, o)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := GPTQ(w, prep, typ)
			if err != nil {
				t.Fatal(err)
			}
			dec := make([]float32, len(w.Data))
			if err := quant.Dequantize(typ, enc, dec); err != nil {
				t.Fatal(err)
			}
			for i := range dec {
				if dec[i] != w.Data[i] {
					t.Fatalf("%s: element %d decodes to %g, GPTQ left %g", typ, i, dec[i], w.Data[i])
				}
			}
			got := outputError(x, orig, w)
			t.Logf("%s act-order %v weighted %v regrid %v: output error GPTQ %.4g, RTN %.4g (ratio %.2f)", typ, actOrder, o.Weighted, o.Regrid, got, base, got/base)
			if !(got < 0.8*base) {
				t.Errorf("%s %+v: GPTQ output error %g not below 0.8 x RTN's %g", typ, o, got, base)
			}
			switch {
			case o == GPTQOptions{BlockSize: 64}:
				plain = got
			case o == GPTQOptions{BlockSize: 64, Weighted: true} && (typ == quant.Q4_0 || typ == quant.Q4_K):
				// The scale searches weighed by GPTQ's own error measure: at 4 bits, on
				// inputs with a few large channels, the layer's output error falls.
				if !(got < plain) {
					t.Errorf("%s: weighted scale searches give output error %g, unweighted %g", typ, got, plain)
				}
			}
		}
	}
}

func TestInverseCholeskyUpper(t *testing.T) {
	a := []float64{4, 2, 0.4, 2, 5, 1, 0.4, 1, 3}
	u, err := InverseCholeskyUpper(a, 3)
	if err != nil {
		t.Fatal(err)
	}
	// (U^T U) A = I.
	for i := range 3 {
		for j := range 3 {
			var s float64
			for k := range 3 {
				var inv float64
				for m := range 3 {
					inv += u[m*3+i] * u[m*3+k]
				}
				s += inv * a[k*3+j]
			}
			want := 0.0
			if i == j {
				want = 1
			}
			if math.Abs(s-want) > 1e-12 {
				t.Fatalf("(U^T U A)[%d][%d] = %g", i, j, s)
			}
		}
		for j := 0; j < i; j++ {
			if u[i*3+j] != 0 {
				t.Fatalf("U[%d][%d] = %g below the diagonal", i, j, u[i*3+j])
			}
		}
	}
	if _, err := InverseCholeskyUpper([]float64{1, 2, 2, 1}, 2); err == nil {
		t.Fatal("an indefinite matrix factored")
	}
}
