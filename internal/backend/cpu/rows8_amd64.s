//go:build amd64

#include "textflag.h"

// The 8-row kernels of Q8_0 and Q4_0 weights against Q8_0 activations (see
// dotQ8_0Generic for the arithmetic they reproduce). Rows 0..3 are at SI, SI+R8, SI+2*R8,
// SI+R9 (R9 = 3*stride), rows 4..7 the same from R11 = SI+4*stride; the activation block is
// at DI. Per block, each row's products are summed in integers, the 8 rows' sums are folded
// by pairwise adds into one vector of int32 lanes (lane r = row r), converted, multiplied by
// the 8 exact scale products d_r*dx and added to the accumulator Y10: so every lane sums its
// row's blocks in order with a separate multiply and add, as the scalar reference does.

// ROWS8_SCALES leaves in Y9 the products d_r*dx of the current block, d_r the f16 at the
// start of row r's block and dx the f16 at (DI) (clobbers AX, BX, R12, R13, X6).
#define ROWS8_SCALES \
	MOVWLZX      (SI), AX \
	MOVWLZX      (SI)(R8*1), BX \
	SHLL         $16, BX \
	ORL          BX, AX \
	MOVWLZX      (SI)(R8*2), BX \
	MOVWLZX      (SI)(R9*1), R13 \
	SHLL         $16, R13 \
	ORL          R13, BX \
	SHLQ         $32, BX \
	ORQ          BX, AX \
	MOVWLZX      (R11), R12 \
	MOVWLZX      (R11)(R8*1), BX \
	SHLL         $16, BX \
	ORL          BX, R12 \
	MOVWLZX      (R11)(R8*2), BX \
	MOVWLZX      (R11)(R9*1), R13 \
	SHLL         $16, R13 \
	ORL          R13, BX \
	SHLQ         $32, BX \
	ORQ          BX, R12 \
	VMOVQ        AX, X9 \
	VPINSRQ      $1, R12, X9, X9 \
	VCVTPH2PS    X9, Y9 \
	VPBROADCASTW (DI), X6 \
	VCVTPH2PS    X6, Y6 \
	VMULPS       Y6, Y9, Y9

// ROWS8_PAIR and ROWS8_QUAD fold the int32 sums of the rows in registers by interleaving
// adds (integer sums: any order gives the same bits), one shuffle port uop each where
// VPHADDD takes several. ROWS8_PAIR leaves in a, per 128-bit half, [a0+a2, b0+b2, a1+a3,
// b1+b3] (the lanes of that half); ROWS8_QUAD, given two such pairs (rows r, r+1 in a and
// r+2, r+3 in b), leaves in a the four rows' sums over each half (clobbers tmp).
#define ROWS8_PAIR(a, b, tmp) \
	VPUNPCKLDQ b, a, tmp \
	VPUNPCKHDQ b, a, a \
	VPADDD     tmp, a, a

#define ROWS8_QUAD(a, b, tmp) \
	VPUNPCKLQDQ b, a, tmp \
	VPUNPCKHQDQ b, a, a \
	VPADDD      tmp, a, a

// ROWS8_FOLD folds the 8 int32 lanes of the rows' sums, rows 0..3 pairwise-added into Y0
// (lanes: row 0..3 over the low 16 elements, then over the high 16) and rows 4..7 into Y1,
// into Y0 lane r = row r, and adds them times the scales in Y9 to Y10 (clobbers Y2, Y3).
#define ROWS8_FOLD \
	VPERM2I128 $0x21, Y1, Y0, Y2 \
	VPBLENDD   $0xf0, Y1, Y0, Y3 \
	VPADDD     Y3, Y2, Y0 \
	VCVTDQ2PS  Y0, Y0 \
	VMULPS     Y9, Y0, Y0 \
	VADDPS     Y0, Y10, Y10

// Q80_R8 leaves in dst the 8 int32 pair sums of the Q8_0 quants at wq times the activation
// quants in Y4: |w| (unsigned) times x signed by w, pairs to int16 (exact while x is in
// [-127, 127]), then pairs to int32 (clobbers Y7, Y8; Y15 holds int16 ones).
#define Q80_R8(wq, dst) \
	VMOVDQU    wq, Y7 \
	VPSIGNB    Y7, Y4, Y8 \
	VPABSB     Y7, Y7 \
	VPMADDUBSW Y8, Y7, Y7 \
	VPMADDWD   Y15, Y7, dst

// ROWS8_ARGS loads the arguments of an 8-row Q8_0 kernel into the registers the macros
// above use (SI, R8, R9, R11, DI, CX; R10 the next 8 rows) and zeroes the row sums Y10.
#define ROWS8_ARGS \
	MOVQ   w+0(FP), SI \
	MOVQ   stride+8(FP), R8 \
	MOVQ   x+16(FP), DI \
	MOVQ   nb+24(FP), CX \
	LEAQ   (R8)(R8*2), R9 \
	LEAQ   (SI)(R8*4), R11 \
	LEAQ   (R11)(R8*4), R10 \
	VXORPS Y10, Y10, Y10

// ROWS8_PREFETCH asks for 8 blocks' worth (272 bytes) of the next 8 rows at R10.
#define ROWS8_PREFETCH \
	PREFETCHT1 (R10) \
	PREFETCHT1 64(R10) \
	PREFETCHT1 128(R10) \
	PREFETCHT1 192(R10) \
	PREFETCHT1 256(R10) \
	ADDQ       $272, R10

// ROWS8_Q80 sums the current block of the 8 rows with the activations in Y4 by the row
// macro R (Q80_R8 or Q80_R8_VNNI), folds the sums and adds them, scaled, to Y10 (clobbers
// Y0..Y3, Y5 and what R clobbers).
#define ROWS8_Q80(R) \
	R(2(SI), Y0) \
	R(2(SI)(R8*1), Y1) \
	ROWS8_PAIR(Y0, Y1, Y2) \
	R(2(SI)(R8*2), Y1) \
	R(2(SI)(R9*1), Y2) \
	ROWS8_PAIR(Y1, Y2, Y3) \
	ROWS8_QUAD(Y0, Y1, Y2) \
	R(2(R11), Y1) \
	R(2(R11)(R8*1), Y2) \
	ROWS8_PAIR(Y1, Y2, Y3) \
	R(2(R11)(R8*2), Y2) \
	R(2(R11)(R9*1), Y3) \
	ROWS8_PAIR(Y2, Y3, Y5) \
	ROWS8_QUAD(Y1, Y2, Y3) \
	ROWS8_FOLD

// func rows8Q8_0AVX2(w *byte, stride int, x *byte, nb int, out *float32)   (nb > 0)
// R10 walks the next 8 rows (contiguous when stride is the row size), prefetched 8 blocks'
// worth (272 bytes) per block.
TEXT ·rows8Q8_0AVX2(SB), NOSPLIT, $0-40
	ROWS8_ARGS
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15

q80r8loop:
	ROWS8_PREFETCH
	ROWS8_SCALES
	VMOVDQU 2(DI), Y4
	ROWS8_Q80(Q80_R8)
	ADDQ    $34, SI
	ADDQ    $34, R11
	ADDQ    $34, DI
	DECQ    CX
	JNZ     q80r8loop

	MOVQ    out+32(FP), DX
	VMOVUPS Y10, (DX)
	VZEROUPPER
	RET

// Q80_R8_VNNI is Q80_R8 with VNNI: VPDPBUSD multiplies unsigned by signed bytes, so the
// weights are shifted to w+128 (w XOR 0x80, in [0, 255]) and the sums start from Y14 =
// -128 times the activations' sums of 4, which the shift adds back: each lane ends as the
// exact sum of 4 products w*x, in one multiply-add where Q80_R8 takes four instructions
// (clobbers Y7; Y13 holds 0x80 bytes).
#define Q80_R8_VNNI(wq, dst) \
	VPXORD    wq, Y13, Y7 \
	VMOVDQA64 Y14, dst \
	VPDPBUSD  Y4, Y7, dst

// func rows8Q8_0VNNI(w *byte, stride int, x *byte, nb int, out *float32)   (nb > 0)
// rows8Q8_0AVX2 with Q80_R8_VNNI; per block, Y14 is set from the activations once for the
// 8 rows (Y12 holds zero).
TEXT ·rows8Q8_0VNNI(SB), NOSPLIT, $0-40
	ROWS8_ARGS
	VPXORD       Y12, Y12, Y12
	MOVL         $0x80808080, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13

q80r8vnniloop:
	ROWS8_PREFETCH
	ROWS8_SCALES
	VMOVDQU  2(DI), Y4
	VPXORD   Y14, Y14, Y14
	VPDPBUSD Y4, Y13, Y14
	VPSUBD   Y14, Y12, Y14
	ROWS8_Q80(Q80_R8_VNNI)
	ADDQ    $34, SI
	ADDQ    $34, R11
	ADDQ    $34, DI
	DECQ    CX
	JNZ     q80r8vnniloop

	MOVQ    out+32(FP), DX
	VMOVUPS Y10, (DX)
	VZEROUPPER
	RET

// ROWS4_SETUP prepares a 4-row kernel whose arguments are loaded: rows at SI,
// SI+R8, SI+2*R8, SI+R9 (it sets R9); activations at DI; CX blocks; output at DX. It zeroes
// the accumulators Y0..Y3 and sets Y15 to int16 ones.
#define ROWS4_SETUP \
	LEAQ     (R8)(R8*2), R9 \
	VXORPS   Y0, Y0, Y0 \
	VXORPS   Y1, Y1, Y1 \
	VXORPS   Y2, Y2, Y2 \
	VXORPS   Y3, Y3, Y3 \
	VPCMPEQW Y15, Y15, Y15 \
	VPSRLW   $15, Y15, Y15

// ROWS4_SCALES2 leaves in Y9 the 8 scale products of the next two blocks of the 4 rows:
// lanes 0..3 d_i*dx for block 0 of rows i = 0..3 (d_i the f16 at (SI)+i*stride, dx the f16
// at (DI)), lanes 4..7 the same for block 1 (weights wb bytes and activations 34 bytes
// further) (clobbers AX, BX, R10, R11, X6, X7).
#define ROWS4_SCALES2(wb) \
	MOVWLZX      (SI), AX \
	MOVWLZX      (SI)(R8*1), BX \
	SHLL         $16, BX \
	ORL          BX, AX \
	MOVWLZX      (SI)(R8*2), BX \
	MOVWLZX      (SI)(R9*1), R10 \
	SHLL         $16, R10 \
	ORL          R10, BX \
	SHLQ         $32, BX \
	ORQ          BX, AX \
	MOVWLZX      wb(SI), R11 \
	MOVWLZX      wb(SI)(R8*1), BX \
	SHLL         $16, BX \
	ORL          BX, R11 \
	MOVWLZX      wb(SI)(R8*2), BX \
	MOVWLZX      wb(SI)(R9*1), R10 \
	SHLL         $16, R10 \
	ORL          R10, BX \
	SHLQ         $32, BX \
	ORQ          BX, R11 \
	VMOVQ        AX, X9 \
	VPINSRQ      $1, R11, X9, X9 \
	VCVTPH2PS    X9, Y9 \
	VPBROADCASTW (DI), X6 \
	VPBROADCASTW 34(DI), X7 \
	VPBLENDD     $0x0c, X7, X6, X6 \
	VCVTPH2PS    X6, Y6 \
	VMULPS       Y6, Y9, Y9

// ROWS4_SCALES1 is ROWS4_SCALES2 for the last, single block: lanes 4..7 of Y9 are zero.
#define ROWS4_SCALES1 \
	MOVWLZX      (SI), AX \
	MOVWLZX      (SI)(R8*1), BX \
	SHLL         $16, BX \
	ORL          BX, AX \
	MOVWLZX      (SI)(R8*2), BX \
	MOVWLZX      (SI)(R9*1), R10 \
	SHLL         $16, R10 \
	ORL          R10, BX \
	SHLQ         $32, BX \
	ORQ          BX, AX \
	VMOVQ        AX, X9 \
	VCVTPH2PS    X9, Y9 \
	VPBROADCASTW (DI), X6 \
	VCVTPH2PS    X6, Y6 \
	VMULPS       Y6, Y9, Y9

// Q40_LOAD, Q40_LOAD_HI and Q40_ROW leave in yp the int16 sums over two Q4_0 blocks of
// one row times the activations. The 16 nibble bytes of block 0 (at w0) and block 1 (w1)
// share one register, block 0 in the low lane (Q40_LOAD_HI inserts block 1; without it the
// high lane stays zero): their low nibbles (elements 0..15) meet the activations in Y4,
// their high nibbles (16..31) those in Y5, laid out the same way. (q in 0..15)*x pairs of
// both halves are added, less the 8*x pairs in Y12, so that every int16 lane sums 4
// products (q-8)*x: |lane| <= 4064 (clobbers Y8).
#define Q40_LOAD(w0, xp) VMOVDQU w0, xp

#define Q40_LOAD_HI(w1, yp) VINSERTI128 $1, w1, yp, yp

#define Q40_ROW(yp) \
	VPSRLW     $4, yp, Y8 \
	VPAND      Y14, yp, yp \
	VPAND      Y14, Y8, Y8 \
	VPMADDUBSW Y4, yp, yp \
	VPMADDUBSW Y5, Y8, Y8 \
	VPADDW     Y8, yp, yp \
	VPSUBW     Y12, yp, yp

// Q40_REDUCE folds the int16 sums of rows 0..3 in Y0..Y3 by pairwise adds into int32 lanes
// r0 r1 r2 r3 per block (block 0 in lanes 0..3, block 1 in 4..7; no int16 partial sum
// exceeds 4*4064), converts them, multiplies them by the scale products in Y9 and adds
// block 0's four products, then block 1's, to the row sums in X11 (clobbers X1).
#define Q40_REDUCE \
	VPHADDW      Y1, Y0, Y0 \
	VPHADDW      Y3, Y2, Y2 \
	VPHADDW      Y2, Y0, Y0 \
	VPMADDWD     Y15, Y0, Y0 \
	VCVTDQ2PS    Y0, Y0 \
	VMULPS       Y9, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X0, X11, X11 \
	VADDPS       X1, X11, X11

// Q40_X2 loads the activations of the next two blocks: elements 0..15 of both blocks in Y4
// (block 0 in the low lane), 16..31 in Y5, and their 8*x pair sums in Y12.
#define Q40_X2 \
	VMOVDQU      2(DI), X4 \
	VINSERTI128  $1, 36(DI), Y4, Y4 \
	VMOVDQU      18(DI), X5 \
	VINSERTI128  $1, 52(DI), Y5, Y5 \
	VPMADDUBSW   Y4, Y13, Y6 \
	VPMADDUBSW   Y5, Y13, Y12 \
	VPADDW       Y6, Y12, Y12

// Q40_CONSTS zeroes the row sums X11, sets Y14 to 0x0f bytes and Y13 to 8s, and points R12
// at the next 4 rows, prefetched 144 bytes per iteration (clobbers AX).
#define Q40_CONSTS \
	VXORPS       Y11, Y11, Y11 \
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X14 \
	VPBROADCASTD X14, Y14 \
	MOVL         $0x08080808, AX \
	VMOVD        AX, X13 \
	VPBROADCASTD X13, Y13 \
	LEAQ         (SI)(R8*4), R12

// func rows4Q4_0AVX2(w *byte, stride int, x *byte, nb int, out *float32)   (nb > 0)
// out[i] = dot of the Q4_0 row at w+i*stride with the Q8_0 activations x, for i < 4, as
// dotQ4_0Generic computes it, two blocks per iteration (the 8 int16 fold rounds of
// rows8Q8_0AVX2 would cost more here): X11 holds the sums of rows 0..3, to which each
// block's four products are added in block order.
TEXT ·rows4Q4_0AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), R8
	MOVQ x+16(FP), DI
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), DX
	ROWS4_SETUP
	Q40_CONSTS

q40r4loop:
	CMPQ         CX, $2
	JLT          q40r4tail
	PREFETCHT0   (R12)
	PREFETCHT0   64(R12)
	PREFETCHT0   128(R12)
	ADDQ         $144, R12
	ROWS4_SCALES2(18)
	Q40_X2
	Q40_LOAD(2(SI), X0)
	Q40_LOAD_HI(20(SI), Y0)
	Q40_ROW(Y0)
	Q40_LOAD(2(SI)(R8*1), X1)
	Q40_LOAD_HI(20(SI)(R8*1), Y1)
	Q40_ROW(Y1)
	Q40_LOAD(2(SI)(R8*2), X2)
	Q40_LOAD_HI(20(SI)(R8*2), Y2)
	Q40_ROW(Y2)
	Q40_LOAD(2(SI)(R9*1), X3)
	Q40_LOAD_HI(20(SI)(R9*1), Y3)
	Q40_ROW(Y3)
	Q40_REDUCE
	ADDQ         $36, SI
	ADDQ         $68, DI
	SUBQ         $2, CX
	JMP          q40r4loop

q40r4tail:
	CMPQ         CX, $0
	JEQ          q40r4done
	ROWS4_SCALES1
	VMOVDQU      2(DI), X4
	VMOVDQU      18(DI), X5
	VPMADDUBSW   Y4, Y13, Y6
	VPMADDUBSW   Y5, Y13, Y12
	VPADDW       Y6, Y12, Y12
	Q40_LOAD(2(SI), X0)
	Q40_ROW(Y0)
	Q40_LOAD(2(SI)(R8*1), X1)
	Q40_ROW(Y1)
	Q40_LOAD(2(SI)(R8*2), X2)
	Q40_ROW(Y2)
	Q40_LOAD(2(SI)(R9*1), X3)
	Q40_ROW(Y3)
	VPHADDW      Y1, Y0, Y0
	VPHADDW      Y3, Y2, Y2
	VPHADDW      Y2, Y0, Y0
	VPMADDWD     Y15, Y0, Y0
	VCVTDQ2PS    Y0, Y0
	VMULPS       Y9, Y0, Y0
	VADDPS       X0, X11, X11

q40r4done:
	VMOVUPS      X11, (DX)
	VZEROUPPER
	RET


// Q40_X2_VNNI is Q40_X2 for the VNNI kernel: the activations of the next two blocks in Y4
// and Y5 as there, and in Y12 the int32 start of every row's sums, -8 times the
// activations' sums of 4 (both halves), which the unsigned nibbles' offset of 8 takes back
// (Y13 holds 8s, Y20 zero).
#define Q40_X2_VNNI \
	VMOVDQU     2(DI), X4 \
	VINSERTI128 $1, 36(DI), Y4, Y4 \
	VMOVDQU     18(DI), X5 \
	VINSERTI128 $1, 52(DI), Y5, Y5 \
	VPXORD      Y12, Y12, Y12 \
	VPDPBUSD    Y4, Y13, Y12 \
	VPDPBUSD    Y5, Y13, Y12 \
	VPSUBD      Y12, Y20, Y12

// Q40_ROW_VNNI leaves in acc the exact int32 sums of 4 products (q-8)*x of one row's two
// blocks loaded in yp (as Q40_ROW takes them): the nibbles q (unsigned) times the
// activations, multiplied and added by VPDPBUSD onto Y12 (clobbers yp, Y8).
#define Q40_ROW_VNNI(yp, acc) \
	VPSRLW    $4, yp, Y8 \
	VPAND     Y14, yp, yp \
	VPAND     Y14, Y8, Y8 \
	VMOVDQA64 Y12, acc \
	VPDPBUSD  Y4, yp, acc \
	VPDPBUSD  Y5, Y8, acc

// Q40_FOLD_VNNI folds the int32 sums of rows 0..3 in Y16..Y19 into Y16, lanes r0 r1 r2 r3
// per block (block 0 in lanes 0..3, block 1 in 4..7), converts them and multiplies them by
// the scale products in Y9 (clobbers Y18, Y21).
#define Q40_FOLD_VNNI \
	ROWS8_PAIR(Y16, Y17, Y21) \
	ROWS8_PAIR(Y18, Y19, Y21) \
	ROWS8_QUAD(Y16, Y18, Y21) \
	VCVTDQ2PS Y16, Y16 \
	VMULPS    Y9, Y16, Y16

// func rows4Q4_0VNNI(w *byte, stride int, x *byte, nb int, out *float32)   (nb > 0)
// rows4Q4_0AVX2 with VNNI: each row's two blocks are one VPDPBUSD per half onto int32
// sums, folded by the integer adds of rows8Q8_0AVX2 (no int16 stage, no VPHADDW), then
// added in block order to the row sums in X11.
TEXT ·rows4Q4_0VNNI(SB), NOSPLIT, $0-40
	MOVQ         w+0(FP), SI
	MOVQ         stride+8(FP), R8
	MOVQ         x+16(FP), DI
	MOVQ         nb+24(FP), CX
	MOVQ         out+32(FP), DX
	LEAQ         (R8)(R8*2), R9
	VPXORD       Y20, Y20, Y20
	Q40_CONSTS

q40r4vloop:
	CMPQ       CX, $2
	JLT        q40r4vtail
	PREFETCHT0 (R12)
	PREFETCHT0 64(R12)
	PREFETCHT0 128(R12)
	ADDQ       $144, R12
	ROWS4_SCALES2(18)
	Q40_X2_VNNI
	Q40_LOAD(2(SI), X0)
	Q40_LOAD_HI(20(SI), Y0)
	Q40_ROW_VNNI(Y0, Y16)
	Q40_LOAD(2(SI)(R8*1), X1)
	Q40_LOAD_HI(20(SI)(R8*1), Y1)
	Q40_ROW_VNNI(Y1, Y17)
	Q40_LOAD(2(SI)(R8*2), X2)
	Q40_LOAD_HI(20(SI)(R8*2), Y2)
	Q40_ROW_VNNI(Y2, Y18)
	Q40_LOAD(2(SI)(R9*1), X3)
	Q40_LOAD_HI(20(SI)(R9*1), Y3)
	Q40_ROW_VNNI(Y3, Y19)
	Q40_FOLD_VNNI
	VEXTRACTF32X4 $1, Y16, X1
	VADDPS        X16, X11, X11
	VADDPS        X1, X11, X11
	ADDQ          $36, SI
	ADDQ          $68, DI
	SUBQ          $2, CX
	JMP           q40r4vloop

q40r4vtail:
	CMPQ     CX, $0
	JEQ      q40r4vdone
	ROWS4_SCALES1
	VMOVDQU  2(DI), X4
	VMOVDQU  18(DI), X5
	VPXORD   Y12, Y12, Y12
	VPDPBUSD Y4, Y13, Y12
	VPDPBUSD Y5, Y13, Y12
	VPSUBD   Y12, Y20, Y12
	Q40_LOAD(2(SI), X0)
	Q40_ROW_VNNI(Y0, Y16)
	Q40_LOAD(2(SI)(R8*1), X1)
	Q40_ROW_VNNI(Y1, Y17)
	Q40_LOAD(2(SI)(R8*2), X2)
	Q40_ROW_VNNI(Y2, Y18)
	Q40_LOAD(2(SI)(R9*1), X3)
	Q40_ROW_VNNI(Y3, Y19)
	Q40_FOLD_VNNI
	VADDPS   X16, X11, X11

q40r4vdone:
	VMOVUPS X11, (DX)
	VZEROUPPER
	RET
