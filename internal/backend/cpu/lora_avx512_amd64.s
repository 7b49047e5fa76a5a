//go:build amd64

#include "textflag.h"

// The AVX-512 set's LoRA kernels (lora.go): 4 tokens of one adapter at a time, so that
// each weight vector loaded serves 4 tokens and each token's vector 4 ranks. Every token
// keeps its own accumulators, and its products run in the same order whichever path (full
// vectors, the masked tail) and whichever tokens share the call: a token's results do not
// depend on its neighbours.

// SHRINK_FMAS multiplies one vector of each of the 4 tokens (Z16-Z19) by one vector of
// each of the 4 ranks' rows (Z20-Z23) into the accumulators Z(4t+r).
#define SHRINK_FMAS \
	VFMADD231PS Z20, Z16, Z0 \
	VFMADD231PS Z21, Z16, Z1 \
	VFMADD231PS Z22, Z16, Z2 \
	VFMADD231PS Z23, Z16, Z3 \
	VFMADD231PS Z20, Z17, Z4 \
	VFMADD231PS Z21, Z17, Z5 \
	VFMADD231PS Z22, Z17, Z6 \
	VFMADD231PS Z23, Z17, Z7 \
	VFMADD231PS Z20, Z18, Z8 \
	VFMADD231PS Z21, Z18, Z9 \
	VFMADD231PS Z22, Z18, Z10 \
	VFMADD231PS Z23, Z18, Z11 \
	VFMADD231PS Z20, Z19, Z12 \
	VFMADD231PS Z21, Z19, Z13 \
	VFMADD231PS Z22, Z19, Z14 \
	VFMADD231PS Z23, Z19, Z15

// HSUM(z, y, x, off) adds the 16 lanes of accumulator z (y and x its lower halves) in a
// fixed tree and stores the sum at off(R12).
#define HSUM(z, y, x, off) \
	VEXTRACTF32X8 $1, z, Y16 \
	VADDPS        Y16, y, y \
	VEXTRACTF32X4 $1, y, X16 \
	VADDPS        X16, x, x \
	VMOVHLPS      x, x, X16 \
	VADDPS        X16, x, x \
	VPSHUFD       $1, x, X16 \
	VADDSS        X16, x, x \
	VMOVSS        x, off(R12)

// func loraShrink4x4AVX512(x, a *[4]*float32, n int, mask uint16, u *[16]float32)
// u[4t+r] = sum_{i<n} a[r][i] * x[t][i] for t, r < 4: lanes sum i mod 16 (the last
// n mod 16 values loaded under mask), then the lanes add up in a fixed tree.
TEXT ·loraShrink4x4AVX512(SB), NOSPLIT, $0-40
	MOVQ   x+0(FP), R10
	MOVQ   0(R10), AX
	MOVQ   8(R10), BX
	MOVQ   16(R10), CX
	MOVQ   24(R10), DX
	MOVQ   a+8(FP), R10
	MOVQ   0(R10), SI
	MOVQ   8(R10), DI
	MOVQ   16(R10), R8
	MOVQ   24(R10), R9
	MOVQ   n+16(FP), R11
	MOVWLZX mask+24(FP), R13
	KMOVW  R13, K1
	MOVQ   u+32(FP), R12
	XORQ   R10, R10
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	SHRQ   $4, R11
	JZ     shrinktail

shrinkloop:
	VMOVUPS (AX)(R10*1), Z16
	VMOVUPS (BX)(R10*1), Z17
	VMOVUPS (CX)(R10*1), Z18
	VMOVUPS (DX)(R10*1), Z19
	VMOVUPS (SI)(R10*1), Z20
	VMOVUPS (DI)(R10*1), Z21
	VMOVUPS (R8)(R10*1), Z22
	VMOVUPS (R9)(R10*1), Z23
	SHRINK_FMAS
	ADDQ    $64, R10
	DECQ    R11
	JNZ     shrinkloop

shrinktail:
	KORTESTW K1, K1
	JZ       shrinksum
	VMOVUPS.Z (AX)(R10*1), K1, Z16
	VMOVUPS.Z (BX)(R10*1), K1, Z17
	VMOVUPS.Z (CX)(R10*1), K1, Z18
	VMOVUPS.Z (DX)(R10*1), K1, Z19
	VMOVUPS.Z (SI)(R10*1), K1, Z20
	VMOVUPS.Z (DI)(R10*1), K1, Z21
	VMOVUPS.Z (R8)(R10*1), K1, Z22
	VMOVUPS.Z (R9)(R10*1), K1, Z23
	SHRINK_FMAS

shrinksum:
	HSUM(Z0, Y0, X0, 0)
	HSUM(Z1, Y1, X1, 4)
	HSUM(Z2, Y2, X2, 8)
	HSUM(Z3, Y3, X3, 12)
	HSUM(Z4, Y4, X4, 16)
	HSUM(Z5, Y5, X5, 20)
	HSUM(Z6, Y6, X6, 24)
	HSUM(Z7, Y7, X7, 28)
	HSUM(Z8, Y8, X8, 32)
	HSUM(Z9, Y9, X9, 36)
	HSUM(Z10, Y10, X10, 40)
	HSUM(Z11, Y11, X11, 44)
	HSUM(Z12, Y12, X12, 48)
	HSUM(Z13, Y13, X13, 52)
	HSUM(Z14, Y14, X14, 56)
	HSUM(Z15, Y15, X15, 60)
	VZEROUPPER
	RET

// The expand keeps 4 tokens' outputs in registers over a block of columns while the ranks
// go by: out[t][o] = fma(u[t][r], b[r][o], out[t][o]) for r in order, one rounding a rank,
// the same chain for every column whatever block it falls in. AX, BX, CX, DX point at the
// 4 tokens' outputs (their block), SI, DI, R8, R9 at their ranks' values, R10 at b's first
// row (the block's columns), R11 is b's row stride in bytes, R12 the rank.

// EXPAND_BCAST broadcasts rank R13's value of each token into Z20-Z23.
#define EXPAND_BCAST \
	VBROADCASTSS (SI)(R13*4), Z20 \
	VBROADCASTSS (DI)(R13*4), Z21 \
	VBROADCASTSS (R8)(R13*4), Z22 \
	VBROADCASTSS (R9)(R13*4), Z23

// func loraExpand4AVX512(out, u *[4]*float32, b *float32, ldb, rank, n int, mask uint16)
// out[t][o] += sum_{r<rank} u[t][r] * b[r*ldb+o] for t < 4, o < n (rank > 0; out's rows
// may repeat: each block is loaded whole before it is stored). The columns go in blocks of
// 64, then 16, then the last n mod 16 under mask.
TEXT ·loraExpand4AVX512(SB), NOSPLIT, $0-50
	MOVQ    out+0(FP), R10
	MOVQ    0(R10), AX
	MOVQ    8(R10), BX
	MOVQ    16(R10), CX
	MOVQ    24(R10), DX
	MOVQ    u+8(FP), R10
	MOVQ    0(R10), SI
	MOVQ    8(R10), DI
	MOVQ    16(R10), R8
	MOVQ    24(R10), R9
	MOVQ    b+16(FP), R10
	MOVQ    ldb+24(FP), R11
	SHLQ    $2, R11
	MOVQ    rank+32(FP), R12
	MOVQ    n+40(FP), R15
	MOVWLZX mask+48(FP), R13
	KMOVW   R13, K1
	CMPQ    R15, $64
	JLT     expand16

expand64:
	VMOVUPS (AX), Z0
	VMOVUPS 64(AX), Z1
	VMOVUPS 128(AX), Z2
	VMOVUPS 192(AX), Z3
	VMOVUPS (BX), Z4
	VMOVUPS 64(BX), Z5
	VMOVUPS 128(BX), Z6
	VMOVUPS 192(BX), Z7
	VMOVUPS (CX), Z8
	VMOVUPS 64(CX), Z9
	VMOVUPS 128(CX), Z10
	VMOVUPS 192(CX), Z11
	VMOVUPS (DX), Z12
	VMOVUPS 64(DX), Z13
	VMOVUPS 128(DX), Z14
	VMOVUPS 192(DX), Z15
	MOVQ    R10, R14
	XORQ    R13, R13

expand64rank:
	VMOVUPS (R14), Z16
	VMOVUPS 64(R14), Z17
	VMOVUPS 128(R14), Z18
	VMOVUPS 192(R14), Z19
	EXPAND_BCAST
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z20, Z17, Z1
	VFMADD231PS Z20, Z18, Z2
	VFMADD231PS Z20, Z19, Z3
	VFMADD231PS Z21, Z16, Z4
	VFMADD231PS Z21, Z17, Z5
	VFMADD231PS Z21, Z18, Z6
	VFMADD231PS Z21, Z19, Z7
	VFMADD231PS Z22, Z16, Z8
	VFMADD231PS Z22, Z17, Z9
	VFMADD231PS Z22, Z18, Z10
	VFMADD231PS Z22, Z19, Z11
	VFMADD231PS Z23, Z16, Z12
	VFMADD231PS Z23, Z17, Z13
	VFMADD231PS Z23, Z18, Z14
	VFMADD231PS Z23, Z19, Z15
	ADDQ    R11, R14
	INCQ    R13
	CMPQ    R13, R12
	JLT     expand64rank

	VMOVUPS Z0, (AX)
	VMOVUPS Z1, 64(AX)
	VMOVUPS Z2, 128(AX)
	VMOVUPS Z3, 192(AX)
	VMOVUPS Z4, (BX)
	VMOVUPS Z5, 64(BX)
	VMOVUPS Z6, 128(BX)
	VMOVUPS Z7, 192(BX)
	VMOVUPS Z8, (CX)
	VMOVUPS Z9, 64(CX)
	VMOVUPS Z10, 128(CX)
	VMOVUPS Z11, 192(CX)
	VMOVUPS Z12, (DX)
	VMOVUPS Z13, 64(DX)
	VMOVUPS Z14, 128(DX)
	VMOVUPS Z15, 192(DX)
	ADDQ    $256, AX
	ADDQ    $256, BX
	ADDQ    $256, CX
	ADDQ    $256, DX
	ADDQ    $256, R10
	SUBQ    $64, R15
	CMPQ    R15, $64
	JGE     expand64

expand16:
	CMPQ R15, $16
	JLT  expandtail

expand16loop:
	VMOVUPS (AX), Z0
	VMOVUPS (BX), Z4
	VMOVUPS (CX), Z8
	VMOVUPS (DX), Z12
	MOVQ    R10, R14
	XORQ    R13, R13

expand16rank:
	VMOVUPS (R14), Z16
	EXPAND_BCAST
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z21, Z16, Z4
	VFMADD231PS Z22, Z16, Z8
	VFMADD231PS Z23, Z16, Z12
	ADDQ    R11, R14
	INCQ    R13
	CMPQ    R13, R12
	JLT     expand16rank

	VMOVUPS Z0, (AX)
	VMOVUPS Z4, (BX)
	VMOVUPS Z8, (CX)
	VMOVUPS Z12, (DX)
	ADDQ    $64, AX
	ADDQ    $64, BX
	ADDQ    $64, CX
	ADDQ    $64, DX
	ADDQ    $64, R10
	SUBQ    $16, R15
	CMPQ    R15, $16
	JGE     expand16loop

expandtail:
	KORTESTW K1, K1
	JZ       expanddone
	VMOVUPS.Z (AX), K1, Z0
	VMOVUPS.Z (BX), K1, Z4
	VMOVUPS.Z (CX), K1, Z8
	VMOVUPS.Z (DX), K1, Z12
	MOVQ     R10, R14
	XORQ     R13, R13

expandtailrank:
	VMOVUPS.Z (R14), K1, Z16
	EXPAND_BCAST
	VFMADD231PS Z20, Z16, Z0
	VFMADD231PS Z21, Z16, Z4
	VFMADD231PS Z22, Z16, Z8
	VFMADD231PS Z23, Z16, Z12
	ADDQ    R11, R14
	INCQ    R13
	CMPQ    R13, R12
	JLT     expandtailrank

	VMOVUPS Z0, K1, (AX)
	VMOVUPS Z4, K1, (BX)
	VMOVUPS Z8, K1, (CX)
	VMOVUPS Z12, K1, (DX)

expanddone:
	VZEROUPPER
	RET
