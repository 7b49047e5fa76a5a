package cudabackend

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cpubackend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/format"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// moeCase is one mixture of the op tests: experts of one weight type, k chosen a token, of
// width dim and size ffn; sharedDim > 0 also tests GatedAdd with x of that width.
type moeCase struct {
	wt                   quant.Type
	experts, k, dim, ffn int
	normalize            bool
	sharedDim            int
}

func (c moeCase) String() string {
	return fmt.Sprintf("%s %dx%d dim %d ffn %d", c.wt, c.experts, c.k, c.dim, c.ffn)
}

var moeCases = []moeCase{
	{quant.BF16, 8, 2, 72, 40, true, 0},
	{quant.F16, 8, 2, 72, 40, true, 0},
	{quant.BF16, 60, 4, 64, 24, false, 64},
	{quant.F32, 8, 2, 36, 20, true, 0},
	{quant.Q8_0, 8, 2, 64, 96, true, 0},
	{quant.Q4_K, 60, 4, 256, 256, false, 0},
	{quant.Q6_K, 8, 2, 256, 256, true, 0},
}

// moeWeights uploads a case's experts to the GPU backend and the values they hold, as F32,
// to the CPU backend.
func moeWeights(t *testing.T, b *Backend, cb *cpubackend.Backend, r *rand.Rand, c moeCase) (gpu, cpu []backend.Expert) {
	t.Helper()
	shapes := [3][2]int{{c.ffn, c.dim}, {c.ffn, c.dim}, {c.dim, c.ffn}}
	for range c.experts {
		var ge, ce [3]backend.Tensor
		for i, s := range shapes {
			vals := randVals(r, s[0]*s[1], 1/float32(math.Sqrt(float64(s[1]))))
			var held []float32
			switch c.wt {
			case quant.F32:
				ge[i], held = uploadMatrix(t, b, cuda.F32, s[0], s[1], vals)
			case quant.BF16:
				ge[i], held = uploadMatrix(t, b, cuda.BF16, s[0], s[1], vals)
			case quant.F16:
				ge[i], held = uploadMatrix(t, b, cuda.F16, s[0], s[1], vals)
			default:
				ge[i], held = uploadQuantized(t, b, c.wt, s[0], s[1], vals)
			}
			ce[i] = cpuMatrix(t, cb, s[0], s[1], held)
		}
		gpu = append(gpu, backend.Expert{Gate: ge[0], Up: ge[1], Down: ge[2]})
		cpu = append(cpu, backend.Expert{Gate: ce[0], Up: ce[1], Down: ce[2]})
	}
	return gpu, cpu
}

// cpuMatrix uploads vals as an F32 [rows][cols] weight of the CPU backend.
func cpuMatrix(t *testing.T, cb *cpubackend.Backend, rows, cols int, vals []float32) backend.Tensor {
	t.Helper()
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	w, err := cb.UploadWeight(&format.Tensor{Name: "w", Type: quant.F32, Shape: []int{rows, cols}, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// cpuActivation makes an F32 [rows][cols] activation of the CPU backend holding vals.
func cpuActivation(t *testing.T, cb *cpubackend.Backend, rows, cols int, vals []float32) backend.Tensor {
	t.Helper()
	x, err := cb.NewTensor(quant.F32, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if vals != nil {
		if err := cb.WriteRows(x, 0, vals); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// cpuValues reads a CPU activation [rows][cols] back through Logits against an identity
// matrix (x · Iᵀ is x exactly: every sum adds zeros to one product by 1).
func cpuValues(t *testing.T, cb *cpubackend.Backend, x backend.Tensor) []float32 {
	t.Helper()
	rows, cols := x.Shape()[0], x.Shape()[1]
	id := make([]float32, cols*cols)
	for i := range cols {
		id[i*cols+i] = 1
	}
	out := make([]float32, rows*cols)
	if err := cb.Logits(out, x, cpuMatrix(t, cb, cols, cols, id)); err != nil {
		t.Fatal(err)
	}
	return out
}

// gpuInts downloads an I32 tensor.
func gpuInts(t *testing.T, b *Backend, x backend.Tensor) []int32 {
	t.Helper()
	c := x.(*tensor)
	out := make([]int32, c.buf.Len)
	if err := b.Run(func() error { return cuda.Download(b.dev, out, c.buf) }); err != nil {
		t.Fatal(err)
	}
	return out
}

// routeRef is the routing of one token by the contract, in float64: the softmax, the k
// most probable experts (the lower index on ties, by a stable sort), and their
// probabilities, renormalized when normalize is set.
func routeRef(logits []float32, k int, normalize bool) ([]int32, []float64) {
	p := make([]float64, len(logits))
	m := math.Inf(-1)
	for _, v := range logits {
		m = math.Max(m, float64(v))
	}
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp(float64(v) - m)
		sum += p[i]
	}
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
		p[i] /= sum
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	ids, gains := make([]int32, k), make([]float64, k)
	var tot float64
	for j := range k {
		ids[j], gains[j] = int32(idx[j]), p[idx[j]]
		tot += gains[j]
	}
	if normalize {
		for j := range gains {
			gains[j] /= tot
		}
	}
	return ids, gains
}

// moeTol is the tolerance type of ExpertMLP over n tokens: the grouped GEMVs, the looped
// GEMVs and cuBLAS over F32 weights keep float32 activations; the looped cuBLAS products
// of 16-bit and block-type experts (more than cuda.GEMVMaxRows rows for an expert) round
// them to BF16.
func moeTol(c moeCase, n int) cuda.DType {
	if n <= cuda.GEMVMaxRows || c.wt == quant.F32 {
		return cuda.F32
	}
	return cuda.BF16
}

// TestBackendMoEOps checks RouteExperts against the float64 routing of the contract
// (ids exactly), and ExpertMLP and GatedAdd against the CPU backend (on the values the
// GPU's weights decode to, as F32) for 8 experts top-2, 60 top-4 (with the shared
// expert's gate), 16-bit, F32 and block-type experts, and 1, 3 and 37 tokens. 37 tokens
// runs both the looped path ExpertMLP picks and the grouped one (chunks of 8 rows, several
// an expert).
func TestBackendMoEOps(t *testing.T) {
	b := newTestBackend(t)
	cb := cpubackend.New(0)
	defer cb.Close()
	r := rand.New(rand.NewPCG(18, 4))
	for _, c := range moeCases {
		gpuExperts, cpuExperts := moeWeights(t, b, cb, r, c)
		for _, n := range []int{1, 3, 37} {
			name := fmt.Sprintf("%s n=%d", c, n)
			xv := randVals(r, n*c.dim, 1)
			lv := randVals(r, n*c.experts, 3)
			x, _ := uploadMatrix(t, b, cuda.F32, n, c.dim, xv)
			logits, _ := uploadMatrix(t, b, cuda.F32, n, c.experts, lv)
			var ids, gains backend.Tensor
			out := newOut(t, b, n, c.dim)
			if err := b.Run(func() error {
				var err error
				if ids, err = b.NewTensor(quant.I32, n, c.k); err != nil {
					return err
				}
				if gains, err = b.NewTensor(quant.F32, n, c.k); err != nil {
					return err
				}
				return firstErr(b.RouteExperts(ids, gains, logits, c.normalize), b.ExpertMLP(out, x, ids, gains, gpuExperts))
			}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			gotIDs, gotGains := gpuInts(t, b, ids), tensorValues(t, b, gains)
			var wantGains []float64
			for tok := range n {
				wi, wg := routeRef(lv[tok*c.experts:(tok+1)*c.experts], c.k, c.normalize)
				for j := range c.k {
					if gotIDs[tok*c.k+j] != wi[j] {
						t.Fatalf("%s: token %d: experts %v, want %v", name, tok, gotIDs[tok*c.k:(tok+1)*c.k], wi)
					}
				}
				wantGains = append(wantGains, wg...)
			}
			check(t, name+" route gains", cuda.F32, gotGains, wantGains)

			cx := cpuActivation(t, cb, n, c.dim, xv)
			cl := cpuActivation(t, cb, n, c.experts, lv)
			cids, err := cb.NewTensor(quant.I32, n, c.k)
			if err != nil {
				t.Fatal(err)
			}
			cg := cpuActivation(t, cb, n, c.k, nil)
			cout := cpuActivation(t, cb, n, c.dim, nil)
			if err := firstErr(cb.RouteExperts(cids, cg, cl, c.normalize), cb.ExpertMLP(cout, cx, cids, cg, cpuExperts)); err != nil {
				t.Fatal(err)
			}
			want := f64s(cpuValues(t, cb, cout))
			check(t, name+" expert mlp", moeTol(c, n), tensorValues(t, b, out), want)

			if tab, err := b.expertTableOf(gpuExperts, c.dim); err != nil {
				t.Fatal(err)
			} else if tab.grouped && n > cuda.GEMVMaxRows {
				forced := newOut(t, b, n, c.dim)
				if err := b.Run(func() error {
					ov, xt, it, gt := forced.(*tensor), x.(*tensor), ids.(*tensor), gains.(*tensor)
					return b.expertRows(ov.buf, xt.buf, it.buf, gt.buf, gpuExperts, tab, n, c.dim, c.k, true)
				}); err != nil {
					t.Fatalf("%s grouped: %v", name, err)
				}
				check(t, name+" expert mlp grouped", cuda.F32, tensorValues(t, b, forced), want)
			}

			if c.sharedDim > 0 {
				testGatedAdd(t, b, cb, r, n, c.dim, c.sharedDim)
			}
		}
	}
}

// expertTableOf is expertTable inside Run.
func (b *Backend) expertTableOf(experts []backend.Expert, dim int) (*expertTable, error) {
	var tab *expertTable
	err := b.Run(func() error {
		var err error
		tab, err = b.expertTable(experts, dim)
		return err
	})
	return tab, err
}

// testGatedAdd checks GatedAdd over n rows of dim (x of xd) against the CPU backend.
func testGatedAdd(t *testing.T, b *Backend, cb *cpubackend.Backend, r *rand.Rand, n, dim, xd int) {
	t.Helper()
	ov, yv, xv, gv := randVals(r, n*dim, 1), randVals(r, n*dim, 1), randVals(r, n*xd, 1), randVals(r, xd, 0.3)
	out, _ := uploadMatrix(t, b, cuda.F32, n, dim, ov)
	y, _ := uploadMatrix(t, b, cuda.F32, n, dim, yv)
	x, _ := uploadMatrix(t, b, cuda.F32, n, xd, xv)
	gate := gpuVector(t, b, gv)
	if err := b.Run(func() error { return b.GatedAdd(out, y, x, gate) }); err != nil {
		t.Fatal(err)
	}
	cout := cpuActivation(t, cb, n, dim, ov)
	cgate, err := cb.UploadWeight(vectorTensor(gv))
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.GatedAdd(cout, cpuActivation(t, cb, n, dim, yv), cpuActivation(t, cb, n, xd, xv), cgate); err != nil {
		t.Fatal(err)
	}
	check(t, fmt.Sprintf("gated add n=%d dim=%d x=%d", n, dim, xd), cuda.F32, tensorValues(t, b, out), f64s(cpuValues(t, cb, cout)))
}

// vectorTensor is vals as a 1-D F32 weight.
func vectorTensor(vals []float32) *format.Tensor {
	data := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return &format.Tensor{Name: "v", Type: quant.F32, Shape: []int{len(vals)}, Data: data}
}

// gpuVector uploads vals as a 1-D weight of the GPU backend.
func gpuVector(t *testing.T, b *Backend, vals []float32) backend.Tensor {
	t.Helper()
	var v backend.Tensor
	if err := b.Run(func() error {
		var err error
		v, err = b.UploadWeight(vectorTensor(vals))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestBackendMoEGraph captures RouteExperts and ExpertMLP of 3 tokens as a CUDA graph
// (after an eager run, as RunStep does), replays it on new inputs, and checks the outputs
// against the CPU backend: the routing and grouping stay on the device, so the graph is
// valid for any routing. Experts of mixed types, which need the counts on the host, are
// refused inside a capture.
func TestBackendMoEGraph(t *testing.T) {
	b := newTestBackend(t)
	cb := cpubackend.New(0)
	defer cb.Close()
	r := rand.New(rand.NewPCG(18, 5))
	for _, c := range []moeCase{moeCases[2], moeCases[5]} {
		const n = 3
		gpuExperts, cpuExperts := moeWeights(t, b, cb, r, c)
		x, _ := uploadMatrix(t, b, cuda.F32, n, c.dim, randVals(r, n*c.dim, 1))
		logits, _ := uploadMatrix(t, b, cuda.F32, n, c.experts, randVals(r, n*c.experts, 3))
		out := newOut(t, b, n, c.dim)
		var ids, gains backend.Tensor
		ops := func() error {
			return firstErr(b.RouteExperts(ids, gains, logits, c.normalize), b.ExpertMLP(out, x, ids, gains, gpuExperts))
		}
		var g *cuda.Graph
		if err := b.Run(func() error {
			var err error
			if ids, err = b.NewTensor(quant.I32, n, c.k); err != nil {
				return err
			}
			if gains, err = b.NewTensor(quant.F32, n, c.k); err != nil {
				return err
			}
			if err := ops(); err != nil {
				return err
			}
			b.capturing = true
			defer func() { b.capturing = false }()
			g, err = b.dev.Capture(ops)
			return err
		}); err != nil {
			t.Fatalf("%s: capture: %v", c, err)
		}
		xv, lv := randVals(r, n*c.dim, 1), randVals(r, n*c.experts, 3)
		if err := b.Run(func() error {
			defer b.dev.FreeGraph(g)
			return firstErr(b.dev.Fill32(out.(*tensor).buf, 0x7fc07fff), cuda.Upload(b.dev, x.(*tensor).buf, xv),
				cuda.Upload(b.dev, logits.(*tensor).buf, lv), b.dev.LaunchGraph(g), b.dev.Sync())
		}); err != nil {
			t.Fatalf("%s: replay: %v", c, err)
		}
		cids, err := cb.NewTensor(quant.I32, n, c.k)
		if err != nil {
			t.Fatal(err)
		}
		cg, cout := cpuActivation(t, cb, n, c.k, nil), cpuActivation(t, cb, n, c.dim, nil)
		if err := firstErr(cb.RouteExperts(cids, cg, cpuActivation(t, cb, n, c.experts, lv), c.normalize),
			cb.ExpertMLP(cout, cpuActivation(t, cb, n, c.dim, xv), cids, cg, cpuExperts)); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("%s graph replay", c), cuda.F32, tensorValues(t, b, out), f64s(cpuValues(t, cb, cout)))
	}

	// Expert 1's gate in F32 among BF16 experts: the looped path only.
	mixed := moeCases[0]
	gpuExperts, _ := moeWeights(t, b, cb, r, mixed)
	gpuExperts[1].Gate, _ = uploadMatrix(t, b, cuda.F32, mixed.ffn, mixed.dim, randVals(r, mixed.ffn*mixed.dim, 0.1))
	x, _ := uploadMatrix(t, b, cuda.F32, 1, mixed.dim, randVals(r, mixed.dim, 1))
	out := newOut(t, b, 1, mixed.dim)
	err := b.Run(func() error {
		ids, err := b.NewTensor(quant.I32, 1, mixed.k)
		if err != nil {
			return err
		}
		gains, err := b.NewTensor(quant.F32, 1, mixed.k)
		if err != nil {
			return err
		}
		if err := b.ExpertMLP(out, x, ids, gains, gpuExperts); err != nil { // eager: builds the table
			return err
		}
		b.capturing = true
		defer func() { b.capturing = false }()
		return b.ExpertMLP(out, x, ids, gains, gpuExperts)
	})
	if err == nil {
		t.Fatal("experts of mixed types inside a capture: no error")
	}
	t.Logf("experts of mixed types inside a capture: %v", err)
}
