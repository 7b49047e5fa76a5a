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
