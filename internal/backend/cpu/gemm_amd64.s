//go:build amd64

#include "textflag.h"

// The micro-kernels of the many-token path (gemm.go). Tokens run along the vector lanes:
// xt holds the activations of a group of tokens packed column by column (xt[c*W+t]), and
// each weight value is broadcast to all lanes. Row r of the tile sums its products in
// order of c, one fused multiply-add per step, into acc[r*W+t] (overwritten).

// GEMMT16_STEP does step u of an unrolled loop: 2 vectors of 16 tokens, 6 broadcast weights.
#define GEMMT16_STEP(u) \
	VMOVUPS      (64*u)(DI), Y12 \
	VMOVUPS      (64*u+32)(DI), Y13 \
	VBROADCASTSS (4*u)(SI), Y14 \
	VFMADD231PS  Y12, Y14, Y0 \
	VFMADD231PS  Y13, Y14, Y1 \
	VBROADCASTSS (4*u)(SI)(R8*1), Y15 \
	VFMADD231PS  Y12, Y15, Y2 \
	VFMADD231PS  Y13, Y15, Y3 \
	VBROADCASTSS (4*u)(SI)(R8*2), Y14 \
	VFMADD231PS  Y12, Y14, Y4 \
	VFMADD231PS  Y13, Y14, Y5 \
	VBROADCASTSS (4*u)(SI)(R9*1), Y15 \
	VFMADD231PS  Y12, Y15, Y6 \
	VFMADD231PS  Y13, Y15, Y7 \
	VBROADCASTSS (4*u)(BX), Y14 \
	VFMADD231PS  Y12, Y14, Y8 \
	VFMADD231PS  Y13, Y14, Y9 \
	VBROADCASTSS (4*u)(BX)(R8*1), Y15 \
	VFMADD231PS  Y12, Y15, Y10 \
	VFMADD231PS  Y13, Y15, Y11

// func gemmT16x6AVX2(w *float32, ldw int, xt *float32, k int, acc *float32)   (k > 0)
// acc[r*16+t] = sum_{c<k} w[r*ldw+c] * xt[c*16+t] for rows r < 6 and tokens t < 16.
TEXT ·gemmT16x6AVX2(SB), NOSPLIT, $0-40
	MOVQ   w+0(FP), SI
	MOVQ   ldw+8(FP), R8
	SHLQ   $2, R8
	LEAQ   (R8)(R8*2), R9
	LEAQ   (SI)(R8*4), BX
	MOVQ   xt+16(FP), DI
	MOVQ   k+24(FP), CX
	MOVQ   acc+32(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ   CX, AX
	SHRQ   $2, AX
	JZ     t16tail

t16loop4:
	GEMMT16_STEP(0)
	GEMMT16_STEP(1)
	GEMMT16_STEP(2)
	GEMMT16_STEP(3)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $256, DI
	DECQ AX
	JNZ  t16loop4

t16tail:
	ANDQ $3, CX
	JZ   t16store

t16loop1:
	GEMMT16_STEP(0)
	ADDQ $4, SI
	ADDQ $4, BX
	ADDQ $64, DI
	DECQ CX
	JNZ  t16loop1

t16store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y7, 224(DX)
	VMOVUPS Y8, 256(DX)
	VMOVUPS Y9, 288(DX)
	VMOVUPS Y10, 320(DX)
	VMOVUPS Y11, 352(DX)
	VZEROUPPER
	RET

// GEMMT8_STEP does step u of an unrolled loop: 1 vector of 8 tokens, 6 broadcast weights.
#define GEMMT8_STEP(u) \
	VMOVUPS      (32*u)(DI), Y12 \
	VBROADCASTSS (4*u)(SI), Y14 \
	VFMADD231PS  Y12, Y14, Y0 \
	VBROADCASTSS (4*u)(SI)(R8*1), Y15 \
	VFMADD231PS  Y12, Y15, Y1 \
	VBROADCASTSS (4*u)(SI)(R8*2), Y14 \
	VFMADD231PS  Y12, Y14, Y2 \
	VBROADCASTSS (4*u)(SI)(R9*1), Y15 \
	VFMADD231PS  Y12, Y15, Y3 \
	VBROADCASTSS (4*u)(BX), Y14 \
	VFMADD231PS  Y12, Y14, Y4 \
	VBROADCASTSS (4*u)(BX)(R8*1), Y15 \
	VFMADD231PS  Y12, Y15, Y5

// func gemmT8x6AVX2(w *float32, ldw int, xt *float32, k int, acc *float32)   (k > 0)
// acc[r*8+t] = sum_{c<k} w[r*ldw+c] * xt[c*8+t] for rows r < 6 and tokens t < 8.
TEXT ·gemmT8x6AVX2(SB), NOSPLIT, $0-40
	MOVQ   w+0(FP), SI
	MOVQ   ldw+8(FP), R8
	SHLQ   $2, R8
	LEAQ   (R8)(R8*2), R9
	LEAQ   (SI)(R8*4), BX
	MOVQ   xt+16(FP), DI
	MOVQ   k+24(FP), CX
	MOVQ   acc+32(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	MOVQ   CX, AX
	SHRQ   $2, AX
	JZ     t8tail

t8loop4:
	GEMMT8_STEP(0)
	GEMMT8_STEP(1)
	GEMMT8_STEP(2)
	GEMMT8_STEP(3)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $128, DI
	DECQ AX
	JNZ  t8loop4

t8tail:
	ANDQ $3, CX
	JZ   t8store

t8loop1:
	GEMMT8_STEP(0)
	ADDQ $4, SI
	ADDQ $4, BX
	ADDQ $32, DI
	DECQ CX
	JNZ  t8loop1

t8store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VZEROUPPER
	RET

// func prefetchAVX2(p *byte, n int)   (n > 0)
// Hints the cache lines of p[:n] into the caches; reads nothing architecturally.
TEXT ·prefetchAVX2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	ADDQ SI, CX

prefetchloop:
	PREFETCHT0 (SI)
	ADDQ       $64, SI
	CMPQ       SI, CX
	JB         prefetchloop
	RET
