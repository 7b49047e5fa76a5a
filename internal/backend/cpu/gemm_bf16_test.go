package cpu

import (
	"math"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"
)

// bf16Sets returns the kernel sets of this CPU that have the BF16 path.
func bf16Sets() []*kernels {
	var ks []*kernels
	for _, k := range allKernels() {
		if gemmTileKernels(k).bf16x16 != nil {
			ks = append(ks, k)
		}
	}
	return ks
}

// requireBF16Sets skips the test, saying why, when no kernel set of this CPU has the BF16
// path, or fails it when KVASIR_REQUIRE_CPU names avx512bf16.
func requireBF16Sets(t *testing.T) []*kernels {
	t.Helper()
	ks := bf16Sets()
	if len(ks) == 0 {
		if slices.Contains(strings.Split(os.Getenv("KVASIR_REQUIRE_CPU"), ","), "avx512bf16") {
			t.Fatal("KVASIR_REQUIRE_CPU names avx512bf16, but no kernel set has the BF16 path (the CPU lacks AVX-512 or AVX512-BF16)")
		}
		t.Skip("BF16 micro-kernels NOT tested: the CPU lacks AVX-512 (F, BW, VL, VNNI) or AVX512-BF16")
	}
	return ks
}

// roundBF16 returns x with every value rounded to bfloat16, as the BF16 path rounds it.
func roundBF16(x []float32) []float32 {
	r := make([]float32, len(x))
	for i, v := range x {
		r[i] = math.Float32frombits(uint32(bf16RNE(v)) << 16)
	}
	return r
}

// oracleInput returns the activations the float64 oracle multiplies for pool p's product of
// w with x (n tokens): x, or x rounded to bfloat16 where p takes the BF16 path.
func oracleInput(p *Pool, w Weight, x []float32, n int) []float32 {
	if n < gemmMinTokens(p.kern, w.Type) || !gemmTileKernels(p.kern).takesBF16(w) {
		return x
	}
	return roundBF16(x)
}

func TestBF16RNE(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // a tie: to even (down)
		{0x3f818000, 0x3f82}, // a tie: to even (up)
		{0x3f808001, 0x3f81}, // above the tie
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to infinity
		{0xff800000, 0xff80}, // -infinity
		{0x7f800001, 0x7fc0}, // a signalling NaN becomes quiet
		{0x00000001, 0x0000}, // the smallest denormal rounds to zero
	} {
		if got := bf16RNE(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("bf16RNE(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

// TestDPBF16 checks the twin of one VDPBF16PS lane on cases worked by hand, among them the
// measured behaviour the twin reproduces: a product beyond float32's range is added exactly.
func TestDPBF16(t *testing.T) {
	bf := func(f float32) uint32 { return uint32(bf16RNE(f)) }
	big, inf := float32(0x1p100), float32(math.Inf(1))
	for _, c := range []struct {
		name    string
		acc     float32
		w, x    uint32
		want    float32
		wantNaN bool
	}{
		{"1*2 + 3*4", 0, bf(1)<<16 | bf(3), bf(2)<<16 | bf(4), 14, false},
		{"high pair first", 1, bf(0x1p24) << 16, bf(1) << 16, 0x1p24, false},                          // 1 + 2^24 rounds to 2^24
		{"overflowing products cancel", 0, bf(big)<<16 | bf(big), bf(big)<<16 | bf(-big), inf, false}, // +inf, then inf - 2^200
		{"inf - inf", 0, bf(inf)<<16 | bf(inf), bf(1)<<16 | bf(-1), 0, true},
		{"denormal input is zero", 1, 0x0001 << 16, bf(0x1p100) << 16, 1, false},
		{"denormal result is flushed", 0, bf(0x1p-70) << 16, bf(0x1p-70) << 16, 0, false},
	} {
		got := dpbf16(c.acc, c.w, c.x)
		if c.wantNaN && got == got || !c.wantNaN && math.Float32bits(got) != math.Float32bits(c.want) {
			t.Errorf("%s: dpbf16 = %g, want %g (NaN: %v)", c.name, got, c.want, c.wantNaN)
		}
	}
}

// randBF16Bits fills b with bfloat16 values under mode: normal values of many magnitudes
// (modeRandom), any bits at all (modeExtreme: infinities, NaNs, denormals), small integers
// whose sums are exact (modeUnit) or zeros.
func randBF16Bits(r *rand.Rand, b []byte, mode int) {
	for i := 0; i+1 < len(b); i += 2 {
		var h uint16
		switch mode {
		case modeRandom:
			h = bf16RNE(float32(r.NormFloat64()) * float32(math.Ldexp(1, r.Intn(60)-30)))
		case modeExtreme:
			h = uint16(r.Uint32())
		case modeUnit:
			h = bf16RNE(float32(r.Intn(9) - 4))
		}
		b[i], b[i+1] = byte(h), byte(h>>8)
	}
}

// checkGemmBF16Tiles compares the BF16 micro-kernels of every set that has them with
// gemmBF16TGeneric bit for bit, on 6 random BF16 rows (a padded stride apart) and k2
// random activation pairs; acc starts with garbage to check that the kernels overwrite it.
func checkGemmBF16Tiles(t *testing.T, sets []*kernels, seed int64, k2, mode int) {
	t.Helper()
	r := rand.New(rand.NewSource(seed))
	ldw := 4*k2 + 2*r.Intn(5)
	w := make([]byte, (gemmRows-1)*ldw+4*k2)
	randBF16Bits(r, w, mode)
	for _, width := range []int{gemmWide, gemmNarrow} {
		xb := make([]byte, 4*width*k2)
		randBF16Bits(r, xb, mode)
		xp := make([]uint32, width*k2)
		for i := range xp {
			xp[i] = uint32(xb[4*i]) | uint32(xb[4*i+1])<<8 | uint32(xb[4*i+2])<<16 | uint32(xb[4*i+3])<<24
		}
		want := make([]float32, gemmRows*width)
		gemmBF16TGeneric(width, w, ldw, xp, k2, want)
		for _, k := range sets {
			tk := gemmTileKernels(k)
			tile := tk.bf16x16
			if width == gemmNarrow {
				tile = tk.bf16x8
			}
			got := randFloats(r, gemmRows*width, modeExtreme)
			tile(w, ldw, xp, k2, got)
			for i := range got {
				if !sameBits(got[i], want[i]) {
					t.Fatalf("%s width=%d k2=%d mode=%d: acc[%d] = %g (%#08x), twin %g (%#08x) (must be exact)",
						k.name, width, k2, mode, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

func TestGemmBF16Tiles(t *testing.T) {
	sets := requireBF16Sets(t)
	for _, k2 := range []int{1, 2, 3, 4, 5, 17, 288, 1001} {
		for mode := range numModes {
			checkGemmBF16Tiles(t, sets, int64(k2*10+mode), k2, mode)
		}
	}
	t.Logf("BF16 micro-kernels of %d set(s) equal to the twin", len(sets))
}

func FuzzGemmBF16Tiles(f *testing.F) {
	f.Add(int64(1), uint16(8), uint8(modeRandom))
	f.Add(int64(2), uint16(13), uint8(modeExtreme))
	f.Add(int64(3), uint16(288), uint8(modeUnit))
	f.Fuzz(func(t *testing.T, seed int64, k2 uint16, mode uint8) {
		checkGemmBF16Tiles(t, requireBF16Sets(t), seed, int(k2%1024)+1, int(mode%numModes))
	})
}

// TestPackTokensBF16 checks the packed pairs against their definition, for token counts
// around the group widths and column chunks of even starts.
func TestPackTokensBF16(t *testing.T) {
	r := rand.New(rand.NewSource(9))
	for _, n := range []int{1, 7, 8, 9, 16, 17, 33} {
		for _, cols := range []int{2, 6, 64, 70} {
			x := randFloats(r, n*cols, modeRandom)
			dst := make([]uint32, packedLen(n, cols)/2)
			for i := range dst {
				dst[i] = r.Uint32()
			}
			for c0 := 0; c0 < cols; c0 += 4 {
				packTokensBF16(dst, x, n, cols, c0, min(c0+4, cols))
			}
			off := 0
			for t0 := 0; t0 < n; {
				wd := tokenGroupWidth(t0, n)
				for q := range cols / 2 {
					for tt := range wd {
						var want uint32
						if t0+tt < n {
							want = uint32(bf16RNE(x[(t0+tt)*cols+2*q])) | uint32(bf16RNE(x[(t0+tt)*cols+2*q+1]))<<16
						}
						if got := dst[off+q*wd+tt]; got != want {
							t.Fatalf("n=%d cols=%d: group %d pair %d lane %d = %#08x, want %#08x", n, cols, t0, q, tt, got, want)
						}
					}
				}
				off += wd * cols / 2
				t0 += wd
			}
		}
	}
}
