package cpu

import (
	"math/rand"
	"testing"

	"github.com/kvasir-llm/kvasir/internal/quant"
)

// q0Tiles returns kernel set k's panel and tile kernels for weight type wt, and the scalar
// dot product they must reproduce.
func q0Tiles(k *kernels, wt quant.Type) (func(pw []byte, dw []float32, w []byte, stride, nb int),
	func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32), func(w, x []byte, nb int) float32) {
	if wt == quant.Q4_0 {
		return k.panelQ4_0, k.tileQ4_0, dotQ4_0Generic
	}
	return k.panelQ8_0, k.tileQ8_0, dotQ8_0Generic
}

// genericQuads is the generic set in the q8Quads form of the VNNI set: its pure-Go twins
// q8PanelU8Generic and q0TileGeneric over Q4_0's layout, so that the form is checked
// against the scalar reference on every machine.
func genericQuads() *kernels {
	k := *genericKernels()
	k.name = "generic-quads"
	k.q8Quads = true
	k.panelQ8_0 = q8PanelU8Generic
	k.tileQ8_0 = func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32) {
		q0TileGeneric(true, wd, pw, dw, xp, xs, nb, acc)
	}
	return &k
}

// q0Forms returns the kernel sets to check the tiles of: every set this CPU runs, then the
// generic set in the q8Quads form.
func q0Forms() []*kernels { return append(allKernels(), genericQuads()) }

// q0Reference returns the generic twins of kernel set k's panel and tile kernels for weight
// type wt: the generic set's, in k's form.
func q0Reference(k *kernels, wt quant.Type) (func(pw []byte, dw []float32, w []byte, stride, nb int),
	func(wd int, pw []byte, dw []float32, xp, xs []uint32, nb int, acc []float32)) {
	g := genericKernels()
	if wt == quant.Q8_0 && k.q8Quads {
		g = genericQuads()
	}
	panel, tile, _ := q0Tiles(g, wt)
	return panel, tile
}

// packQ0Group packs the Q8_0 activations xq (one per lane, nil past the last token) as a
// group of wd lanes in form f.
func packQ0Group(f q0Form, xq [][]byte, wd, nb int) ([]uint32, []uint32) {
	xpLen, xsLen := q0GroupLens(f, wd, nb)
	xp, xs := make([]uint32, xpLen), make([]uint32, xsLen)
	for i := range wd {
		if i >= len(xq) || xq[i] == nil {
			padQ0Lane(f, xp, xs, wd, i, 0, nb)
			continue
		}
		packQ0Lane(f, xp, xs, wd, i, xq[i], 0, nb)
	}
	return xp, xs
}

// checkQ0Tile widens 4 random weight rows (a padded stride apart) with every kernel set's
// panel kernel and multiplies them with a packed group of wd lanes (in the set's form) of
// which nt hold random Q8_0 activations: the panels must equal the generic twins' of the
// set's form byte for byte, every tile must equal the generic tile bit for bit in every
// lane, and every (row, token) result must equal the scalar dot product (dotQ8_0Generic or
// dotQ4_0Generic) bit for bit.
func checkQ0Tile(t *testing.T, wt quant.Type, seed int64, nb, wd, nt, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	bb := wt.BlockBytes()
	stride := nb*bb + r.Intn(3)*bb
	w := randWeights(r, wt, (q0Rows-1)*stride/bb+nb, mode)
	xq := make([][]byte, nt)
	for i := range xq {
		xq[i] = randActivations(r, quant.Q8_0, nb, mode)
	}

	for _, k := range q0Forms() {
		xp, xs := packQ0Group(q0FormOf(k, wt), xq, wd, nb)
		gpanel, gtile := q0Reference(k, wt)
		gpw, gdw := make([]byte, nb*q0PanelBlock), make([]float32, nb*q0Rows)
		gpanel(gpw, gdw, w, stride, nb)
		gacc := make([]float32, q0Rows*wd)
		gtile(wd, gpw, gdw, xp, xs, nb, gacc)

		panel, tile, dot := q0Tiles(k, wt)
		pw, dw := make([]byte, nb*q0PanelBlock), make([]float32, nb*q0Rows)
		panel(pw, dw, w, stride, nb)
		for i := range pw {
			if pw[i] != gpw[i] {
				t.Fatalf("%s %s nb=%d: panel byte %d = %#x, generic %#x", wt, k.name, nb, i, pw[i], gpw[i])
			}
		}
		for i := range dw {
			if !sameBits(dw[i], gdw[i]) {
				t.Fatalf("%s %s nb=%d: panel d_w %d = %v, generic %v", wt, k.name, nb, i, dw[i], gdw[i])
			}
		}
		acc := make([]float32, q0Rows*wd)
		tile(wd, pw, dw, xp, xs, nb, acc)
		for row := range q0Rows {
			for tok := range wd {
				got := acc[row*wd+tok]
				if !sameBits(got, gacc[row*wd+tok]) {
					t.Fatalf("%s %s nb=%d wd=%d mode=%d row %d lane %d: got %v, generic tile %v", wt, k.name, nb, wd, mode, row, tok, got, gacc[row*wd+tok])
				}
				if tok >= nt {
					continue
				}
				if ref := dot(w[row*stride:], xq[tok], nb); !sameBits(got, ref) {
					t.Fatalf("%s %s nb=%d wd=%d mode=%d row %d token %d: got %v, reference %v (must be exact)", wt, k.name, nb, wd, mode, row, tok, got, ref)
				}
			}
		}
	}
}

func TestQ0Tiles(t *testing.T) {
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		for _, nb := range []int{1, 2, 5, 18} {
			for _, g := range [][2]int{{16, 16}, {16, 9}, {8, 8}, {8, 1}} {
				for mode := range numModes {
					checkQ0Tile(t, wt, int64(nb*100+g[1]*10+mode), nb, g[0], g[1], mode)
				}
			}
		}
	}
}

// TestQ0TileExtremes drives the int16 stages and the shifted bytes to their bounds: every
// weight quant -128 or 127 (Q8_0; 0 and 255 as the q8Quads form's unsigned bytes) or
// nibble 15 (Q4_0) against activations all 127 or all -127, unit scales.
func TestQ0TileExtremes(t *testing.T) {
	const nb, wd = 3, gemmWide
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		for _, wq := range []byte{0x80, 0x7f, 0xff, 0x00} {
			for _, xv := range []int8{127, -127} {
				bb := wt.BlockBytes()
				w := make([]byte, q0Rows*nb*bb)
				for b := range q0Rows * nb {
					w[b*bb], w[b*bb+1] = 0x00, 0x3c // f16 1.0
					for j := 2; j < bb; j++ {
						w[b*bb+j] = wq
					}
				}
				x := make([]byte, nb*q8_0Bytes)
				for b := range nb {
					x[b*q8_0Bytes], x[b*q8_0Bytes+1] = 0x00, 0x3c
					for j := 2; j < q8_0Bytes; j++ {
						x[b*q8_0Bytes+j] = byte(xv)
					}
				}
				lanes := make([][]byte, wd)
				for i := range lanes {
					lanes[i] = x
				}
				for _, k := range q0Forms() {
					xp, xs := packQ0Group(q0FormOf(k, wt), lanes, wd, nb)
					panel, tile, dot := q0Tiles(k, wt)
					pw, dw := make([]byte, nb*q0PanelBlock), make([]float32, nb*q0Rows)
					panel(pw, dw, w, nb*bb, nb)
					acc := make([]float32, q0Rows*wd)
					tile(wd, pw, dw, xp, xs, nb, acc)
					for row := range q0Rows {
						ref := dot(w[row*nb*bb:], x, nb)
						for tok := range wd {
							if got := acc[row*wd+tok]; got != ref {
								t.Fatalf("%s %s w=%#x x=%d row %d token %d: got %v, reference %v", wt, k.name, wq, xv, row, tok, got, ref)
							}
						}
					}
				}
			}
		}
	}
}

// TestMatMulQ0Exact requires every output of a many-token Q8_0 or Q4_0 product, on every
// kernel set and thread count, to equal the scalar dot product of the weight row with the
// token's Q8_0 activations bit for bit, across token counts around the group widths and row
// counts that leave a partial panel.
func TestMatMulQ0Exact(t *testing.T) {
	r := rand.New(rand.NewSource(31))
	pools := testPools(t, 1, 2)
	for _, wt := range []quant.Type{quant.Q8_0, quant.Q4_0} {
		dot := dotQ8_0Generic
		if wt == quant.Q4_0 {
			dot = dotQ4_0Generic
		}
		const rows, cols = 70, 160
		w, _ := randWeight(t, r, wt, rows, cols)
		for _, n := range []int{3, 8, 9, 16, 17, 24, 25, 40} {
			x := randFloats(r, n*cols, modeRandom)
			xq := make([]byte, n*5*q8_0Bytes)
			if err := quant.Quantize(quant.Q8_0, x, xq); err != nil {
				t.Fatal(err)
			}
			for _, p := range pools {
				out := make([]float32, n*rows)
				if err := MatMul(p, out, w, x, n); err != nil {
					t.Fatal(err)
				}
				rb := len(w.Data) / rows
				for tok := range n {
					for i := range rows {
						ref := dot(w.Data[i*rb:(i+1)*rb], xq[tok*5*q8_0Bytes:], 5)
						if got := out[tok*rows+i]; !sameBits(got, ref) {
							t.Fatalf("%s n=%d %s/%d: token %d row %d: got %v, reference %v", wt, n, p.KernelSet(), p.Threads(), tok, i, got, ref)
						}
					}
				}
			}
		}
	}
}

func fuzzQ0Tile(f *testing.F, wt quant.Type) {
	f.Add(int64(1), uint8(1), uint8(16), uint8(modeRandom))
	f.Add(int64(2), uint8(7), uint8(3), uint8(modeExtreme))
	f.Add(int64(3), uint8(33), uint8(8), uint8(modeUnit))
	f.Fuzz(func(t *testing.T, seed int64, nb, nt, mode uint8) {
		n := int(nt%16) + 1
		wd := gemmWide
		if n <= gemmNarrow && nt&16 == 0 {
			wd = gemmNarrow
		}
		checkQ0Tile(t, wt, seed, int(nb%64)+1, wd, n, int(mode%numModes))
	})
}

func FuzzQ0TileQ8_0(f *testing.F) { fuzzQ0Tile(f, quant.Q8_0) }
func FuzzQ0TileQ4_0(f *testing.F) { fuzzQ0Tile(f, quant.Q4_0) }

// TestStoreQ0Tile16 requires every set's whole-tile store to write each token's rows where
// storeQ0Tile writes them, bit for bit, and nothing else of out, for several output widths.
func TestStoreQ0Tile16(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for _, ldo := range []int{4, 5, 7, 64, 577} {
		acc := randFloats(r, q0Rows*gemmWide, modeRandom)
		n := (gemmWide-1)*ldo + q0Rows + 3
		want := randFloats(r, n, modeRandom)
		init := append([]float32(nil), want...)
		storeQ0Tile(want[1:], ldo, acc, gemmWide, gemmWide, q0Rows)
		for _, k := range allKernels() {
			got := append([]float32(nil), init...)
			k.storeQ0Tile16(got[1:], ldo, acc)
			for i := range got {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("%s ldo=%d: out[%d] = %v, storeQ0Tile wrote %v", k.name, ldo, i, got[i], want[i])
				}
			}
		}
	}
}
