package cpu

import (
	"math"
	"sync/atomic"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// Blocking of the many-token Q8_0/Q4_0 path (see q0Product.matMulGEMM).
const (
	// q0MinTokens is the least token count that takes the many-token path; fewer tokens
	// run through the 8-row kernels straight off the weights, each panel of 8 rows meeting
	// the tokens one after the other while it stays in cache. The tiles run 16 (or 8)
	// tokens along the lanes whatever the tokens in them, so below about 7 tokens the
	// 8-row kernels are faster (BenchmarkFewTokens, 53 MB of Q8_0 on 2 AVX2 cores: 6
	// tokens 5.5 ms against 6.0, 8 tokens 7.9 against 6.7). Both give the same bits.
	q0MinTokens = 7
	// q0Rows is the number of weight rows of a panel (and of a tile).
	q0Rows = 4
	// q0Chunk is the number of consecutive panels a thread claims at a time: 16 panels are
	// 64 rows, 256 bytes of each token's output.
	q0Chunk = 16
	// q0Steps8 and q0Steps4 are the 4-byte lane groups per block of the packed activations
	// for Q8_0 weights (16 pairs of int16 quants) and Q4_0 weights (8 quads of int8).
	q0Steps8 = 16
	q0Steps4 = 8
	// q0PanelBlock is the widest panel block: 4 rows of 32 int16 quants (Q8_0).
	q0PanelBlock = q0Rows * 64
)

// The many-token path keeps a token's results bit for bit those of the 8-row kernels:
// every (row, token) pair still sums each block's quant products exactly in integers and
// adds float32(sum) * (d_w*d_x) to its float32 result in block order. Only the layout
// changes, so that the SIMD lanes hold different tokens of one row instead of different
// rows of one token:
//
//   - A panel is q0Rows weight rows widened per block: Q8_0 quants sign-extended to int16,
//     Q4_0 nibbles unpacked one per byte in element order, [block][row][32]; d_w as
//     float32, [block][row]. It is made per thread, one panel at a time. A kernel set with
//     q8Quads (VNNI) lays Q8_0 out as Q4_0 instead: its quants plus 128 as unsigned bytes
//     (XOR 0x80), so that one VPDPBUSD adds four products where VPDPWSSD adds two.
//   - The activations, quantized to Q8_0, are packed once per call by token groups of W =
//     16 tokens (the last group 8 or 16, padded with zeros): xp holds, per block and
//     4-byte step, the group's W lanes, [block][step][W] uint32 (Q8_0 weights: quants
//     2s, 2s+1 of the block as int16; Q4_0 and q8Quads: quants 4s..4s+3 as int8); xs holds
//     per block W int32 corrections bias*sum(x) (for the weights' offset: 8 for Q4_0's
//     nibbles, 128 for q8Quads, 0 otherwise), then W d_x as float32 bits.

// q0GEMMSlot is the scratch of one worker of the many-token Q8_0/Q4_0 path: a panel's
// widened quants, d_w and one tile of results (q0Rows x 16 tokens), and the same again for
// the up weight of a SwiGLU product.
type q0GEMMSlot struct {
	pw, pwUp   []byte
	dw, dwUp   []float32
	acc, accUp []float32
	exp        []float32 // siluMul's scratch
	gate       []float32 // the gate's tiles of every token group
}

// q0Form is the layout of a many-token Q8_0/Q4_0 product's panels and packed activations:
// quads for int8 quads of activations against unsigned weight bytes (else int16 pairs,
// Q8_0 only), bias what the panel adds to each weight quant (the corrections are bias
// times the activations' block sums).
type q0Form struct {
	quads bool
	bias  int32
}

// q0FormOf returns the form in which kernel set k multiplies weights of type wt.
func q0FormOf(k *kernels, wt quant.Type) q0Form {
	switch {
	case wt == quant.Q4_0:
		return q0Form{quads: true, bias: 8}
	case k.q8Quads:
		return q0Form{quads: true, bias: 128}
	}
	return q0Form{}
}

// q0GroupLens returns the lengths of the packed activations of one token group of width
// wd over nb blocks in form f: xp (uint32), and xs.
func q0GroupLens(f q0Form, wd, nb int) (int, int) {
	steps := q0Steps8
	if f.quads {
		steps = q0Steps4
	}
	return nb * steps * wd, nb * 2 * wd
}

// matMulGEMM computes the product in progress, of nTokens >= q0MinTokens tokens and panels
// panels of q0Rows rows: it quantizes and packs the activations (see packBlocks), then
// multiplies the panels, claimed by the pool's threads in runs of q0Chunk, with every
// token group.
func (s *q0Product) matMulGEMM(p *Pool, panels int) {
	nb := s.cols / 32
	var xpLen, xsLen int
	for t0 := 0; t0 < s.nTokens; {
		wd := tokenGroupWidth(t0, s.nTokens)
		a, b := q0GroupLens(s.form, wd, nb)
		xpLen, xsLen = xpLen+a, xsLen+b
		t0 += wd
	}
	s.xq = grow(s.xq, s.nTokens*s.xrb)
	s.xp, s.xs = grow(s.xp, xpLen), grow(s.xs, xsLen)
	p.Run(nb, s.pack)
	padded := q0Rows * (s.nTokens + gemmWide)
	if len(s.slots) != p.threads || len(s.slots[0].pw) < nb*q0PanelBlock || len(s.slots[0].gate) < padded {
		s.slots = make([]q0GEMMSlot, p.threads)
		for i := range s.slots {
			s.slots[i] = q0GEMMSlot{
				pw: make([]byte, nb*q0PanelBlock), pwUp: make([]byte, nb*q0PanelBlock),
				dw: make([]float32, nb*q0Rows), dwUp: make([]float32, nb*q0Rows),
				acc: make([]float32, q0Rows*gemmWide), accUp: make([]float32, q0Rows*gemmWide),
				exp: make([]float32, q0Rows*gemmWide), gate: make([]float32, padded),
			}
		}
	}
	s.panels = panels
	s.next.Store(0)
	p.Run(p.threads, s.gemm)
}

// work runs the slots [start, end) of the product in progress: each claims runs of
// panels until none is left.
func (s *q0Product) work(start, end int) {
	for i := start; i < end; i++ {
		sl := &s.slots[i]
		for {
			first := int(s.next.Add(q0Chunk) - q0Chunk)
			if first >= s.panels {
				break
			}
			for g := first; g < min(first+q0Chunk, s.panels); g++ {
				s.multiplyPanel(sl, g)
			}
		}
	}
}

// widenPanel widens panel g of w into pw and dw and returns its row count.
func (s *q0Product) widenPanel(w Weight, g int, pw []byte, dw []float32) int {
	nb := s.cols / 32
	r0 := g * q0Rows
	nr := min(q0Rows, w.Rows-r0)
	if nr == q0Rows {
		panel := s.kern.panelQ8_0
		if s.typ == quant.Q4_0 {
			panel = s.kern.panelQ4_0
		}
		panel(pw, dw, w.Data[r0*s.rb:], s.rb, nb)
	} else {
		q0PanelPartial(s.typ == quant.Q4_0, s.form, pw, dw, w.Data[r0*s.rb:w.Rows*s.rb], s.rb, nb, nr)
	}
	return nr
}

// multiplyPanel widens panel g of the product in progress and multiplies it with every
// token group; in SwiGLU mode it does so with the gate's and the up weight's panel and
// stores silu(gate)*up.
func (s *q0Product) multiplyPanel(sl *q0GEMMSlot, g int) {
	pt, lg := s.part(g)
	rows, nb, n := pt.w.Rows, s.cols/32, s.nTokens
	r0 := lg * q0Rows
	tile := s.kern.tileQ8_0
	if s.typ == quant.Q4_0 {
		tile = s.kern.tileQ4_0
	}
	nr := s.widenPanel(pt.w, lg, sl.pw, sl.dw)
	if s.swiglu {
		s.widenPanel(s.parts[1].w, lg, sl.pwUp, sl.dwUp)
	}
	// In SwiGLU mode the gate's tiles of all token groups are kept in sl.gate, then the up
	// weight's tiles meet them, so that each panel stays in cache over its token groups.
	for pass := range 1 + b2i(s.swiglu) {
		pw, dw := sl.pw, sl.dw
		if pass == 1 {
			pw, dw = sl.pwUp, sl.dwUp
		}
		xpOff, xsOff := 0, 0
		for t0 := 0; t0 < n; {
			wd := tokenGroupWidth(t0, n)
			xpLen, xsLen := q0GroupLens(s.form, wd, nb)
			xp, xs := s.xp[xpOff:xpOff+xpLen], s.xs[xsOff:xsOff+xsLen]
			acc := sl.acc[:q0Rows*wd]
			if s.swiglu && pass == 0 {
				acc = sl.gate[t0*q0Rows:][:q0Rows*wd]
			}
			clear(acc)
			tile(wd, pw, dw, xp, xs, nb, acc)
			if s.swiglu && pass == 0 {
				xpOff, xsOff, t0 = xpOff+xpLen, xsOff+xsLen, t0+wd
				continue
			}
			if s.swiglu {
				siluMul(s.kern, acc, sl.gate[t0*q0Rows:][:q0Rows*wd], acc, sl.exp)
			}
			if nt := min(wd, n-t0); nt == gemmWide && nr == q0Rows {
				s.kern.storeQ0Tile16(pt.out[t0*rows+r0:], rows, acc)
			} else {
				storeQ0Tile(pt.out[t0*rows+r0:], rows, acc, wd, nt, nr)
			}
			xpOff, xsOff, t0 = xpOff+xpLen, xsOff+xsLen, t0+wd
		}
	}
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// storeQ0Tile writes the first nt tokens and nr rows of a tile (acc[r*wd+t]) to out, where
// token t's row r goes to out[t*ldo+r].
func storeQ0Tile(out []float32, ldo int, acc []float32, wd, nt, nr int) {
	if nr == q0Rows {
		a0, a1, a2, a3 := acc[:wd], acc[wd:2*wd], acc[2*wd:3*wd], acc[3*wd:4*wd]
		for t := range nt {
			o := out[t*ldo:][:q0Rows]
			o[0], o[1], o[2], o[3] = a0[t], a1[t], a2[t], a3[t]
		}
		return
	}
	for t := range nt {
		o := out[t*ldo:][:nr]
		for r := range o {
			o[r] = acc[r*wd+t]
		}
	}
}

// storeQ0Tile16Generic is the scalar twin of the whole-tile store kernels: storeQ0Tile of
// q0Rows rows of gemmWide tokens.
func storeQ0Tile16Generic(out []float32, ldo int, acc []float32) {
	storeQ0Tile(out, ldo, acc, gemmWide, gemmWide, q0Rows)
}

// packBlocks quantizes blocks [b0, b1) of every token's activations to Q8_0 into s.xq and
// packs them into s.xp and s.xs for the many-token path.
func (s *q0Product) packBlocks(b0, b1 int) {
	nb, n := s.cols/32, s.nTokens
	xpOff, xsOff := 0, 0
	for t0 := 0; t0 < n; {
		wd := tokenGroupWidth(t0, n)
		xpLen, xsLen := q0GroupLens(s.form, wd, nb)
		xp, xs := s.xp[xpOff:xpOff+xpLen], s.xs[xsOff:xsOff+xsLen]
		for t := range wd {
			if t0+t >= n {
				padQ0Lane(s.form, xp, xs, wd, t, b0, b1)
				continue
			}
			xq := s.xq[(t0+t)*s.xrb:][:nb*q8_0Bytes]
			s.kern.quantQ8_0(xq[b0*q8_0Bytes:b1*q8_0Bytes], s.x[(t0+t)*s.cols+b0*32:][:(b1-b0)*32])
			packQ0Lane(s.form, xp, xs, wd, t, xq, b0, b1)
		}
		xpOff += xpLen
		xsOff += xsLen
		t0 += wd
	}
}

// packQ0Lane packs blocks [b0, b1) of one token's Q8_0 activations xq into lane t of a
// token group of width wd in form f (see the layout above).
func packQ0Lane(f q0Form, xp, xs []uint32, wd, t int, xq []byte, b0, b1 int) {
	for b := b0; b < b1; b++ {
		blk := xq[b*q8_0Bytes : (b+1)*q8_0Bytes]
		q := (*[32]byte)(blk[2:])
		if f.quads {
			dst := xp[b*q0Steps4*wd:][:q0Steps4*wd]
			var sum int32
			for st := range q0Steps4 {
				g := (*[4]byte)(q[4*st:])
				dst[st*wd+t] = uint32(g[0]) | uint32(g[1])<<8 | uint32(g[2])<<16 | uint32(g[3])<<24
				sum += int32(int8(g[0])) + int32(int8(g[1])) + int32(int8(g[2])) + int32(int8(g[3]))
			}
			xs[b*2*wd+t] = uint32(f.bias * sum)
		} else {
			dst := xp[b*q0Steps8*wd:][:q0Steps8*wd]
			for st := range q0Steps8 {
				g := (*[2]byte)(q[2*st:])
				dst[st*wd+t] = uint32(uint16(int16(int8(g[0])))) | uint32(int32(int8(g[1])))<<16
			}
			xs[b*2*wd+t] = 0
		}
		xs[b*2*wd+wd+t] = math.Float32bits(f16At(blk))
	}
}

// padQ0Lane zeroes blocks [b0, b1) of lane t of a token group in form f past the last
// token.
func padQ0Lane(f q0Form, xp, xs []uint32, wd, t, b0, b1 int) {
	steps := q0Steps8
	if f.quads {
		steps = q0Steps4
	}
	for b := b0; b < b1; b++ {
		for st := range steps {
			xp[(b*steps+st)*wd+t] = 0
		}
		xs[b*2*wd+t], xs[b*2*wd+wd+t] = 0, 0
	}
}

// q0PanelPartial widens the nr < q0Rows rows of a last partial panel (rows rb bytes apart
// in w; Q4_0 weights if q4, else Q8_0) in form f as the panel kernels do and zeroes the
// missing rows (quants and d_w).
func q0PanelPartial(q4 bool, f q0Form, pw []byte, dw []float32, w []byte, rb, nb, nr int) {
	pb := 64
	if f.quads {
		pb = 32
	}
	for b := range nb {
		for r := range q0Rows {
			if r < nr {
				continue
			}
			dw[b*q0Rows+r] = 0
			clear(pw[(b*q0Rows+r)*pb:][:pb])
		}
	}
	for r := range nr {
		q0PanelRow(q4, f, pw, dw, w[r*rb:(r+1)*rb], r, nb)
	}
}

// q0PanelRow widens one weight row (Q4_0 if q4, else Q8_0) into row r of a panel in form
// f.
func q0PanelRow(q4 bool, f q0Form, pw []byte, dw []float32, row []byte, r, nb int) {
	for b := range nb {
		if !q4 && f.quads {
			blk := row[b*q8_0Bytes : (b+1)*q8_0Bytes]
			dst := pw[(b*q0Rows+r)*32:][:32]
			for j, q := range blk[2:] {
				dst[j] = q ^ 0x80 // int8(q) + 128
			}
			dw[b*q0Rows+r] = f16At(blk)
			continue
		}
		if q4 {
			blk := row[b*q4_0Bytes : (b+1)*q4_0Bytes]
			dst := pw[(b*q0Rows+r)*32:][:32]
			for j, q := range blk[2:] {
				dst[j], dst[j+16] = q&15, q>>4
			}
			dw[b*q0Rows+r] = f16At(blk)
			continue
		}
		blk := row[b*q8_0Bytes : (b+1)*q8_0Bytes]
		dst := pw[(b*q0Rows+r)*64:][:64]
		for j, q := range blk[2:] {
			v := uint16(int16(int8(q)))
			dst[2*j], dst[2*j+1] = byte(v), byte(v>>8)
		}
		dw[b*q0Rows+r] = f16At(blk)
	}
}

// q8PanelGeneric, q8PanelU8Generic and q4PanelGeneric are the scalar twins of the panel
// kernels: they widen nb blocks of q0Rows rows (stride bytes apart in w) into pw and dw,
// Q8_0 to int16 pairs, Q8_0 to unsigned bytes (the q8Quads form) and Q4_0 to nibble bytes.
func q8PanelGeneric(pw []byte, dw []float32, w []byte, stride, nb int) {
	for r := range q0Rows {
		q0PanelRow(false, q0Form{}, pw, dw, w[r*stride:], r, nb)
	}
}

func q8PanelU8Generic(pw []byte, dw []float32, w []byte, stride, nb int) {
	for r := range q0Rows {
		q0PanelRow(false, q0Form{quads: true, bias: 128}, pw, dw, w[r*stride:], r, nb)
	}
}

func q4PanelGeneric(pw []byte, dw []float32, w []byte, stride, nb int) {
	for r := range q0Rows {
		q0PanelRow(true, q0Form{quads: true, bias: 8}, pw, dw, w[r*stride:], r, nb)
	}
}

// q0TileGeneric is the scalar twin of the tile kernels: for the q0Rows rows of panel
// (pw, dw) and the wd tokens of a packed group (xp, xs), it adds to acc[r*wd+t] each
// block's float32(sum) * (d_w*d_x) in block order, sum the exact integer dot product of
// the block's quants (quads: the unsigned panel bytes times the activations, less
// the correction in xs: the weights less their bias).
func q0TileGeneric(quads bool, wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
	steps := q0Steps8
	if quads {
		steps = q0Steps4
	}
	for b := range nb {
		x := xp[b*steps*wd:][:steps*wd]
		corr, dx := xs[b*2*wd:][:wd], xs[b*2*wd+wd:][:wd]
		for r := range q0Rows {
			for t := range wd {
				var s int32
				if quads {
					wq := pw[(b*q0Rows+r)*32:][:32]
					for st := range steps {
						v := x[st*wd+t]
						for j := range 4 {
							s += int32(wq[4*st+j]) * int32(int8(v>>(8*j)))
						}
					}
					s -= int32(corr[t])
				} else {
					wq := pw[(b*q0Rows+r)*64:][:64]
					for st := range steps {
						v := x[st*wd+t]
						w0 := int32(int16(uint16(wq[4*st]) | uint16(wq[4*st+1])<<8))
						w1 := int32(int16(uint16(wq[4*st+2]) | uint16(wq[4*st+3])<<8))
						s += w0*int32(int16(v)) + w1*int32(int16(v>>16))
					}
				}
				scale := dw[b*q0Rows+r] * math.Float32frombits(dx[t])
				acc[r*wd+t] += float32(float32(s) * scale)
			}
		}
	}
}

// q0GEMMState is the part of q0Product the many-token path adds: the packed activations,
// the worker slots and the panel counter.
type q0GEMMState struct {
	xp    []uint32 // activations packed by token group
	xs    []uint32 // per block corrections and d_x, by token group
	slots []q0GEMMSlot

	form   q0Form               // the layout of the product in progress
	panels int                  // the panel count of the product in progress
	next   atomic.Int64         // the next panel to claim
	pack   func(start, end int) // s.packBlocks, bound once
	gemm   func(start, end int) // s.work, bound once
}
