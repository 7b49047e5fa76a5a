//go:build amd64

#include "textflag.h"
#include "dot_amd64.h"

// The AVX-512 set's dot kernels of the K-quants: the avx2 kernels of dot_amd64.s on Z
// registers, each bit for bit equal to the one it replaces.
//
// The K-quant kernels keep avx2's integer lanes. Where dotQ4KAVX2 multiplies 32 quants by
// the activations (VPMADDUBSW, pairs of products in int16), scales the pairs (VPMADDWD)
// and adds them (VPADDD) into 8 int32 lanes, once per 32-byte half of a 64-element chunk,
// these kernels take both halves in one Z register and scale and add the pairs in one
// VPDPWSSD, the scale of each half picked out of a register of scales by VPERMW. Lane i of
// the low half and lane i of the high half then hold the sums of the same byte positions
// of different sub-blocks; adding the halves gives avx2's int32 lanes exactly (integer sums
// do not depend on order), and the float steps after them are avx2's.

// Word indices for VPERMW: 16 words of 0 then 16 of 1 (q4kIdx), and 8 words each of 0, 1,
// 2, 3 (q6kIdx).
DATA q4kIdx<>+0(SB)/8, $0x0000000000000000
DATA q4kIdx<>+8(SB)/8, $0x0000000000000000
DATA q4kIdx<>+16(SB)/8, $0x0000000000000000
DATA q4kIdx<>+24(SB)/8, $0x0000000000000000
DATA q4kIdx<>+32(SB)/8, $0x0001000100010001
DATA q4kIdx<>+40(SB)/8, $0x0001000100010001
DATA q4kIdx<>+48(SB)/8, $0x0001000100010001
DATA q4kIdx<>+56(SB)/8, $0x0001000100010001
GLOBL q4kIdx<>(SB), RODATA|NOPTR, $64

DATA q6kIdx<>+0(SB)/8, $0x0000000000000000
DATA q6kIdx<>+8(SB)/8, $0x0000000000000000
DATA q6kIdx<>+16(SB)/8, $0x0001000100010001
DATA q6kIdx<>+24(SB)/8, $0x0001000100010001
DATA q6kIdx<>+32(SB)/8, $0x0002000200020002
DATA q6kIdx<>+40(SB)/8, $0x0002000200020002
DATA q6kIdx<>+48(SB)/8, $0x0003000300030003
DATA q6kIdx<>+56(SB)/8, $0x0003000300030003
GLOBL q6kIdx<>(SB), RODATA|NOPTR, $64

// WORDS sets every int16 lane of Z register zr to the constant c (clobbers AX, X15).
#define WORDS(c, zr) \
	MOVL         c, AX \
	VMOVD        AX, X15 \
	VPBROADCASTW X15, zr

// Q4K_CHUNK512 adds to the int32 lanes of acc the products of the 64 elements of
// sub-blocks 2j and 2j+1 of a Q4_K super-block: their 32 nibble bytes at qoff(SI) (low
// nibbles sub-block 2j, high nibbles 2j+1), their activations the 64 bytes at xoff(DI),
// the scales of the two sub-blocks picked from Z4 by the word indices in idx (clobbers
// Z5, Z6; Z14 holds 0x0f bytes).
#define Q4K_CHUNK512(qoff, xoff, idx, acc) \
	VMOVDQU      qoff(SI), Y5 \
	VPSRLW       $4, Y5, Y6 \
	VINSERTI64X4 $1, Y6, Z5, Z5 \
	VPANDD       Z14, Z5, Z5 \
	VPMADDUBSW   xoff(DI), Z5, Z5 \
	VPERMW       Z4, idx, Z6 \
	VPDPWSSD     Z6, Z5, acc

// func dotQ4KAVX512(w, x *byte, nb int) float32
// dotQ4KAVX2 with Q4K_CHUNK512: Z8 and Z10 take alternate chunks; Z16-Z19 hold the word
// indices of chunks 0-3; Z4 the 8 scales as int16.
TEXT ·dotQ4KAVX512(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Z14 // 0x0f bytes
	VMOVDQU64    q4kIdx<>(SB), Z16
	WORDS($2, Z15)
	VPADDW       Z15, Z16, Z17
	VPADDW       Z15, Z17, Z18
	VPADDW       Z15, Z18, Z19

q4k512loop:
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	// d*dx, dmin*dx, the 6-bit scales (R8) and mins (R9).
	Q4K_HEAD
	VMOVQ     R8, X4
	VPMOVZXBW X4, X4
	Q4K_MINS

	VPXORD Z8, Z8, Z8
	VPXORD Z10, Z10, Z10
	Q4K_CHUNK512(16, 4, Z16, Z8)
	Q4K_CHUNK512(48, 68, Z17, Z10)
	Q4K_CHUNK512(80, 132, Z18, Z8)
	Q4K_CHUNK512(112, 196, Z19, Z10)
	VPADDD        Z10, Z8, Z8
	VEXTRACTI64X4 $1, Z8, Y10
	VPADDD        Y10, Y8, Y8
	VCVTDQ2PS     Y8, Y8
	VFMADD231PS   Y8, Y9, Y0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4k512loop

	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q6K_HALF512 adds to Z8 and Z3 the products of 128 elements of a Q6_K super-block: low
// bits ql at qloff(SI) (64 bytes), high bits qh at qhoff(SI) (32 bytes), activations the
// 128 bytes from xoff(DI); each 128-bit lane of products has its own scale, picked from
// Z4 by the word indices in idx0 (elements 0-63) and idx1 (64-127). The 6-bit quants are
// those of dotQ6KAVX2's Q6K_HALF, two of its registers in one (clobbers Z1, Z2, Z5-Z7,
// Z10, Z11; Z13 holds 0x30 bytes, Z14 0x0f bytes).
#define Q6K_HALF512(qloff, qhoff, xoff, idx0, idx1) \
	VMOVDQU64    qloff(SI), Z1 \
	VMOVDQU      qhoff(SI), Y5 \
	VPSLLW       $2, Y5, Y10 \
	VINSERTI64X4 $1, Y5, Z10, Z10 \
	VPSLLW       $2, Z10, Z11 \
	VPSRLW       $2, Z10, Z10 \
	VPANDD       Z13, Z11, Z11 \
	VPANDD       Z13, Z10, Z10 \
	VPSRLW       $4, Z1, Z2 \
	VPANDD       Z14, Z1, Z1 \
	VPANDD       Z14, Z2, Z2 \
	VPORD        Z11, Z1, Z1 \
	VPORD        Z10, Z2, Z2 \
	VPMADDUBSW   xoff(DI), Z1, Z1 \
	VPMADDUBSW   xoff+64(DI), Z2, Z2 \
	VPERMW       Z4, idx0, Z6 \
	VPERMW       Z4, idx1, Z7 \
	VPDPWSSD     Z6, Z1, Z8 \
	VPDPWSSD     Z7, Z2, Z3

// func dotQ6KAVX512(w, x *byte, nb int) float32
// dotQ6KAVX2 with Q6K_HALF512; Z16-Z19 hold the word indices of scales 0-3, 4-7, 8-11
// and 12-15; Z4 the 16 scales as int16.
TEXT ·dotQ6KAVX512(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Z14 // 0x0f bytes
	MOVL         $0x30, AX
	VMOVD        AX, X13
	VPBROADCASTB X13, Z13 // 0x30 bytes
	VMOVDQU64    q6kIdx<>(SB), Z16
	WORDS($4, Z15)
	VPADDW       Z15, Z16, Z17
	VPADDW       Z15, Z17, Z18
	VPADDW       Z15, Z18, Z19

q6k512loop:
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	PREFETCHT0 2240(SI)
	MOVWLZX      208(SI), AX
	VMOVD        AX, X9
	VCVTPH2PS    X9, X9
	VMULSS       (DI), X9, X9
	VBROADCASTSS X9, Y9 // d*dx

	// -32 * sum_k sc_k*bsum_k in the int32 lanes, as dotQ6KAVX2 has it.
	VPMOVSXBW 192(SI), Y4 // scales as int16
	VPMADDWD  260(DI), Y4, Y2
	VPSLLD    $5, Y2, Y2
	VPXORD    Z8, Z8, Z8
	VPXORD    Z3, Z3, Z3
	VPSUBD    Y2, Y8, Y8

	Q6K_HALF512(0, 128, 4, Z16, Z17)
	Q6K_HALF512(64, 160, 132, Z18, Z19)

	VPADDD        Z3, Z8, Z8
	VEXTRACTI64X4 $1, Z8, Y10
	VPADDD        Y10, Y8, Y8
	VCVTDQ2PS     Y8, Y8
	VFMADD231PS   Y8, Y9, Y0

	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6k512loop

	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q50_BLOCK512 is dot_amd64.s's Q50_BLOCK with the fifth bits of the quants loaded into a
// mask register: 0x10 is added to the nibbles of the lanes whose bit of qh is set, in one
// masked VPADDB where Q50_BLOCK spreads and tests the bits in five instructions (clobbers
// K1, X1, X3-X7).
#define Q50_BLOCK512(off, xoff, acc) \
	KMOVD        off+2(SI), K1 \
	Q50_NIBBLES(off) \
	VPADDB       Y10, Y3, K1, Y3 \
	Q50_PRODUCT(off, xoff, acc)

// func dotQ5_0AVX512(w, x *byte, nb int) float32   (nb > 0)
// dotQ5_0AVX2 with Q50_BLOCK512: the same int32 lanes and float steps, so the same bits.
TEXT ·dotQ5_0AVX512(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	VXORPS       Y8, Y8, Y8
	MOVL         $0x10101010, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10 // 0x10 bytes
	VPCMPEQW     Y15, Y15, Y15
	VPSRLW       $15, Y15, Y13 // int16 ones
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14 // 0x0f bytes

q50512loop2:
	CMPQ       CX, $2
	JLT        q50512tail
	PREFETCHT0 1024(SI)
	Q50_BLOCK512(0, 0, Y0)
	Q50_BLOCK512(22, 34, Y8)
	ADDQ       $44, SI
	ADDQ       $68, DI
	SUBQ       $2, CX
	JMP        q50512loop2

q50512tail:
	TESTQ CX, CX
	JZ    q50512done
	Q50_BLOCK512(0, 0, Y0)

q50512done:
	VADDPS Y8, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET
