//go:build amd64

#include "textflag.h"

// func storeQ0Tile16AVX512(out *float32, ldo int, acc *float32)
// Writes a whole tile of the many-token Q8_0/Q4_0 path, q0Rows = 4 rows of gemmWide = 16
// tokens (acc[r*16+t]), to out, token t's 4 rows at out[t*ldo:], as storeQ0Tile does: the
// four rows are transposed in each 128-bit lane (token 4k+j's column in lane k of
// register 8+j), then each lane is stored.
TEXT ·storeQ0Tile16AVX512(SB), NOSPLIT, $0-24
	MOVQ out+0(FP), DI
	MOVQ ldo+8(FP), R8
	MOVQ acc+16(FP), SI
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	MOVQ R8, R10
	SHLQ $2, R10
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VUNPCKLPS Z1, Z0, Z4
	VUNPCKHPS Z1, Z0, Z5
	VUNPCKLPS Z3, Z2, Z6
	VUNPCKHPS Z3, Z2, Z7
	VUNPCKLPD Z6, Z4, Z8
	VUNPCKHPD Z6, Z4, Z9
	VUNPCKLPD Z7, Z5, Z10
	VUNPCKHPD Z7, Z5, Z11
	VMOVUPS X8, (DI)
	VMOVUPS X9, (DI)(R8*1)
	VMOVUPS X10, (DI)(R8*2)
	VMOVUPS X11, (DI)(R9*1)
	ADDQ R10, DI
	VEXTRACTF32X4 $1, Z8, (DI)
	VEXTRACTF32X4 $1, Z9, (DI)(R8*1)
	VEXTRACTF32X4 $1, Z10, (DI)(R8*2)
	VEXTRACTF32X4 $1, Z11, (DI)(R9*1)
	ADDQ R10, DI
	VEXTRACTF32X4 $2, Z8, (DI)
	VEXTRACTF32X4 $2, Z9, (DI)(R8*1)
	VEXTRACTF32X4 $2, Z10, (DI)(R8*2)
	VEXTRACTF32X4 $2, Z11, (DI)(R9*1)
	ADDQ R10, DI
	VEXTRACTF32X4 $3, Z8, (DI)
	VEXTRACTF32X4 $3, Z9, (DI)(R8*1)
	VEXTRACTF32X4 $3, Z10, (DI)(R8*2)
	VEXTRACTF32X4 $3, Z11, (DI)(R9*1)
	VZEROUPPER
	RET
