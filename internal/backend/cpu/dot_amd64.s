//go:build amd64

#include "textflag.h"

// func cpuidECX1() uint32
TEXT ·cpuidECX1(SB), NOSPLIT, $0-4
	MOVL $1, AX
	XORL CX, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET

// HSUM reduces the 8 floats of Y0 to X0's low lane (clobbers X1).
#define HSUM \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VHADDPS      X0, X0, X0

// func dotF32AVX2(w, x *float32, n int) float32   (n % 8 == 0)
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f32loop32:
	CMPQ CX, $32
	JLT  f32loop8
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         f32loop32

f32loop8:
	CMPQ CX, $8
	JLT  f32done
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         f32loop8

f32done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func dotF16AVX2(w *byte, x *float32, n int) float32   (n % 8 == 0)
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f16loop32:
	CMPQ CX, $32
	JLT  f16loop8
	VCVTPH2PS   (SI), Y4
	VCVTPH2PS   16(SI), Y5
	VCVTPH2PS   32(SI), Y6
	VCVTPH2PS   48(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         f16loop32

f16loop8:
	CMPQ CX, $8
	JLT  f16done
	VCVTPH2PS   (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         f16loop8

f16done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func dotBF16AVX2(w *byte, x *float32, n int) float32   (n % 8 == 0)
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

bf16loop32:
	CMPQ CX, $32
	JLT  bf16loop8
	VPMOVZXWD   (SI), Y4
	VPMOVZXWD   16(SI), Y5
	VPMOVZXWD   32(SI), Y6
	VPMOVZXWD   48(SI), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         bf16loop32

bf16loop8:
	CMPQ CX, $8
	JLT  bf16done
	VPMOVZXWD   (SI), Y4
	VPSLLD      $16, Y4, Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         bf16loop8

bf16done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func axpyAVX2(y *float32, a float32, x *float32, n int)   (n % 8 == 0)
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	VBROADCASTSS a+8(FP), Y15
	MOVQ         x+16(FP), SI
	MOVQ         n+24(FP), CX

axpyloop32:
	CMPQ CX, $32
	JLT  axpyloop8
	VMOVUPS     (DI), Y0
	VMOVUPS     32(DI), Y1
	VMOVUPS     64(DI), Y2
	VMOVUPS     96(DI), Y3
	VFMADD231PS (SI), Y15, Y0
	VFMADD231PS 32(SI), Y15, Y1
	VFMADD231PS 64(SI), Y15, Y2
	VFMADD231PS 96(SI), Y15, Y3
	VMOVUPS     Y0, (DI)
	VMOVUPS     Y1, 32(DI)
	VMOVUPS     Y2, 64(DI)
	VMOVUPS     Y3, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         axpyloop32

axpyloop8:
	CMPQ CX, $8
	JLT  axpydone
	VMOVUPS     (DI), Y0
	VFMADD231PS (SI), Y15, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         axpyloop8

axpydone:
	VZEROUPPER
	RET

// BLOCKSCALE loads the f16 at w, the f16 at x, and leaves their product broadcast in Y5
// (clobbers AX, BX, X6).
#define BLOCKSCALE(w, x) \
	MOVWLZX      w, AX \
	MOVWLZX      x, BX \
	VMOVD        AX, X5 \
	VMOVD        BX, X6 \
	VCVTPH2PS    X5, X5 \
	VCVTPH2PS    X6, X6 \
	VMULSS       X6, X5, X5 \
	VBROADCASTSS X5, Y5

// BLOCKSCALE2 is BLOCKSCALE for two blocks at once: products w0*x0 broadcast in Y5 and
// w1*x1 in Y7 (clobbers AX, BX, DX, X6).
#define BLOCKSCALE2(w0, w1, x0, x1) \
	MOVWLZX      w0, AX \
	MOVWLZX      w1, BX \
	SHLL         $16, BX \
	ORL          BX, AX \
	MOVWLZX      x0, BX \
	MOVWLZX      x1, DX \
	SHLL         $16, DX \
	ORL          DX, BX \
	VMOVD        AX, X5 \
	VMOVD        BX, X6 \
	VCVTPH2PS    X5, X5 \
	VCVTPH2PS    X6, X6 \
	VMULPS       X6, X5, X5 \
	VMOVSHDUP    X5, X7 \
	VBROADCASTSS X5, Y5 \
	VBROADCASTSS X7, Y7

// Q80_BLOCK adds scale * (int8 quants at w . int8 quants at x) to acc: |w| (unsigned) times
// x signed by w, pairs to int16 (exact while x is in [-127, 127]), then int32 lanes, then
// float (clobbers Y1-Y3; Y15 holds int16 ones).
#define Q80_BLOCK(w, x, scale, acc) \
	VMOVDQU     w, Y1 \
	VMOVDQU     x, Y2 \
	VPABSB      Y1, Y3 \
	VPSIGNB     Y1, Y2, Y2 \
	VPMADDUBSW  Y2, Y3, Y3 \
	VPMADDWD    Y15, Y3, Y3 \
	VCVTDQ2PS   Y3, Y3 \
	VFMADD231PS Y3, scale, acc

// Q40_BLOCK is Q80_BLOCK for 16 bytes of nibbles at w (low nibbles elements 0..15, high
// 16..31, value q-8; Y14 holds 0x0f bytes, Y13 8s).
#define Q40_BLOCK(w, x, scale, acc) \
	VMOVDQU     w, X1 \
	VPSRLW      $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND       Y14, Y1, Y1 \
	VPSUBB      Y13, Y1, Y1 \
	VMOVDQU     x, Y2 \
	VPABSB      Y1, Y3 \
	VPSIGNB     Y1, Y2, Y2 \
	VPMADDUBSW  Y2, Y3, Y3 \
	VPMADDWD    Y15, Y3, Y3 \
	VCVTDQ2PS   Y3, Y3 \
	VFMADD231PS Y3, scale, acc

// func dotQ8_0AVX2(w, x *byte, nb int) float32
// Per block: sum of int8*int8 via |w| (unsigned) * (x signed by w), pairs to int16
// (exact while x is in [-127, 127]), then to int32 lanes, then scaled in float.
TEXT ·dotQ8_0AVX2(SB), NOSPLIT, $0-28
	MOVQ      w+0(FP), SI
	MOVQ      x+8(FP), DI
	MOVQ      nb+16(FP), CX
	VXORPS    Y0, Y0, Y0
	VPCMPEQW  Y15, Y15, Y15
	VPSRLW    $15, Y15, Y15 // int16 ones

	VXORPS    Y12, Y12, Y12 // second accumulator

q80loop2:
	CMPQ CX, $2
	JLT  q80tail
	BLOCKSCALE2((SI), 34(SI), (DI), 34(DI))
	Q80_BLOCK(2(SI), 2(DI), Y5, Y0)
	Q80_BLOCK(36(SI), 36(DI), Y7, Y12)
	ADDQ $68, SI
	ADDQ $68, DI
	SUBQ $2, CX
	JMP  q80loop2

q80tail:
	CMPQ CX, $0
	JEQ  q80done
	BLOCKSCALE((SI), (DI))
	Q80_BLOCK(2(SI), 2(DI), Y5, Y0)

q80done:
	VADDPS Y12, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dotQ4_0AVX2(w, x *byte, nb int) float32
TEXT ·dotQ4_0AVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	VPCMPEQW     Y15, Y15, Y15
	VPSRLW       $15, Y15, Y15 // int16 ones
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Y14      // 0x0f bytes
	MOVL         $8, AX
	VMOVD        AX, X13
	VPBROADCASTB X13, Y13      // 8 bytes

	VXORPS       Y12, Y12, Y12 // second accumulator

q40loop2:
	CMPQ CX, $2
	JLT  q40tail
	BLOCKSCALE2((SI), 18(SI), (DI), 34(DI))
	Q40_BLOCK(2(SI), 2(DI), Y5, Y0)
	Q40_BLOCK(20(SI), 36(DI), Y7, Y12)
	ADDQ $36, SI
	ADDQ $68, DI
	SUBQ $2, CX
	JMP  q40loop2

q40tail:
	CMPQ CX, $0
	JEQ  q40done
	BLOCKSCALE((SI), (DI))
	Q40_BLOCK(2(SI), 2(DI), Y5, Y0)

q40done:
	VADDPS Y12, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q4K_CHUNK handles 64 elements (sub-blocks 2j and 2j+1) of a Q4_K super-block: qs at
// qoff(SI), their q8 at xoff(DI) and xoff+32(DI), int16 scales at soff(SP) and soff+2(SP);
// adds the scaled int32 sums to Y8.
#define Q4K_CHUNK(qoff, xoff, xoff2, soff, soff2) \
	VMOVDQU      qoff(SI), Y1 \
	VPSRLW       $4, Y1, Y2 \
	VPAND        Y14, Y1, Y1 \
	VPAND        Y14, Y2, Y2 \
	VPMADDUBSW   xoff(DI), Y1, Y1 \
	VPMADDUBSW   xoff2(DI), Y2, Y2 \
	VPBROADCASTW soff(SP), Y3 \
	VPBROADCASTW soff2(SP), Y4 \
	VPMADDWD     Y3, Y1, Y1 \
	VPMADDWD     Y4, Y2, Y2 \
	VPADDD       Y1, Y8, Y8 \
	VPADDD       Y2, Y8, Y8

// func dotQ4KAVX2(w, x *byte, nb int) float32
// Y0: float accumulator; Y8: int32 sums of one super-block; 0(SP): its 8 scales as int16.
TEXT ·dotQ4KAVX2(SB), NOSPLIT, $16-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Y14 // 0x0f bytes

q4kloop:
	// d*dx and dmin*dx.
	MOVL         (SI), AX
	VMOVD        AX, X9
	VCVTPH2PS    X9, X9
	VBROADCASTSS (DI), X10
	VMULPS       X10, X9, X9
	VMOVSHDUP    X9, X11
	VBROADCASTSS X9, Y9   // d
	VBROADCASTSS X11, Y11 // dmin

	// Unpack the 6-bit scales (u0', u1' -> R8) and mins (u2', u3' -> R9).
	MOVL  4(SI), R8  // u0
	MOVL  8(SI), R9  // u1
	MOVL  12(SI), R10 // u2
	MOVL  R10, R11
	SHRL  $4, R11
	ANDL  $0x0f0f0f0f, R11
	MOVL  R9, R12
	SHRL  $6, R12
	ANDL  $0x03030303, R12
	SHLL  $4, R12
	ORL   R12, R11        // u3' (mins 4..7)
	ANDL  $0x3f3f3f3f, R9 // u2' (mins 0..3)
	ANDL  $0x0f0f0f0f, R10
	MOVL  R8, R12
	SHRL  $6, R12
	ANDL  $0x03030303, R12
	SHLL  $4, R12
	ORL   R12, R10        // u1' (scales 4..7)
	ANDL  $0x3f3f3f3f, R8 // u0' (scales 0..3)
	SHLQ  $32, R10
	ORQ   R10, R8
	SHLQ  $32, R11
	ORQ   R11, R9

	// Scales as int16 to 0(SP).
	VMOVQ     R8, X1
	VPMOVZXBW X1, X1
	VMOVDQU   X1, 0(SP)

	// Mins: m_j * (bsums[2j] + bsums[2j+1]) in int32 lanes; subtract dmin * that.
	VMOVQ       R9, X2
	VPUNPCKLBW  X2, X2, X2
	VPMOVZXBW   X2, Y2
	VPMADDWD    260(DI), Y2, Y2
	VCVTDQ2PS   Y2, Y2
	VFNMADD231PS Y2, Y11, Y0

	VPXOR Y8, Y8, Y8
	Q4K_CHUNK(16, 4, 36, 0, 2)
	Q4K_CHUNK(48, 68, 100, 4, 6)
	Q4K_CHUNK(80, 132, 164, 8, 10)
	Q4K_CHUNK(112, 196, 228, 12, 14)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y8, Y9, Y0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4kloop

	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q6K_CHUNK multiplies the 32 unsigned 6-bit quants in Y reg by the q8 at xoff(DI), scales
// the low 16 by the int16 at soff(SP) and the high 16 by the one at soff+2(SP), adds to Y8.
#define Q6K_CHUNK(reg, xoff, soff, soff2) \
	VPMADDUBSW   xoff(DI), reg, reg \
	VPBROADCASTW soff(SP), X3 \
	VPBROADCASTW soff2(SP), X4 \
	VINSERTI128  $1, X4, Y3, Y3 \
	VPMADDWD     Y3, reg, reg \
	VPADDD       reg, Y8, Y8

// Q6K_HALF handles 128 elements: ql at qloff(SI), qh at qhoff(SI), q8 from xoff(DI), scales
// from soff(SP).
#define Q6K_HALF(qloff, qloff2, qhoff, x0, x1, x2, x3, s0, s1, s2, s3, s4, s5, s6, s7) \
	VMOVDQU qloff(SI), Y1 \
	VMOVDQU qloff2(SI), Y2 \
	VMOVDQU qhoff(SI), Y5 \
	VPSRLW  $4, Y1, Y6 \
	VPSRLW  $4, Y2, Y7 \
	VPAND   Y14, Y1, Y1 \
	VPAND   Y14, Y2, Y2 \
	VPAND   Y14, Y6, Y6 \
	VPAND   Y14, Y7, Y7 \
	VPSLLW  $4, Y5, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y1, Y1 \
	VPSLLW  $2, Y5, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y2, Y2 \
	VPAND   Y13, Y5, Y10 \
	VPOR    Y10, Y6, Y6 \
	VPSRLW  $2, Y5, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y7, Y7 \
	Q6K_CHUNK(Y1, x0, s0, s1) \
	Q6K_CHUNK(Y2, x1, s2, s3) \
	Q6K_CHUNK(Y6, x2, s4, s5) \
	Q6K_CHUNK(Y7, x3, s6, s7)

// func dotQ6KAVX2(w, x *byte, nb int) float32
// Sum over 16-element groups k of sc_k * sum (q-32)*q8 = sc_k*sum q*q8 - 32*sc_k*bsum_k.
TEXT ·dotQ6KAVX2(SB), NOSPLIT, $32-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Y14 // 0x0f bytes
	MOVL         $0x30, AX
	VMOVD        AX, X13
	VPBROADCASTB X13, Y13 // 0x30 bytes

q6kloop:
	MOVWLZX      208(SI), AX
	VMOVD        AX, X9
	VCVTPH2PS    X9, X9
	VMULSS       (DI), X9, X9
	VBROADCASTSS X9, Y9 // d*dx

	VPMOVSXBW 192(SI), Y2 // scales as int16
	VMOVDQU   Y2, 0(SP)
	VPMADDWD  260(DI), Y2, Y2
	VPSLLD    $5, Y2, Y2
	VPXOR     Y8, Y8, Y8
	VPSUBD    Y2, Y8, Y8 // -32 * sum sc_k*bsum_k

	Q6K_HALF(0, 32, 128, 4, 36, 68, 100, 0, 2, 4, 6, 8, 10, 12, 14)
	Q6K_HALF(64, 96, 160, 132, 164, 196, 228, 16, 18, 20, 22, 24, 26, 28, 30)

	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y8, Y9, Y0

	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6kloop

	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET
