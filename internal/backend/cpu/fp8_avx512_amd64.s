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

// func dot4FP8AVX512(w *byte, stride int, x *float32, n int, out *float32)
//
// Sets out[i] to the dot product of the n (a multiple of 16) E4M3 bytes of row i (rows
// stride bytes apart) with x, for 4 rows, unscaled: each byte becomes a float32 in four
// instructions (shifted to the top, arithmetic-shifted back 4 so that the sign stays in bit
// 31 and exponent and mantissa land in bits 20-26, masked, times 2^120, exact) and meets x's
// 16 values, loaded once for the 4 rows, in a multiply-add.
TEXT ·dot4FP8AVX512(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         stride+8(FP), BX
	MOVQ         x+16(FP), DX
	MOVQ         n+24(FP), CX
	MOVQ         out+32(FP), DI
	LEAQ         (SI)(BX*1), R8
	LEAQ         (R8)(BX*1), R9
	LEAQ         (R9)(BX*1), R10
	MOVL         $0x87F00000, AX
	VPBROADCASTD AX, Z14
	MOVL         $0x7B800000, AX // 2^120
	VPBROADCASTD AX, Z12
	VPXORD       Z0, Z0, Z0
	VPXORD       Z1, Z1, Z1
	VPXORD       Z2, Z2, Z2
	VPXORD       Z3, Z3, Z3
	XORQ         R11, R11

loop4:
	CMPQ        CX, $16
	JL          sum4
	VMOVUPS     (DX), Z4
	VPMOVZXBD   (SI)(R11*1), Z5
	VPMOVZXBD   (R8)(R11*1), Z6
	VPMOVZXBD   (R9)(R11*1), Z7
	VPMOVZXBD   (R10)(R11*1), Z8
	VPSLLD      $24, Z5, Z5
	VPSLLD      $24, Z6, Z6
	VPSLLD      $24, Z7, Z7
	VPSLLD      $24, Z8, Z8
	VPSRAD      $4, Z5, Z5
	VPSRAD      $4, Z6, Z6
	VPSRAD      $4, Z7, Z7
	VPSRAD      $4, Z8, Z8
	VPANDD      Z14, Z5, Z5
	VPANDD      Z14, Z6, Z6
	VPANDD      Z14, Z7, Z7
	VPANDD      Z14, Z8, Z8
	VMULPS      Z12, Z5, Z5
	VMULPS      Z12, Z6, Z6
	VMULPS      Z12, Z7, Z7
	VMULPS      Z12, Z8, Z8
	VFMADD231PS Z4, Z5, Z0
	VFMADD231PS Z4, Z6, Z1
	VFMADD231PS Z4, Z7, Z2
	VFMADD231PS Z4, Z8, Z3
	ADDQ        $16, R11
	ADDQ        $64, DX
	SUBQ        $16, CX
	JMP         loop4

sum4:
	VEXTRACTF64X4 $1, Z0, Y5
	VADDPS        Y5, Y0, Y0
	VEXTRACTF128  $1, Y0, X5
	VADDPS        X5, X0, X0
	VHADDPS       X0, X0, X0
	VHADDPS       X0, X0, X0
	VMOVSS        X0, (DI)
	VEXTRACTF64X4 $1, Z1, Y5
	VADDPS        Y5, Y1, Y1
	VEXTRACTF128  $1, Y1, X5
	VADDPS        X5, X1, X1
	VHADDPS       X1, X1, X1
	VHADDPS       X1, X1, X1
	VMOVSS        X1, 4(DI)
	VEXTRACTF64X4 $1, Z2, Y5
	VADDPS        Y5, Y2, Y2
	VEXTRACTF128  $1, Y2, X5
	VADDPS        X5, X2, X2
	VHADDPS       X2, X2, X2
	VHADDPS       X2, X2, X2
	VMOVSS        X2, 8(DI)
	VEXTRACTF64X4 $1, Z3, Y5
	VADDPS        Y5, Y3, Y3
	VEXTRACTF128  $1, Y3, X5
	VADDPS        X5, X3, X3
	VHADDPS       X3, X3, X3
	VHADDPS       X3, X3, X3
	VMOVSS        X3, 12(DI)
	VZEROUPPER
	RET
