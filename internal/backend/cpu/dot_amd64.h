// Macros shared by the assembly files of the avx2 and avx512 kernel sets.

// HSUM reduces the 8 floats of Y0 to X0's low lane (clobbers X1).
#define HSUM \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VHADDPS      X0, X0, X0

// ROWS4_STORE writes the sums of accumulators Y0..Y3 to the 4 floats at (DX).
#define ROWS4_STORE \
	VHADDPS      Y1, Y0, Y0 \
	VHADDPS      Y3, Y2, Y2 \
	VHADDPS      Y2, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VMOVUPS      X0, (DX) \
	VZEROUPPER

// Q4K_HEAD reads the head of the Q4_K super-block at SI against the Q8_K block at DI:
// Y9 = d*dx and Y11 = dmin*dx broadcast, the 8 6-bit scales as bytes in R8 and the 8 mins
// in R9 (clobbers AX, R10-R12, X10).
#define Q4K_HEAD \
	MOVL         (SI), AX \
	VMOVD        AX, X9 \
	VCVTPH2PS    X9, X9 \
	VBROADCASTSS (DI), X10 \
	VMULPS       X10, X9, X9 \
	VMOVSHDUP    X9, X11 \
	VBROADCASTSS X9, Y9 \
	VBROADCASTSS X11, Y11 \
	MOVL         4(SI), R8 \
	MOVL         8(SI), R9 \
	MOVL         12(SI), R10 \
	MOVL         R10, R11 \
	SHRL         $4, R11 \
	ANDL         $0x0f0f0f0f, R11 \
	MOVL         R9, R12 \
	SHRL         $6, R12 \
	ANDL         $0x03030303, R12 \
	SHLL         $4, R12 \
	ORL          R12, R11 \
	ANDL         $0x3f3f3f3f, R9 \
	ANDL         $0x0f0f0f0f, R10 \
	MOVL         R8, R12 \
	SHRL         $6, R12 \
	ANDL         $0x03030303, R12 \
	SHLL         $4, R12 \
	ORL          R12, R10 \
	ANDL         $0x3f3f3f3f, R8 \
	SHLQ         $32, R10 \
	ORQ          R10, R8 \
	SHLQ         $32, R11 \
	ORQ          R11, R9

// Q4K_MINS subtracts from the float sums in Y0 dmin*dx (Y11) times m_j * (bsums[2j] +
// bsums[2j+1]) of the Q8_K block at DI, in lane j, for the 8 mins given as bytes in R9
// (clobbers X2).
#define Q4K_MINS \
	VMOVQ        R9, X2 \
	VPUNPCKLBW   X2, X2, X2 \
	VPMOVZXBW    X2, Y2 \
	VPMADDWD     260(DI), Y2, Y2 \
	VCVTDQ2PS    Y2, Y2 \
	VFNMADD231PS Y2, Y11, Y0

// Q50_NIBBLES widens the 16 bytes of nibbles of the Q5_0 block at off(SI) to the low four
// bits of its 32 quants in Y3 (elements 0-15 the low nibbles; clobbers X4; Y14 holds 0x0f
// bytes).
#define Q50_NIBBLES(off) \
	VMOVDQU     off+6(SI), X3 \
	VPSRLW      $4, X3, X4 \
	VINSERTI128 $1, X4, Y3, Y3 \
	VPAND       Y14, Y3, Y3

// Q50_PRODUCT adds to the float sums in acc the products of the 5-bit quants q in Y3 of the
// Q5_0 block at off(SI) with the Q8_0 block at xoff(DI): q*x in int16 pairs (VPMADDUBSW),
// less the pairs of 16*x, summed into int32 lanes (VPMADDWD), converted and multiplied by
// d_w*d_x (clobbers Y1, Y5-Y7; Y10 holds 0x10 bytes, Y13 int16 ones).
#define Q50_PRODUCT(off, xoff, acc) \
	VPBROADCASTW off(SI), X1 \
	VPBROADCASTW xoff(DI), X6 \
	VCVTPH2PS    X1, Y1 \
	VCVTPH2PS    X6, Y6 \
	VMULPS       Y6, Y1, Y1 \
	VMOVDQU      xoff+2(DI), Y5 \
	VPMADDUBSW   Y5, Y3, Y6 \
	VPMADDUBSW   Y5, Y10, Y7 \
	VPSUBW       Y7, Y6, Y6 \
	VPMADDWD     Y13, Y6, Y6 \
	VCVTDQ2PS    Y6, Y6 \
	VFMADD231PS  Y6, Y1, acc
