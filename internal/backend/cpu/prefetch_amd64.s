//go:build amd64

#include "textflag.h"

// func prefetchRowsT0(p *byte, stride, rows, lines int)
// Prefetches (PREFETCHT0) lines cache lines of 64 bytes from the start of each of rows
// rows, stride bytes apart, starting at p (rows, lines > 0). A prefetch never faults.
TEXT ·prefetchRowsT0(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), R8
	MOVQ rows+16(FP), CX
	MOVQ lines+24(FP), DX

prefrow:
	MOVQ SI, AX
	MOVQ DX, BX

prefline:
	PREFETCHT0 (AX)
	ADDQ       $64, AX
	DECQ       BX
	JNZ        prefline
	ADDQ       R8, SI
	DECQ       CX
	JNZ        prefrow
	RET
