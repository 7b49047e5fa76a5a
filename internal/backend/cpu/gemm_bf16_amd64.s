//go:build amd64

#include "textflag.h"

// The AVX-512 BF16 micro-kernels of the many-token BF16 path (see gemmBF16TGeneric for what
// they compute, gemm_bf16.go for the layouts). Tokens run along the vector lanes: each
// step loads the activation pairs of 16 (or 8) tokens, a dword of two bfloat16 values of
// consecutive columns per token, and VDPBF16PS multiplies them by the weight pair of the
// same columns, broadcast from each of the 6 rows (read in place from the BF16 rows), and
// adds both products to the row's float32 sums: two columns per instruction.

// The Go assembler does not know VDPBF16PS (EVEX.F3.0F38.W0 52 /r), so the register form
// the kernels use is spelled in bytes: DPBF16_Z(d) is VDPBF16PS Z7, Z6, Zd (Zd += the pair
// products of Z6 and Z7, d < 6) and DPBF16_Y(d) the same on Y registers. EVEX bytes: 0xF2
// (registers below 8, map 0F38), 0x4E (W0, vvvv = ~6, prefix F3), 0x48 or 0x28 (512 or 256
// bits), then the opcode and ModRM (register d, r/m 7).
#define DPBF16_Z(d) BYTE $0x62; BYTE $0xF2; BYTE $0x4E; BYTE $0x48; BYTE $0x52; BYTE $(0xC7|(d<<3))
#define DPBF16_Y(d) BYTE $0x62; BYTE $0xF2; BYTE $0x4E; BYTE $0x28; BYTE $0x52; BYTE $(0xC7|(d<<3))

// BF16T_STEP does step u of an unrolled loop: the activation pairs of the token group
// (xb bytes: 64 for 16 tokens on Z registers, 32 for 8 on Y) into V6, then each row's
// weight pair broadcast into V7 and multiplied and added into row r's sums, register r.
#define BF16T_STEP(u, V6, V7, DP, xb) \
	VMOVUPS      (xb*u)(DI), V6 \
	VPBROADCASTD (4*u)(SI), V7 \
	DP(0) \
	VPBROADCASTD (4*u)(SI)(R8*1), V7 \
	DP(1) \
	VPBROADCASTD (4*u)(SI)(R8*2), V7 \
	DP(2) \
	VPBROADCASTD (4*u)(SI)(R9*1), V7 \
	DP(3) \
	VPBROADCASTD (4*u)(BX), V7 \
	DP(4) \
	VPBROADCASTD (4*u)(BX)(R8*1), V7 \
	DP(5)

#define BF16T_SETUP \
	MOVQ   w+0(FP), SI \
	MOVQ   ldw+8(FP), R8 \
	LEAQ   (R8)(R8*2), R9 \
	LEAQ   (SI)(R8*4), BX \
	MOVQ   xp+16(FP), DI \
	MOVQ   k2+24(FP), CX \
	MOVQ   acc+32(FP), DX \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	MOVQ   CX, AX \
	SHRQ   $2, AX

// func gemmBF16T16x6AVX512(w *byte, ldw int, xp *uint32, k2 int, acc *float32)   (k2 > 0)
// acc[r*16+t] = the pairwise sum over k2 column pairs of the BF16 row r at w+r*ldw with
// the activation pairs of token t (xp[q*16+t]), for rows r < 6 and tokens t < 16.
TEXT ·gemmBF16T16x6AVX512(SB), NOSPLIT, $0-40
	BF16T_SETUP
	JZ     b16tail

b16loop4:
	BF16T_STEP(0, Z6, Z7, DPBF16_Z, 64)
	BF16T_STEP(1, Z6, Z7, DPBF16_Z, 64)
	BF16T_STEP(2, Z6, Z7, DPBF16_Z, 64)
	BF16T_STEP(3, Z6, Z7, DPBF16_Z, 64)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $256, DI
	DECQ AX
	JNZ  b16loop4

b16tail:
	ANDQ $3, CX
	JZ   b16store

b16loop1:
	BF16T_STEP(0, Z6, Z7, DPBF16_Z, 64)
	ADDQ $4, SI
	ADDQ $4, BX
	ADDQ $64, DI
	DECQ CX
	JNZ  b16loop1

b16store:
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, 192(DX)
	VMOVUPS Z4, 256(DX)
	VMOVUPS Z5, 320(DX)
	VZEROUPPER
	RET

// func gemmBF16T8x6AVX512(w *byte, ldw int, xp *uint32, k2 int, acc *float32)   (k2 > 0)
// gemmBF16T16x6AVX512 for 8 tokens (xp[q*8+t], acc[r*8+t]).
TEXT ·gemmBF16T8x6AVX512(SB), NOSPLIT, $0-40
	BF16T_SETUP
	JZ     b8tail

b8loop4:
	BF16T_STEP(0, Y6, Y7, DPBF16_Y, 32)
	BF16T_STEP(1, Y6, Y7, DPBF16_Y, 32)
	BF16T_STEP(2, Y6, Y7, DPBF16_Y, 32)
	BF16T_STEP(3, Y6, Y7, DPBF16_Y, 32)
	ADDQ $16, SI
	ADDQ $16, BX
	ADDQ $128, DI
	DECQ AX
	JNZ  b8loop4

b8tail:
	ANDQ $3, CX
	JZ   b8store

b8loop1:
	BF16T_STEP(0, Y6, Y7, DPBF16_Y, 32)
	ADDQ $4, SI
	ADDQ $4, BX
	ADDQ $32, DI
	DECQ CX
	JNZ  b8loop1

b8store:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS Y4, 128(DX)
	VMOVUPS Y5, 160(DX)
	VZEROUPPER
	RET
