package cpu

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// gemmMinTokens returns the least token count whose product with weights of type t takes
// the GEMM path on kernel set k; fewer tokens run as dot products straight off the weights,
// a few rows at a time, each group of rows meeting the tokens one after the other while it
// stays in cache (so its weights are read from memory once). The dot products use every
// vector lane whatever the token count, and the GEMM's tiles (tokens along the lanes, 8 or
// 16 wide) pay for their width whatever the tokens in them, so the crossover lies where the
// tokens' arithmetic outgrows one pass over the weights: measured with 100 MB of weights on
// 2 AVX2 cores (BenchmarkFewTokens), about 12 tokens for F32/F16 and Q6_K, 10 for BF16 and
// 16 for Q4_K. The avx512 set's multi-token float kernels (each weight widened once for up
// to maxMultiTokens tokens) run at the FMA peak from 3 tokens on: in L2, F32, F16 and BF16
// at 12-47 tokens 52-53 GMAC/s a core where the GEMM gives 32-51 (BenchmarkFewTokensCompute),
// and with 100 MB of F16 or BF16 weights on 2 cores as fast or faster at 12-47
// (BenchmarkFewTokens); so there float weights take the GEMM from 48 tokens. Below the
// crossover are the decode steps of small batches and the verify steps of speculative
// decoding (1 + k tokens a sequence), whose every token then gets the outputs of a product
// of its own, bit for bit.
func gemmMinTokens(k *kernels, t quant.Type) int {
	switch {
	case k.multiFloat && (t == quant.F32 || t == quant.F16 || t == quant.BF16):
		return 48
	case t == quant.BF16:
		return 10
	case t == quant.Q4_K:
		return 16
	}
	return 12
}

// Blocking of the many-token path (see matMulGEMM).
const (
	// gemmRows is the number of weight rows of a micro-tile: a panel of gemmRows rows is
	// widened to float32 once and meets every token before the next panel is made.
	gemmRows = 6
	// gemmWide and gemmNarrow are the token widths of the micro-tiles: tokens run along
	// the vector lanes, in groups of 16 and, for a remainder of at most 8, one group of 8.
	gemmWide   = 16
	gemmNarrow = 8
	// gemmPackCols is the column chunk in which the activations are packed, in parallel.
	gemmPackCols = 64
	// gemmChunk is the number of consecutive row panels a thread claims at a time:
	// 8 panels are 48 rows, 192 bytes of each token's output, so that two threads never
	// write into the same cache line of out (when its rows start on a line).
	gemmChunk = 8
)

// gemmKernels are the micro-kernels of the many-token path. tile16 and tile8 set
// acc[r*W+t] = sum_{c<k} w[r*ldw+c] * xt[c*W+t] for rows r < gemmRows and tokens t < W,
// with W = 16 and 8: xt holds a group of W tokens' activations packed column by column.
// Each sum runs in order of c.
type gemmKernels struct {
	tile16 func(w []float32, ldw int, xt []float32, k int, acc []float32)
	tile8  func(w []float32, ldw int, xt []float32, k int, acc []float32)
	// prefetch hints b into the caches (a no-op in pure Go): the next panel's weights are
	// fetched while the current panel is multiplied.
	prefetch func(b []byte)
	// bf16x16 and bf16x8, where the CPU has them (nil otherwise), are the micro-kernels of
	// the BF16 path (gemm_bf16.go), as gemmBF16TGeneric computes them: BF16 weights then
	// meet their activations rounded to bfloat16, two columns per instruction.
	bf16x16, bf16x8 func(w []byte, ldw int, xp []uint32, k2 int, acc []float32)
	// bf16Fast says whether BF16 products take bf16x16 and bf16x8 (set) rather than the
	// float tiles on widened panels: where the CPU runs VDPBF16PS fast (see bf16Fast).
	bf16Fast bool
}

// takesBF16 reports whether the product with w takes the BF16 path: BF16 weights of an even
// number of columns, on a CPU with fast bf16x16 and bf16x8 kernels.
func (g gemmKernels) takesBF16(w Weight) bool {
	return g.bf16x16 != nil && g.bf16Fast && w.Type == quant.BF16 && w.Cols%2 == 0
}

// genericGemmKernels returns the pure-Go micro-kernels, the twins of the SIMD ones.
func genericGemmKernels() gemmKernels {
	return gemmKernels{
		tile16: func(w []float32, ldw int, xt []float32, k int, acc []float32) {
			gemmTGeneric(gemmWide, w, ldw, xt, k, acc)
		},
		tile8: func(w []float32, ldw int, xt []float32, k int, acc []float32) {
			gemmTGeneric(gemmNarrow, w, ldw, xt, k, acc)
		},
		prefetch: func([]byte) {},
	}
}

// gemmTGeneric sets acc[r*width+t] = sum_{c<k} w[r*ldw+c] * xt[c*width+t] for rows
// r < gemmRows and tokens t < width, summing in order of c.
func gemmTGeneric(width int, w []float32, ldw int, xt []float32, k int, acc []float32) {
	for r := range gemmRows {
		var sum [gemmWide]float32
		s := sum[:width]
		for c, v := range w[r*ldw:][:k] {
			for t, xv := range xt[c*width:][:width] {
				s[t] += v * xv
			}
		}
		copy(acc[r*width:][:width], s)
	}
}

// gemmSlot is the scratch of one worker of the many-token path.
type gemmSlot struct {
	panel []float32 // gemmRows weight rows widened to float32
	tile  []float32 // the results of one micro-tile, gemmRows x gemmWide
}

// gemmScratch holds the buffers of the many-token path, owned by a Pool and reused from
// call to call, so that the path allocates nothing once warm, and the product in progress.
type gemmScratch struct {
	mu    sync.Mutex           // serializes products on the Pool
	xq    []byte               // quantized activations
	xbuf  []float32            // quantized activations widened back to float32, [nTokens][cols]
	xt    []float32            // activations packed by token group (see packTokens)
	xb    []uint32             // or, for the BF16 path, bfloat16 pairs (packTokensBF16)
	slots []gemmSlot           // one per thread
	prep  func(start, end int) // s.prepare, bound once
	run   func(start, end int) // s.work, bound once
	next  atomic.Int64         // the next row panel to claim

	// What s.xt holds packed, so that consecutive products of the same activations (q, k
	// and v; gate and up) pack them once: a copy of the activations, their shape and the
	// format they were quantized to. packed is false until the first product.
	packed   bool
	xprev    []float32
	packCols int
	packAct  quant.Type

	// The product in progress, set under mu.
	kern    *kernels
	tiles   gemmKernels
	bf16    bool // the BF16 path: tiles.bf16x16 on BF16 weights of an even number of columns
	out     []float32
	w       Weight
	rb      int
	nTokens int
	xf      []float32 // the float activations the product uses, [nTokens][cols]
	chunk   int       // row panels per claim
}

// matMulGEMM computes out[t][r] = sum_c w[r][c] * x[t][c] for nTokens >= gemmMinTokens(p.kern, w.Type) tokens
// of activations x ([nTokens][w.Cols]); rb is the bytes per weight row. Weights are F32,
// F16, BF16, Q4_1, Q5_0, Q5_1 or a K-quant (Q8_0 and Q4_0 take matMulQ0). For the quantized weights the
// activations are first quantized (to Q8_0 or Q8_K) as the matrix-vector path quantizes
// them and widened back, so that the products are those of the integer path, summed in
// float32.
//
// The activations are packed once per call into groups of 16 tokens (the last group 8 or
// 16, padded with zeros), column by column. The weights are then taken in panels of
// gemmRows rows, claimed in short runs of consecutive panels by the pool's threads: each panel is widened to
// float32 once (F32 rows are used in place) and multiplied with every token group by a
// register-blocked micro-kernel that broadcasts one weight to all token lanes. Only one
// panel per thread is ever widened at a time, never the whole matrix.
func matMulGEMM(p *Pool, out []float32, w Weight, rb int, x []float32, nTokens int) error {
	s := &p.gemm
	s.mu.Lock()
	defer s.mu.Unlock()
	k := p.kern
	cols := w.Cols

	s.kern, s.tiles, s.out, s.w, s.rb, s.nTokens = k, gemmTileKernels(k), out, w, rb, nTokens
	s.bf16 = s.tiles.takesBF16(w)
	x = x[:nTokens*cols]
	actType := activationFormat(w.Type)
	if s.bf16 {
		actType = quant.BF16
	}
	if !s.samePacked(x, cols, actType) {
		if err := s.pack(p, x, cols, actType); err != nil {
			return err
		}
	}

	if len(s.slots) != p.threads || len(s.slots[0].panel) < gemmRows*cols {
		s.slots = make([]gemmSlot, p.threads)
		for i := range s.slots {
			s.slots[i] = gemmSlot{panel: make([]float32, gemmRows*cols), tile: make([]float32, gemmRows*gemmWide)}
		}
	}
	if s.run == nil {
		s.run = s.work
	}
	s.next.Store(0)
	// Threads claim runs of consecutive panels, so that each streams through contiguous
	// weights and fills whole cache lines of out without sharing them with another thread.
	s.chunk = gemmChunk
	// One index per thread: each call of s.run owns the slots of its range while it
	// claims row panels from s.next.
	p.Run(p.threads, s.run)
	s.out, s.w, s.xf = nil, Weight{}, nil
	return nil
}

// samePacked reports whether s.xt already holds activations x of cols columns packed for
// activation format actType: the bits of x equal those of the last product's activations.
func (s *gemmScratch) samePacked(x []float32, cols int, actType quant.Type) bool {
	return s.packed && s.packCols == cols && s.packAct == actType && len(s.xprev) == len(x) &&
		bytes.Equal(f32Bytes(s.xprev), f32Bytes(x))
}

// pack quantizes the activations x ([s.nTokens][cols]) to actType and back when it is not
// F32, packs them into s.xt by token groups and remembers them for samePacked; for BF16 (the
// BF16 path) it packs their bfloat16 pairs into s.xb instead.
func (s *gemmScratch) pack(p *Pool, x []float32, cols int, actType quant.Type) error {
	s.packed = false
	nTokens := s.nTokens
	s.xf = x
	if actType == quant.BF16 {
		s.xb = grow(s.xb, packedLen(nTokens, cols)/2)
	} else if actType != quant.F32 {
		xrb, err := actType.RowBytes(cols)
		if err != nil {
			return fmt.Errorf("cpu: matmul: activations: %w", err)
		}
		s.xq = grow(s.xq, nTokens*xrb)
		s.xbuf = grow(s.xbuf, nTokens*cols)
		quantizeActivations(p, actType, s.xq, x, nTokens, cols)
		if err := quant.Dequantize(actType, s.xq, s.xbuf); err != nil {
			return fmt.Errorf("cpu: matmul: activations: %w", err)
		}
		s.xf = s.xbuf
	}
	if actType != quant.BF16 {
		s.xt = grow(s.xt, packedLen(nTokens, cols))
	}
	if s.prep == nil {
		s.prep = s.prepare
	}
	p.Run((cols+gemmPackCols-1)/gemmPackCols, s.prep)
	s.xprev = grow(s.xprev, len(x))
	copy(s.xprev, x)
	s.packed, s.packCols, s.packAct = true, cols, actType
	return nil
}

// activationFormat returns the format the activations are quantized to for weights of type t,
// or F32 when they stay float.
func activationFormat(t quant.Type) quant.Type {
	switch t {
	case quant.Q4_K, quant.Q5_K, quant.Q6_K:
		return quant.Q8_K
	case quant.Q4_1, quant.Q5_0, quant.Q5_1:
		return quant.Q8_0
	}
	return quant.F32
}

// grow returns buf resliced to n elements, reallocated only when too small.
func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// tokenGroupWidth returns the width of the token group that starts after done of nTokens
// tokens: 16, or 8 for a remainder of at most 8 tokens.
func tokenGroupWidth(done, nTokens int) int {
	if nTokens-done <= gemmNarrow {
		return gemmNarrow
	}
	return gemmWide
}

// packedLen returns the length of the packed activations of nTokens tokens of cols values.
func packedLen(nTokens, cols int) int {
	n := 0
	for t0 := 0; t0 < nTokens; {
		wd := tokenGroupWidth(t0, nTokens)
		n += wd * cols
		t0 += wd
	}
	return n
}

// prepare packs the activations of column chunks [start, end) of gemmPackCols columns.
func (s *gemmScratch) prepare(start, end int) {
	cols, n := s.w.Cols, s.nTokens
	c0, c1 := start*gemmPackCols, min(end*gemmPackCols, cols)
	if s.bf16 {
		packTokensBF16(s.xb, s.xf, n, cols, c0, c1)
		return
	}
	packTokens(s.xt, s.xf, n, cols, c0, c1)
}

// packTokens packs columns [c0, c1) of the activations x ([nTokens][cols]) into dst by
// token groups: group g of width W starting at token t0 holds x[t0+t][c] at dst[off+c*W+t],
// lanes past the last token zero.
func packTokens(dst, x []float32, nTokens, cols, c0, c1 int) {
	off := 0
	for t0 := 0; t0 < nTokens; {
		wd := tokenGroupWidth(t0, nTokens)
		g := dst[off : off+wd*cols]
		nt := min(wd, nTokens-t0)
		t := 0
		for ; t+4 <= nt; t += 4 {
			x0 := x[(t0+t)*cols+c0 : (t0+t)*cols+c1]
			x1 := x[(t0+t+1)*cols+c0:][:len(x0)]
			x2 := x[(t0+t+2)*cols+c0:][:len(x0)]
			x3 := x[(t0+t+3)*cols+c0:][:len(x0)]
			for i, v := range x0 {
				d := g[(c0+i)*wd+t:][:4]
				d[0], d[1], d[2], d[3] = v, x1[i], x2[i], x3[i]
			}
		}
		for ; t < nt; t++ {
			for i, v := range x[(t0+t)*cols+c0 : (t0+t)*cols+c1] {
				g[(c0+i)*wd+t] = v
			}
		}
		if nt < wd {
			for c := c0; c < c1; c++ {
				clear(g[c*wd+nt : (c+1)*wd])
			}
		}
		off += wd * cols
		t0 += wd
	}
}

// work runs the slots [start, end): each claims row panels until none is left.
func (s *gemmScratch) work(start, end int) {
	for i := start; i < end; i++ {
		s.workSlot(&s.slots[i])
	}
}

// workSlot claims runs of row panels of the product in progress and multiplies each with
// every token group.
func (s *gemmScratch) workSlot(sl *gemmSlot) {
	panels := (s.w.Rows + gemmRows - 1) / gemmRows
	chunk := s.chunk
	for {
		first := int(s.next.Add(int64(chunk)) - int64(chunk))
		if first >= panels {
			return
		}
		for i := first; i < min(first+chunk, panels); i++ {
			s.multiplyPanel(sl, i)
		}
	}
}

// multiplyPanel multiplies row panel i of the product in progress with every token group.
func (s *gemmScratch) multiplyPanel(sl *gemmSlot, i int) {
	rows, cols, n := s.w.Rows, s.w.Cols, s.nTokens
	r0 := i * gemmRows
	nr := min(gemmRows, rows-r0)
	if s.bf16 {
		s.multiplyPanelBF16(sl, r0, nr)
		return
	}
	pw, ldw := s.panel(sl, r0, nr)
	s.prefetchNext(r0)
	off := 0
	for t0 := 0; t0 < n; {
		wd := tokenGroupWidth(t0, n)
		if wd == gemmWide {
			s.tiles.tile16(pw, ldw, s.xt[off:], cols, sl.tile)
		} else {
			s.tiles.tile8(pw, ldw, s.xt[off:], cols, sl.tile)
		}
		storeTile(s.out[t0*rows+r0:], rows, sl.tile[:gemmRows*wd], wd, min(wd, n-t0), nr)
		off += wd * cols
		t0 += wd
	}
}

// prefetchNext hints the row panel after the one at row r0 into the caches.
func (s *gemmScratch) prefetchNext(r0 int) {
	if next := r0 + gemmRows; next < s.w.Rows {
		s.tiles.prefetch(s.w.Data[next*s.rb : min(next+gemmRows, s.w.Rows)*s.rb])
	}
}

// storeTile writes the first nt tokens and nr rows of a micro-tile (tile[r*wd+t]) to out,
// where token t's row r goes to out[t*ldo+r].
func storeTile(out []float32, ldo int, tile []float32, wd, nt, nr int) {
	if nr == gemmRows && len(tile) >= gemmRows*wd {
		t0, t1, t2 := tile[:wd], tile[wd:2*wd], tile[2*wd:3*wd]
		t3, t4, t5 := tile[3*wd:4*wd], tile[4*wd:5*wd], tile[5*wd:6*wd]
		for t := range nt {
			o := out[t*ldo:][:gemmRows]
			o[0], o[1], o[2], o[3], o[4], o[5] = t0[t], t1[t], t2[t], t3[t], t4[t], t5[t]
		}
		return
	}
	for t := range nt {
		o := out[t*ldo:][:nr]
		for r := range o {
			o[r] = tile[r*wd+t]
		}
	}
}

// panel returns weight rows [r0, r0+nr) as gemmRows float32 rows of stride ldw: F32 rows in
// place when all gemmRows exist, otherwise widened into the slot's panel, missing rows zero.
func (s *gemmScratch) panel(sl *gemmSlot, r0, nr int) ([]float32, int) {
	w, k, cols := s.w, s.kern, s.w.Cols
	if w.Type == quant.F32 && nr == gemmRows {
		return bytesAsF32(w.Data[r0*s.rb : (r0+nr)*s.rb]), cols
	}
	pw := sl.panel[:gemmRows*cols]
	for i := range nr {
		dst := pw[i*cols : (i+1)*cols]
		src := w.Data[(r0+i)*s.rb : (r0+i+1)*s.rb]
		switch w.Type {
		case quant.F32:
			copy(dst, bytesAsF32(src))
		case quant.F16:
			k.cvtF16(dst, src)
		case quant.BF16:
			k.cvtBF16(dst, src)
		case quant.Q4_K:
			k.dequantQ4K(dst, src)
		case quant.Q6_K:
			k.dequantQ6K(dst, src)
		case quant.Q5_0:
			k.dequantQ5_0(dst, src)
		case quant.Q5_1:
			k.dequantQ5_1(dst, src)
		case quant.Q4_1:
			k.dequantQ4_1(dst, src)
		case quant.Q5_K:
			k.dequantQ5K(dst, src)
		case quant.FP8:
			k.dequantFP8(dst, src)
		}
	}
	clear(pw[nr*cols:])
	return pw, cols
}

// RoundsBF16Activations reports whether the fastest kernel set of this CPU (NewPool's) takes
// the BF16 path for products of many tokens with BF16 weights, rounding the activations to
// bfloat16 (VDPBF16PS) where the other paths multiply them in float32: their results then
// differ from a float32 reference by about bfloat16's precision.
func RoundsBF16Activations() bool {
	return gemmTileKernels(allKernels()[0]).takesBF16(Weight{Type: quant.BF16, Cols: 2})
}
