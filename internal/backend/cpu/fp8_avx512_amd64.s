//go:build amd64

#include "textflag.h"

// func dequantFP8AVX512(dst *float32, src *byte, n int, scale float32)
//
// Widens n (a multiple of 16) E4M3 bytes to float32 times scale, 16 a step: each byte's
// exponent and mantissa (bits 0-6) are moved to bits 20-26 of a float32, whose value is
// then the E4M3 magnitude times 2^-120 (a denormal for the E4M3 subnormals, exact either
// way), multiplied by 2^120 (exact), given the byte's sign and multiplied by the scale:
// one rounding, the product dequantFP8Generic computes through its table.
TEXT ·dequantFP8AVX512(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Z15
	MOVL         $0x07F00000, AX
	VPBROADCASTD AX, Z14
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z13
	MOVL         $0x7B800000, AX // 2^120
	VPBROADCASTD AX, Z12

loop:
	CMPQ      CX, $16
	JL        done
	VPMOVZXBD (SI), Z1
	VPSLLD    $20, Z1, Z2
	VPANDD    Z14, Z2, Z2
	VPSLLD    $24, Z1, Z3
	VPANDD    Z13, Z3, Z3
	VMULPS    Z12, Z2, Z2
	VPORD     Z3, Z2, Z2
	VMULPS    Z15, Z2, Z2
	VMOVUPS   Z2, (DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       loop

done:
	VZEROUPPER
	RET
