//go:build amd64

#include "textflag.h"
#include "dot_amd64.h"

// The avx512 set's few-token F16 matrix-vector kernels: gemv4F16AVX2 (dot_amd64.s) for 2
// or 3 tokens at once. Each group of 16 weights is widened to float32 once and multiplied
// into every token's accumulators, where the one-token kernel widens it again for each
// token (a speculative verify step of 1+k tokens). Every accumulator takes the same FMAs in
// the same order as in gemv4F16AVX2 and is reduced the same way, so each token's outputs
// are bit for bit those of the one-token kernel; AVX-512 VL only adds the registers Y16-Y31
// that hold the second and third tokens' accumulators. The activations are read from
// memory as FMA operands.
//
// Registers: token 0's accumulators Y0-Y7 (row r in Y(r) and Y(4+r), as gemv4F16AVX2),
// token 1's Y16-Y23, token 2's Y24-Y31; Y12 and Y13 the widened weights. SI the rows (R8
// the stride, R9 three strides), DI token 0's activations and R13 the distance to the next
// token's, CX the 32-element iterations, DX the output and R14 the distance to the next
// token's outputs, R12 the prefetch pointer.

// GEMV_F16_ROW2 adds 32 f16 weights at b0..b3 times each of two tokens' 32 activations to
// its accumulator pair, (a0,a1) and (c0,c1), in gemv4F16AVX2's order (GEMV_F16_ROW).
#define GEMV_F16_ROW2(b0, b1, b2, b3, pf, a0, a1, c0, c1) \
	PREFETCHT0  pf \
	VCVTPH2PS   b0, Y12 \
	VCVTPH2PS   b1, Y13 \
	VFMADD231PS (DI), Y12, a0 \
	VFMADD231PS 32(DI), Y13, a1 \
	VFMADD231PS (DI)(R13*1), Y12, c0 \
	VFMADD231PS 32(DI)(R13*1), Y13, c1 \
	VCVTPH2PS   b2, Y12 \
	VCVTPH2PS   b3, Y13 \
	VFMADD231PS 64(DI), Y12, a0 \
	VFMADD231PS 96(DI), Y13, a1 \
	VFMADD231PS 64(DI)(R13*1), Y12, c0 \
	VFMADD231PS 96(DI)(R13*1), Y13, c1

// GEMV_F16_ROW3 is GEMV_F16_ROW2 for three tokens, the third's pair (e0,e1).
#define GEMV_F16_ROW3(b0, b1, b2, b3, pf, a0, a1, c0, c1, e0, e1) \
	PREFETCHT0  pf \
	VCVTPH2PS   b0, Y12 \
	VCVTPH2PS   b1, Y13 \
	VFMADD231PS (DI), Y12, a0 \
	VFMADD231PS 32(DI), Y13, a1 \
	VFMADD231PS (DI)(R13*1), Y12, c0 \
	VFMADD231PS 32(DI)(R13*1), Y13, c1 \
	VFMADD231PS (DI)(R13*2), Y12, e0 \
	VFMADD231PS 32(DI)(R13*2), Y13, e1 \
	VCVTPH2PS   b2, Y12 \
	VCVTPH2PS   b3, Y13 \
	VFMADD231PS 64(DI), Y12, a0 \
	VFMADD231PS 96(DI), Y13, a1 \
	VFMADD231PS 64(DI)(R13*1), Y12, c0 \
	VFMADD231PS 96(DI)(R13*1), Y13, c1 \
	VFMADD231PS 64(DI)(R13*2), Y12, e0 \
	VFMADD231PS 96(DI)(R13*2), Y13, e1

// GEMV4_MULTI_INIT loads the arguments of a multi-token kernel and zeroes token 0's
// accumulators (the callers zero the others).
#define GEMV4_MULTI_INIT \
	MOVQ   w+0(FP), SI \
	MOVQ   stride+8(FP), R8 \
	MOVQ   x+16(FP), DI \
	MOVQ   xstride+24(FP), R13 \
	MOVQ   n+32(FP), CX \
	MOVQ   out+40(FP), DX \
	MOVQ   ostride+48(FP), R14 \
	LEAQ   (R8)(R8*2), R9 \
	SHRQ   $5, CX \
	LEAQ   (SI)(R8*4), R12 \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// GEMV4_STORE_FROM adds the accumulator pairs (p0,q0)..(p3,q3) as GEMV4_REDUCE does and
// writes the four row sums at (DX).
#define GEMV4_STORE_FROM(p0, p1, p2, p3, q0, q1, q2, q3) \
	VADDPS q0, p0, Y0 \
	VADDPS q1, p1, Y1 \
	VADDPS q2, p2, Y2 \
	VADDPS q3, p3, Y3 \
	ROWS4_STORE

// func gemv4F16x2AVX512(w *byte, stride int, x *float32, xstride int, n int, out *float32, ostride int)   (n % 32 == 0)
TEXT ·gemv4F16x2AVX512(SB), NOSPLIT, $0-56
	GEMV4_MULTI_INIT
	VXORPS Y16, Y16, Y16
	VXORPS Y17, Y17, Y17
	VXORPS Y18, Y18, Y18
	VXORPS Y19, Y19, Y19
	VXORPS Y20, Y20, Y20
	VXORPS Y21, Y21, Y21
	VXORPS Y22, Y22, Y22
	VXORPS Y23, Y23, Y23

gemv4f16x2loop:
	GEMV_F16_ROW2((SI), 16(SI), 32(SI), 48(SI), 0(R12), Y0, Y4, Y16, Y20)
	GEMV_F16_ROW2((SI)(R8*1), 16(SI)(R8*1), 32(SI)(R8*1), 48(SI)(R8*1), 64(R12), Y1, Y5, Y17, Y21)
	GEMV_F16_ROW2((SI)(R8*2), 16(SI)(R8*2), 32(SI)(R8*2), 48(SI)(R8*2), 128(R12), Y2, Y6, Y18, Y22)
	GEMV_F16_ROW2((SI)(R9*1), 16(SI)(R9*1), 32(SI)(R9*1), 48(SI)(R9*1), 192(R12), Y3, Y7, Y19, Y23)
	ADDQ $64, SI
	ADDQ $256, R12
	ADDQ $128, DI
	DECQ CX
	JNZ  gemv4f16x2loop
	GEMV4_STORE_FROM(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	ADDQ R14, DX
	GEMV4_STORE_FROM(Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23)
	RET

// func gemv4F16x3AVX512(w *byte, stride int, x *float32, xstride int, n int, out *float32, ostride int)   (n % 32 == 0)
TEXT ·gemv4F16x3AVX512(SB), NOSPLIT, $0-56
	GEMV4_MULTI_INIT
	VXORPS Y16, Y16, Y16
	VXORPS Y17, Y17, Y17
	VXORPS Y18, Y18, Y18
	VXORPS Y19, Y19, Y19
	VXORPS Y20, Y20, Y20
	VXORPS Y21, Y21, Y21
	VXORPS Y22, Y22, Y22
	VXORPS Y23, Y23, Y23
	VXORPS Y24, Y24, Y24
	VXORPS Y25, Y25, Y25
	VXORPS Y26, Y26, Y26
	VXORPS Y27, Y27, Y27
	VXORPS Y28, Y28, Y28
	VXORPS Y29, Y29, Y29
	VXORPS Y30, Y30, Y30
	VXORPS Y31, Y31, Y31

gemv4f16x3loop:
	GEMV_F16_ROW3((SI), 16(SI), 32(SI), 48(SI), 0(R12), Y0, Y4, Y16, Y20, Y24, Y28)
	GEMV_F16_ROW3((SI)(R8*1), 16(SI)(R8*1), 32(SI)(R8*1), 48(SI)(R8*1), 64(R12), Y1, Y5, Y17, Y21, Y25, Y29)
	GEMV_F16_ROW3((SI)(R8*2), 16(SI)(R8*2), 32(SI)(R8*2), 48(SI)(R8*2), 128(R12), Y2, Y6, Y18, Y22, Y26, Y30)
	GEMV_F16_ROW3((SI)(R9*1), 16(SI)(R9*1), 32(SI)(R9*1), 48(SI)(R9*1), 192(R12), Y3, Y7, Y19, Y23, Y27, Y31)
	ADDQ $64, SI
	ADDQ $256, R12
	ADDQ $128, DI
	DECQ CX
	JNZ  gemv4f16x3loop
	GEMV4_STORE_FROM(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
	ADDQ R14, DX
	GEMV4_STORE_FROM(Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23)
	ADDQ R14, DX
	GEMV4_STORE_FROM(Y24, Y25, Y26, Y27, Y28, Y29, Y30, Y31)
	RET
