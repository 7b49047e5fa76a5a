//go:build amd64

#include "textflag.h"

// The AVX-512 set's float micro-kernel of the many-token path: gemmT16x6AVX2 (gemm_amd64.s)
// with the 16 tokens of a group in one Z register, so that a step is 6 fused multiply-adds
// where the AVX2 kernel needs 12, each with its weight broadcast from memory by the
// instruction itself (EVEX embedded broadcast). Every lane still sums its products in order
// of c, one fused multiply-add per step: the results equal gemmT16x6AVX2's bit for bit.

// GEMMT16Z_STEP does step u of an unrolled loop: 1 vector of 16 tokens, 6 broadcast weights.
#define GEMMT16Z_STEP(u) \
	VMOVUPS          (64*u)(DI), Z12 \
	VFMADD231PS.BCST (4*u)(SI), Z12, Z0 \
	VFMADD231PS.BCST (4*u)(SI)(R8*1), Z12, Z1 \
	VFMADD231PS.BCST (4*u)(SI)(R8*2), Z12, Z2 \
	VFMADD231PS.BCST (4*u)(SI)(R9*1), Z12, Z3 \
	VFMADD231PS.BCST (4*u)(BX), Z12, Z4 \
	VFMADD231PS.BCST (4*u)(BX)(R8*1), Z12, Z5

// func gemmT16x6AVX512(w *float32, ldw int, xt *float32, k int, acc *float32)   (k > 0)
// acc[r*16+t] = sum_{c<k} w[r*ldw+c] * xt[c*16+t] for rows r < 6 and tokens t < 16.
TEXT ·gemmT16x6AVX512(SB), NOSPLIT, $0-40
	MOVQ   w+0(FP), SI
	MOVQ   ldw+8(FP), R8
	SHLQ   $2, R8
	LEAQ   (R8)(R8*2), R9
	LEAQ   (SI)(R8*4), BX
	MOVQ   xt+16(FP), DI
	MOVQ   k+24(FP), CX
	MOVQ   acc+32(FP), DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	MOVQ   CX, AX
	SHRQ   $2, AX
	JZ     z16tail

z16loop4:
	GEMMT16Z_STEP(0)
	GEMMT16Z_STEP(1)
	GEMMT16Z_STEP(2)
	GEMMT16Z_STEP(3)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $256, DI
	DECQ AX
	JNZ  z16loop4

z16tail:
	ANDQ $3, CX
	JZ   z16store

z16loop1:
	GEMMT16Z_STEP(0)
	ADDQ $4, SI
	ADDQ $4, BX
	ADDQ $64, DI
	DECQ CX
	JNZ  z16loop1

z16store:
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, 192(DX)
	VMOVUPS Z4, 256(DX)
	VMOVUPS Z5, 320(DX)
	VZEROUPPER
	RET
