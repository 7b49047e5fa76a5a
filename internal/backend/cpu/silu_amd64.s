#include "textflag.h"

// func siluCombineAVX2(out, gate, up, e *float32, n int)
// out[i] = gate[i] / (1 + e[i]) * up[i] for i < n (a multiple of 8); out may be gate or up.
TEXT ·siluCombineAVX2(SB), NOSPLIT, $0-40
	MOVQ         out+0(FP), DI
	MOVQ         gate+8(FP), SI
	MOVQ         up+16(FP), DX
	MOVQ         e+24(FP), BX
	MOVQ         n+32(FP), CX
	MOVL         $0x3f800000, AX
	MOVL         AX, X15
	VBROADCASTSS X15, Y15

siluloop:
	CMPQ    CX, $8
	JLT     siludone
	VADDPS  (BX), Y15, Y0
	VMOVUPS (SI), Y1
	VDIVPS  Y0, Y1, Y1
	VMULPS  (DX), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, BX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     siluloop

siludone:
	VZEROUPPER
	RET
