//go:build amd64

#include "textflag.h"
#include "dot_amd64.h"

// func cpuidECX1() uint32
TEXT ·cpuidECX1(SB), NOSPLIT, $0-4
	MOVL $1, AX
	XORL CX, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET

// func cpuidVendor() (ebx, edx, ecx uint32)
TEXT ·cpuidVendor(SB), NOSPLIT, $0-12
	XORL AX, AX
	XORL CX, CX
	CPUID
	MOVL BX, ebx+0(FP)
	MOVL DX, edx+4(FP)
	MOVL CX, ecx+8(FP)
	RET

// func dotF32AVX2(w, x *float32, n int) float32   (n % 8 == 0)
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f32loop32:
	CMPQ CX, $32
	JLT  f32loop8
	PREFETCHT0  1024(SI)
	PREFETCHT0  1088(SI)
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         f32loop32

f32loop8:
	CMPQ CX, $8
	JLT  f32done
	VMOVUPS     (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         f32loop8

f32done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func dotF16AVX2(w *byte, x *float32, n int) float32   (n % 8 == 0)
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f16loop32:
	CMPQ CX, $32
	JLT  f16loop8
	PREFETCHT0  1024(SI)
	VCVTPH2PS   (SI), Y4
	VCVTPH2PS   16(SI), Y5
	VCVTPH2PS   32(SI), Y6
	VCVTPH2PS   48(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         f16loop32

f16loop8:
	CMPQ CX, $8
	JLT  f16done
	VCVTPH2PS   (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         f16loop8

f16done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func dotBF16AVX2(w *byte, x *float32, n int) float32   (n % 8 == 0)
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

bf16loop32:
	CMPQ CX, $32
	JLT  bf16loop8
	PREFETCHT0  1024(SI)
	VPMOVZXWD   (SI), Y4
	VPMOVZXWD   16(SI), Y5
	VPMOVZXWD   32(SI), Y6
	VPMOVZXWD   48(SI), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         bf16loop32

bf16loop8:
	CMPQ CX, $8
	JLT  bf16done
	VPMOVZXWD   (SI), Y4
	VPSLLD      $16, Y4, Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ        $16, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         bf16loop8

bf16done:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS  X0, ret+24(FP)
	RET

// func axpyAVX2(y *float32, a float32, x *float32, n int)   (n % 8 == 0)
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), DI
	VBROADCASTSS a+8(FP), Y15
	MOVQ         x+16(FP), SI
	MOVQ         n+24(FP), CX

axpyloop32:
	CMPQ CX, $32
	JLT  axpyloop8
	VMOVUPS     (DI), Y0
	VMOVUPS     32(DI), Y1
	VMOVUPS     64(DI), Y2
	VMOVUPS     96(DI), Y3
	VFMADD231PS (SI), Y15, Y0
	VFMADD231PS 32(SI), Y15, Y1
	VFMADD231PS 64(SI), Y15, Y2
	VFMADD231PS 96(SI), Y15, Y3
	VMOVUPS     Y0, (DI)
	VMOVUPS     Y1, 32(DI)
	VMOVUPS     Y2, 64(DI)
	VMOVUPS     Y3, 96(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         axpyloop32

axpyloop8:
	CMPQ CX, $8
	JLT  axpydone
	VMOVUPS     (DI), Y0
	VFMADD231PS (SI), Y15, Y0
	VMOVUPS     Y0, (DI)
	ADDQ        $32, SI
	ADDQ        $32, DI
	SUBQ        $8, CX
	JMP         axpyloop8

axpydone:
	VZEROUPPER
	RET

// Q4K_CHUNK handles 64 elements (sub-blocks 2j and 2j+1) of a Q4_K super-block: qs at
// qoff(SI), their q8 at xoff(DI) and xoff+32(DI), int16 scales at soff(SP) and soff+2(SP);
// adds the scaled int32 sums to Y8.
#define Q4K_CHUNK(qoff, xoff, xoff2, soff, soff2) \
	VMOVDQU      qoff(SI), Y1 \
	VPSRLW       $4, Y1, Y2 \
	VPAND        Y14, Y1, Y1 \
	VPAND        Y14, Y2, Y2 \
	VPMADDUBSW   xoff(DI), Y1, Y1 \
	VPMADDUBSW   xoff2(DI), Y2, Y2 \
	VPBROADCASTW soff(SP), Y3 \
	VPBROADCASTW soff2(SP), Y4 \
	VPMADDWD     Y3, Y1, Y1 \
	VPMADDWD     Y4, Y2, Y2 \
	VPADDD       Y1, Y8, Y8 \
	VPADDD       Y2, Y8, Y8

// func dotQ4KAVX2(w, x *byte, nb int) float32
// Y0: float accumulator; Y8: int32 sums of one super-block; 0(SP): its 8 scales as int16.
TEXT ·dotQ4KAVX2(SB), NOSPLIT, $16-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Y14 // 0x0f bytes

q4kloop:
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	// d*dx, dmin*dx, the 6-bit scales (R8) and mins (R9).
	Q4K_HEAD

	// Scales as int16 to 0(SP).
	VMOVQ     R8, X1
	VPMOVZXBW X1, X1
	VMOVDQU   X1, 0(SP)

	// Mins: m_j * (bsums[2j] + bsums[2j+1]) in int32 lanes; subtract dmin * that.
	Q4K_MINS

	VPXOR Y8, Y8, Y8
	Q4K_CHUNK(16, 4, 36, 0, 2)
	Q4K_CHUNK(48, 68, 100, 4, 6)
	Q4K_CHUNK(80, 132, 164, 8, 10)
	Q4K_CHUNK(112, 196, 228, 12, 14)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y8, Y9, Y0

	ADDQ $144, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q4kloop

	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q5K_CHUNK is Q4K_CHUNK for a Q5_K super-block: the fifth bits of sub-blocks 2j and 2j+1
// are bits 0 and 1 of the qh bytes in Y12, which it then shifts right by 2 for the next
// chunk (word shifts: the bits a byte takes from its neighbour stay above bit 1; clobbers
// Y1-Y6; Y13 holds 0x10 bytes).
#define Q5K_CHUNK(qoff, xoff, xoff2, soff, soff2) \
	VMOVDQU      qoff(SI), Y1 \
	VPSRLW       $4, Y1, Y2 \
	VPAND        Y14, Y1, Y1 \
	VPAND        Y14, Y2, Y2 \
	VPSLLW       $4, Y12, Y5 \
	VPSLLW       $3, Y12, Y6 \
	VPAND        Y13, Y5, Y5 \
	VPAND        Y13, Y6, Y6 \
	VPOR         Y5, Y1, Y1 \
	VPOR         Y6, Y2, Y2 \
	VPSRLW       $2, Y12, Y12 \
	VPMADDUBSW   xoff(DI), Y1, Y1 \
	VPMADDUBSW   xoff2(DI), Y2, Y2 \
	VPBROADCASTW soff(SP), Y3 \
	VPBROADCASTW soff2(SP), Y4 \
	VPMADDWD     Y3, Y1, Y1 \
	VPMADDWD     Y4, Y2, Y2 \
	VPADDD       Y1, Y8, Y8 \
	VPADDD       Y2, Y8, Y8

// func dotQ5KAVX2(w, x *byte, nb int) float32
// dotQ4KAVX2 for Q5_K blocks (qh at 16, qs at 48): Y12 holds the block's qh.
TEXT ·dotQ5KAVX2(SB), NOSPLIT, $16-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Y14 // 0x0f bytes
	MOVL         $0x10, AX
	VMOVD        AX, X13
	VPBROADCASTB X13, Y13 // 0x10 bytes

q5kloop:
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	Q4K_HEAD
	VMOVQ     R8, X1
	VPMOVZXBW X1, X1
	VMOVDQU   X1, 0(SP)
	Q4K_MINS

	VMOVDQU 16(SI), Y12
	VPXOR   Y8, Y8, Y8
	Q5K_CHUNK(48, 4, 36, 0, 2)
	Q5K_CHUNK(80, 68, 100, 4, 6)
	Q5K_CHUNK(112, 132, 164, 8, 10)
	Q5K_CHUNK(144, 196, 228, 12, 14)
	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y8, Y9, Y0

	ADDQ $176, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q5kloop

	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q6K_CHUNK multiplies the 32 unsigned 6-bit quants in Y reg by the q8 at xoff(DI), scales
// the low 16 by the int16 at soff(SP) and the high 16 by the one at soff+2(SP), adds to Y8.
#define Q6K_CHUNK(reg, xoff, soff, soff2) \
	VPMADDUBSW   xoff(DI), reg, reg \
	VPBROADCASTW soff(SP), X3 \
	VPBROADCASTW soff2(SP), X4 \
	VINSERTI128  $1, X4, Y3, Y3 \
	VPMADDWD     Y3, reg, reg \
	VPADDD       reg, Y8, Y8

// Q6K_HALF handles 128 elements: ql at qloff(SI), qh at qhoff(SI), q8 from xoff(DI), scales
// from soff(SP).
#define Q6K_HALF(qloff, qloff2, qhoff, x0, x1, x2, x3, s0, s1, s2, s3, s4, s5, s6, s7) \
	VMOVDQU qloff(SI), Y1 \
	VMOVDQU qloff2(SI), Y2 \
	VMOVDQU qhoff(SI), Y5 \
	VPSRLW  $4, Y1, Y6 \
	VPSRLW  $4, Y2, Y7 \
	VPAND   Y14, Y1, Y1 \
	VPAND   Y14, Y2, Y2 \
	VPAND   Y14, Y6, Y6 \
	VPAND   Y14, Y7, Y7 \
	VPSLLW  $4, Y5, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y1, Y1 \
	VPSLLW  $2, Y5, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y2, Y2 \
	VPAND   Y13, Y5, Y10 \
	VPOR    Y10, Y6, Y6 \
	VPSRLW  $2, Y5, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y7, Y7 \
	Q6K_CHUNK(Y1, x0, s0, s1) \
	Q6K_CHUNK(Y2, x1, s2, s3) \
	Q6K_CHUNK(Y6, x2, s4, s5) \
	Q6K_CHUNK(Y7, x3, s6, s7)

// func dotQ6KAVX2(w, x *byte, nb int) float32
// Sum over 16-element groups k of sc_k * sum (q-32)*q8 = sc_k*sum q*q8 - 32*sc_k*bsum_k.
TEXT ·dotQ6KAVX2(SB), NOSPLIT, $32-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	MOVL         $0x0f, AX
	VMOVD        AX, X14
	VPBROADCASTB X14, Y14 // 0x0f bytes
	MOVL         $0x30, AX
	VMOVD        AX, X13
	VPBROADCASTB X13, Y13 // 0x30 bytes

q6kloop:
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	PREFETCHT0 2240(SI)
	MOVWLZX      208(SI), AX
	VMOVD        AX, X9
	VCVTPH2PS    X9, X9
	VMULSS       (DI), X9, X9
	VBROADCASTSS X9, Y9 // d*dx

	VPMOVSXBW 192(SI), Y2 // scales as int16
	VMOVDQU   Y2, 0(SP)
	VPMADDWD  260(DI), Y2, Y2
	VPSLLD    $5, Y2, Y2
	VPXOR     Y8, Y8, Y8
	VPSUBD    Y2, Y8, Y8 // -32 * sum sc_k*bsum_k

	Q6K_HALF(0, 32, 128, 4, 36, 68, 100, 0, 2, 4, 6, 8, 10, 12, 14)
	Q6K_HALF(64, 96, 160, 132, 164, 196, 228, 16, 18, 20, 22, 24, 26, 28, 30)

	VCVTDQ2PS   Y8, Y8
	VFMADD231PS Y8, Y9, Y0

	ADDQ $210, SI
	ADDQ $292, DI
	DECQ CX
	JNZ  q6kloop

	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q50_BLOCK adds the products of the Q5_0 block at off(SI) with the Q8_0 block at xoff(DI)
// to the float sums in acc: the fifth bits of the quants (bytes of qh spread by VPSHUFB,
// each lane's bit tested by OR with a mask of all other bits and a compare with all ones,
// then 0x10 where set) are added to the nibbles by Q50_PRODUCT (clobbers X1-X7; Y10 holds
// 0x10 bytes, Y11 the bit masks, Y12 the spreading shuffle, Y13 int16 ones, Y14 0x0f
// bytes, Y15 all ones).
#define Q50_BLOCK(off, xoff, acc) \
	VPBROADCASTD off+2(SI), Y2 \
	VPSHUFB      Y12, Y2, Y2 \
	VPOR         Y11, Y2, Y2 \
	VPCMPEQB     Y15, Y2, Y2 \
	VPAND        Y10, Y2, Y2 \
	Q50_NIBBLES(off) \
	VPOR         Y2, Y3, Y3 \
	Q50_PRODUCT(off, xoff, acc)

// func dotQ5_0AVX2(w, x *byte, nb int) float32   (nb > 0)
// The dot of nb Q5_0 blocks with nb Q8_0 blocks, as dotQ5_0Generic up to the float steps:
// lane sums in float32, two blocks at a time into Y0 and Y8.
TEXT ·dotQ5_0AVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	VXORPS       Y8, Y8, Y8
	MOVL         $0x10101010, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10
	MOVQ         $0x7fbfdfeff7fbfdfe, AX
	VMOVQ        AX, X11
	VPBROADCASTQ X11, Y11
	MOVQ         $0x0101010101010101, AX
	VMOVQ        AX, X12
	VPSLLDQ      $8, X12, X12             // bytes 0 x8, 1 x8
	MOVQ         $0x0202020202020202, AX
	VMOVQ        AX, X4
	MOVQ         $0x0303030303030303, AX
	VPINSRQ      $1, AX, X4, X4           // bytes 2 x8, 3 x8
	VINSERTI128  $1, X4, Y12, Y12
	VPCMPEQW     Y15, Y15, Y15
	VPSRLW       $15, Y15, Y13            // int16 ones
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14
	// Y15 stays all ones.

q50loop2:
	CMPQ CX, $2
	JLT  q50tail
	PREFETCHT0 1024(SI)
	Q50_BLOCK(0, 0, Y0)
	Q50_BLOCK(22, 34, Y8)
	ADDQ $44, SI
	ADDQ $68, DI
	SUBQ $2, CX
	JMP  q50loop2

q50tail:
	TESTQ CX, CX
	JZ    q50done
	Q50_BLOCK(0, 0, Y0)

q50done:
	VADDPS Y8, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q51_BLOCK adds the products of the Q5_1 block at off(SI) (d, m, qh at 4, qs at 8) with the
// Q8_0 block at xoff(DI) to the float sums in acc: its 5-bit quants q are made as Q50_BLOCK
// makes them; the int32 lanes of q*x take d_w*d_x and those of x (VPMADDUBSW with 0x01
// bytes) m_w*d_x, in two multiply-adds (clobbers X1-X7; Y9 holds 0x01 bytes, the other
// constants are Q50_BLOCK's).
#define Q51_BLOCK(off, xoff, acc) \
	VPBROADCASTD off+4(SI), Y2 \
	VPSHUFB      Y12, Y2, Y2 \
	VPOR         Y11, Y2, Y2 \
	VPCMPEQB     Y15, Y2, Y2 \
	VPAND        Y10, Y2, Y2 \
	VMOVDQU      off+8(SI), X3 \
	VPSRLW       $4, X3, X4 \
	VINSERTI128  $1, X4, Y3, Y3 \
	VPAND        Y14, Y3, Y3 \
	VPOR         Y2, Y3, Y3 \
	VPBROADCASTD off(SI), X1 \
	VCVTPH2PS    X1, Y1 \
	VPBROADCASTW xoff(DI), X6 \
	VCVTPH2PS    X6, Y6 \
	VMULPS       Y6, Y1, Y1 \
	VMOVSLDUP    Y1, Y4 \
	VMOVSHDUP    Y1, Y1 \
	VMOVDQU      xoff+2(DI), Y5 \
	VPMADDUBSW   Y5, Y3, Y6 \
	VPMADDWD     Y13, Y6, Y6 \
	VCVTDQ2PS    Y6, Y6 \
	VFMADD231PS  Y6, Y4, acc \
	VPMADDUBSW   Y5, Y9, Y7 \
	VPMADDWD     Y13, Y7, Y7 \
	VCVTDQ2PS    Y7, Y7 \
	VFMADD231PS  Y7, Y1, acc

// func dotQ5_1AVX2(w, x *byte, nb int) float32   (nb > 0)
// The dot of nb Q5_1 blocks with nb Q8_0 blocks, as dotQ5_1Generic up to the float steps:
// lane sums in float32, two blocks at a time into Y0 and Y8.
TEXT ·dotQ5_1AVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	VXORPS       Y8, Y8, Y8
	MOVL         $0x01010101, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9
	MOVL         $0x10101010, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10
	MOVQ         $0x7fbfdfeff7fbfdfe, AX
	VMOVQ        AX, X11
	VPBROADCASTQ X11, Y11
	MOVQ         $0x0101010101010101, AX
	VMOVQ        AX, X12
	VPSLLDQ      $8, X12, X12
	MOVQ         $0x0202020202020202, AX
	VMOVQ        AX, X4
	MOVQ         $0x0303030303030303, AX
	VPINSRQ      $1, AX, X4, X4
	VINSERTI128  $1, X4, Y12, Y12
	VPCMPEQW     Y15, Y15, Y15
	VPSRLW       $15, Y15, Y13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14

q51loop2:
	CMPQ CX, $2
	JLT  q51tail
	PREFETCHT0 1024(SI)
	Q51_BLOCK(0, 0, Y0)
	Q51_BLOCK(24, 34, Y8)
	ADDQ $48, SI
	ADDQ $68, DI
	SUBQ $2, CX
	JMP  q51loop2

q51tail:
	TESTQ CX, CX
	JZ    q51done
	Q51_BLOCK(0, 0, Y0)

q51done:
	VADDPS Y8, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// Q41_BLOCK is Q51_BLOCK for the Q4_1 block at off(SI) (d, m, qs at 4): no fifth bits.
#define Q41_BLOCK(off, xoff, acc) \
	VMOVDQU      off+4(SI), X3 \
	VPSRLW       $4, X3, X4 \
	VINSERTI128  $1, X4, Y3, Y3 \
	VPAND        Y14, Y3, Y3 \
	VPBROADCASTD off(SI), X1 \
	VCVTPH2PS    X1, Y1 \
	VPBROADCASTW xoff(DI), X6 \
	VCVTPH2PS    X6, Y6 \
	VMULPS       Y6, Y1, Y1 \
	VMOVSLDUP    Y1, Y4 \
	VMOVSHDUP    Y1, Y1 \
	VMOVDQU      xoff+2(DI), Y5 \
	VPMADDUBSW   Y5, Y3, Y6 \
	VPMADDWD     Y13, Y6, Y6 \
	VCVTDQ2PS    Y6, Y6 \
	VFMADD231PS  Y6, Y4, acc \
	VPMADDUBSW   Y5, Y9, Y7 \
	VPMADDWD     Y13, Y7, Y7 \
	VCVTDQ2PS    Y7, Y7 \
	VFMADD231PS  Y7, Y1, acc

// func dotQ4_1AVX2(w, x *byte, nb int) float32   (nb > 0)
// dotQ5_1AVX2 for Q4_1 blocks.
TEXT ·dotQ4_1AVX2(SB), NOSPLIT, $0-28
	MOVQ         w+0(FP), SI
	MOVQ         x+8(FP), DI
	MOVQ         nb+16(FP), CX
	VXORPS       Y0, Y0, Y0
	VXORPS       Y8, Y8, Y8
	MOVL         $0x01010101, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, Y9
	VPCMPEQW     Y15, Y15, Y15
	VPSRLW       $15, Y15, Y13
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14

q41loop2:
	CMPQ CX, $2
	JLT  q41tail
	PREFETCHT0 1024(SI)
	Q41_BLOCK(0, 0, Y0)
	Q41_BLOCK(20, 34, Y8)
	ADDQ $40, SI
	ADDQ $68, DI
	SUBQ $2, CX
	JMP  q41loop2

q41tail:
	TESTQ CX, CX
	JZ    q41done
	Q41_BLOCK(0, 0, Y0)

q41done:
	VADDPS Y8, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func cvtF16AVX2(dst *float32, src *byte, n int)   (n % 8 == 0, n > 0)
TEXT ·cvtF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

cvtf16loop:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       cvtf16loop
	VZEROUPPER
	RET

// func cvtBF16AVX2(dst *float32, src *byte, n int)   (n % 8 == 0, n > 0)
TEXT ·cvtBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

cvtbf16loop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       cvtbf16loop
	VZEROUPPER
	RET

// Constants of expAVX2 (float32 bit patterns).
#define EXP_HI   $0x42b00000 // 88.0
#define EXP_LO   $0xc2ae999a // -87.3
#define EXP_LOG2E $0x3fb8aa3b // 1/ln 2
#define EXP_C1   $0x3f318000 // ln 2, high part (0.693359375)
#define EXP_C2   $0xb95e8083 // ln 2, low part (-2.12194440e-4)
#define EXP_P0   $0x39506967 // 1.9875691500e-4
#define EXP_P1   $0x3ab743ce // 1.3981999507e-3
#define EXP_P2   $0x3c088908 // 8.3334519073e-3
#define EXP_P3   $0x3d2aa9c1 // 4.1665795894e-2
#define EXP_P4   $0x3e2aaaaa // 1.6666665459e-1
#define EXP_P5   $0x3f000000 // 5.0000001201e-1
#define EXP_ONE  $0x3f800000 // 1.0

#define BCAST(c, y) \
	MOVL         c, AX \
	VMOVD        AX, X15 \
	VBROADCASTSS X15, y

// func expAVX2(dst, src *float32, n int)   (n % 8 == 0, n > 0)
// dst[i] = e^src[i]: inputs clamped to [-87.3, 88], n = round(x/ln2), r = x - n*ln2 in two
// parts, a degree-6 polynomial for e^r, and 2^n added to the exponent bits. NaNs propagate.
TEXT ·expAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	BCAST(EXP_HI, Y1)
	BCAST(EXP_LO, Y2)
	BCAST(EXP_LOG2E, Y3)
	BCAST(EXP_C1, Y4)
	BCAST(EXP_C2, Y5)
	BCAST(EXP_P0, Y6)
	BCAST(EXP_P1, Y7)
	BCAST(EXP_P2, Y8)
	BCAST(EXP_P3, Y9)
	BCAST(EXP_P4, Y10)
	BCAST(EXP_P5, Y11)
	BCAST(EXP_ONE, Y12)

exploop:
	VMOVUPS      (SI), Y0
	VMINPS       Y0, Y1, Y0 // NaN in Y0 wins: it is the second source
	VMAXPS       Y0, Y2, Y0
	VMULPS       Y3, Y0, Y13
	VROUNDPS     $0, Y13, Y13 // n
	VFNMADD231PS Y4, Y13, Y0  // r = x - n*C1
	VFNMADD231PS Y5, Y13, Y0  // r -= n*C2
	VMOVAPS      Y6, Y14
	VFMADD213PS  Y7, Y0, Y14  // p = p*r + P1
	VFMADD213PS  Y8, Y0, Y14
	VFMADD213PS  Y9, Y0, Y14
	VFMADD213PS  Y10, Y0, Y14
	VFMADD213PS  Y11, Y0, Y14
	VMULPS       Y0, Y0, Y15  // r*r
	VFMADD213PS  Y0, Y15, Y14 // p*r*r + r
	VADDPS       Y12, Y14, Y14
	VCVTPS2DQ    Y13, Y13
	VPSLLD       $23, Y13, Y13
	VPADDD       Y13, Y14, Y14
	VMOVUPS      Y14, (DI)
	ADDQ         $32, SI
	ADDQ         $32, DI
	DECQ         CX
	JNZ          exploop
	VZEROUPPER
	RET

// func attnScores4AVX2(sc, q, k *float32, stride, n, hd int)
// sc[j] = q . k[j*stride : j*stride+hd] for j < n (n % 4 == 0, hd % 8 == 0, both > 0), four
// keys at a time.
TEXT ·attnScores4AVX2(SB), NOSPLIT, $0-48
	MOVQ sc+0(FP), DX
	MOVQ q+8(FP), DI
	MOVQ k+16(FP), SI
	MOVQ stride+24(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	MOVQ n+32(FP), R10
	SHRQ $2, R10
	MOVQ hd+40(FP), R11
	SHRQ $3, R11

scoreskeys:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX
	MOVQ   R11, CX

scoresdim:
	VMOVUPS     (DI)(AX*1), Y4
	LEAQ        (SI)(AX*1), BX
	VFMADD231PS (BX), Y4, Y0
	VFMADD231PS (BX)(R8*1), Y4, Y1
	VFMADD231PS (BX)(R8*2), Y4, Y2
	VFMADD231PS (BX)(R9*1), Y4, Y3
	ADDQ        $32, AX
	DECQ        CX
	JNZ         scoresdim

	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DX)
	ADDQ         $16, DX
	LEAQ         (SI)(R8*4), SI
	DECQ         R10
	JNZ          scoreskeys
	VZEROUPPER
	RET

// func attnWsumAVX2(acc, e, v *float32, stride, n, hd int)
// acc[i] += sum_{j<n} e[j] * v[j*stride+i] for i < hd (hd % 8 == 0, n > 0): acc chunks of
// 32 (then 8) values stay in registers while the n value vectors go by.
TEXT ·attnWsumAVX2(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ e+8(FP), DX
	MOVQ v+16(FP), SI
	MOVQ stride+24(FP), R8
	SHLQ $2, R8
	MOVQ n+32(FP), R10
	MOVQ hd+40(FP), R11

wsum32:
	CMPQ    R11, $32
	JLT     wsum8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ    SI, BX
	XORQ    AX, AX

wsum32j:
	VBROADCASTSS (DX)(AX*4), Y4
	VFMADD231PS  (BX), Y4, Y0
	VFMADD231PS  32(BX), Y4, Y1
	VFMADD231PS  64(BX), Y4, Y2
	VFMADD231PS  96(BX), Y4, Y3
	ADDQ         R8, BX
	INCQ         AX
	CMPQ         AX, R10
	JLT          wsum32j

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $128, SI
	SUBQ    $32, R11
	JMP     wsum32

wsum8:
	CMPQ    R11, $8
	JLT     wsumdone
	VMOVUPS (DI), Y0
	MOVQ    SI, BX
	XORQ    AX, AX

wsum8j:
	VBROADCASTSS (DX)(AX*4), Y4
	VFMADD231PS  (BX), Y4, Y0
	ADDQ         R8, BX
	INCQ         AX
	CMPQ         AX, R10
	JLT          wsum8j

	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	SUBQ    $8, R11
	JMP     wsum8

wsumdone:
	VZEROUPPER
	RET

// func attnScores4F16AVX2(sc, q *float32, k *byte, stride, n, hd int)
// attnScores4AVX2 over keys held as halves (stride in elements): each key chunk is widened
// by VCVTPH2PS as it is loaded, and the arithmetic is attnScores4AVX2's, so the scores
// equal those over a float32 copy of the keys bit for bit.
TEXT ·attnScores4F16AVX2(SB), NOSPLIT, $0-48
	MOVQ sc+0(FP), DX
	MOVQ q+8(FP), DI
	MOVQ k+16(FP), SI
	MOVQ stride+24(FP), R8
	SHLQ $1, R8
	LEAQ (R8)(R8*2), R9
	MOVQ n+32(FP), R10
	SHRQ $2, R10
	MOVQ hd+40(FP), R11
	SHRQ $3, R11

h16keys:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX
	MOVQ   SI, BX
	MOVQ   R11, CX

h16dim:
	VMOVUPS     (DI)(AX*1), Y4
	VCVTPH2PS   (BX), Y5
	VCVTPH2PS   (BX)(R8*1), Y6
	VCVTPH2PS   (BX)(R8*2), Y7
	VCVTPH2PS   (BX)(R9*1), Y8
	VFMADD231PS Y5, Y4, Y0
	VFMADD231PS Y6, Y4, Y1
	VFMADD231PS Y7, Y4, Y2
	VFMADD231PS Y8, Y4, Y3
	ADDQ        $32, AX
	ADDQ        $16, BX
	DECQ        CX
	JNZ         h16dim

	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMOVUPS      X0, (DX)
	ADDQ         $16, DX
	LEAQ         (SI)(R8*4), SI
	DECQ         R10
	JNZ          h16keys
	VZEROUPPER
	RET

// func attnWsumF16AVX2(acc, e *float32, v *byte, stride, n, hd int)
// attnWsumAVX2 over values held as halves (stride in elements), widened as they are loaded;
// the sums equal those over a float32 copy of the values bit for bit.
TEXT ·attnWsumF16AVX2(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ e+8(FP), DX
	MOVQ v+16(FP), SI
	MOVQ stride+24(FP), R8
	SHLQ $1, R8
	MOVQ n+32(FP), R10
	MOVQ hd+40(FP), R11

h16wsum32:
	CMPQ    R11, $32
	JLT     h16wsum8
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ    SI, BX
	XORQ    AX, AX

h16wsum32j:
	VBROADCASTSS (DX)(AX*4), Y4
	VCVTPH2PS    (BX), Y5
	VCVTPH2PS    16(BX), Y6
	VCVTPH2PS    32(BX), Y7
	VCVTPH2PS    48(BX), Y8
	VFMADD231PS  Y5, Y4, Y0
	VFMADD231PS  Y6, Y4, Y1
	VFMADD231PS  Y7, Y4, Y2
	VFMADD231PS  Y8, Y4, Y3
	ADDQ         R8, BX
	INCQ         AX
	CMPQ         AX, R10
	JLT          h16wsum32j

	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    $128, DI
	ADDQ    $64, SI
	SUBQ    $32, R11
	JMP     h16wsum32

h16wsum8:
	CMPQ    R11, $8
	JLT     h16wsumdone
	VMOVUPS (DI), Y0
	MOVQ    SI, BX
	XORQ    AX, AX

h16wsum8j:
	VBROADCASTSS (DX)(AX*4), Y4
	VCVTPH2PS    (BX), Y5
	VFMADD231PS  Y5, Y4, Y0
	ADDQ         R8, BX
	INCQ         AX
	CMPQ         AX, R10
	JLT          h16wsum8j

	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $16, SI
	SUBQ    $8, R11
	JMP     h16wsum8

h16wsumdone:
	VZEROUPPER
	RET

// DATA for quantizeQ8_0AVX2: the dword order that undoes the lane interleaving of the
// VPACKSSDW/VPACKSSWB pair.
DATA q8perm<>+0(SB)/4, $0
DATA q8perm<>+4(SB)/4, $4
DATA q8perm<>+8(SB)/4, $1
DATA q8perm<>+12(SB)/4, $5
DATA q8perm<>+16(SB)/4, $2
DATA q8perm<>+20(SB)/4, $6
DATA q8perm<>+24(SB)/4, $3
DATA q8perm<>+28(SB)/4, $7
GLOBL q8perm<>(SB), RODATA|NOPTR, $32

// Q8_ROUND rounds the floats of reg to integers, ties away from zero, clamps them to
// [-127, 127] (NaN to 0) and converts them to int32 (uses Y8-Y13 constants, clobbers Y14/Y15).
#define Q8_ROUND(reg) \
	VROUNDPS   $3, reg, Y14 \
	VSUBPS     Y14, reg, Y15 \
	VCMPPS     $0x0d, Y9, Y15, reg \
	VANDPS     Y8, reg, reg \
	VADDPS     reg, Y14, Y14 \
	VCMPPS     $0x02, Y10, Y15, Y15 \
	VANDPS     Y8, Y15, Y15 \
	VSUBPS     Y15, Y14, Y14 \
	VCMPPS     $0x07, Y14, Y14, Y15 \
	VANDPS     Y15, Y14, Y14 \
	VMINPS     Y11, Y14, Y14 \
	VMAXPS     Y12, Y14, Y14 \
	VCVTTPS2DQ Y14, reg

// func quantizeQ8_0AVX2(dst *byte, src *float32, nb int)
// The same blocks as quant.QuantizeBlockQ8_0, bit for bit: d = max|x|/127 (NaNs ignored),
// id = 1/d (0 when d is 0), q = round(x*id) ties away from zero, d stored as f16.
TEXT ·quantizeQ8_0AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
	BCAST($0x3f800000, Y8)  // 1
	BCAST($0x3f000000, Y9)  // 0.5
	BCAST($0xbf000000, Y10) // -0.5
	BCAST($0x42fe0000, Y11) // 127
	BCAST($0xc2fe0000, Y12) // -127
	BCAST($0x7fffffff, Y13) // abs mask
	VMOVDQU q8perm<>(SB), Y7

q80quantloop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VXORPS  Y4, Y4, Y4
	VANDPS  Y13, Y0, Y5
	VMAXPS  Y4, Y5, Y4 // max(|x|, acc): a NaN |x| yields acc
	VANDPS  Y13, Y1, Y5
	VMAXPS  Y4, Y5, Y4
	VANDPS  Y13, Y2, Y5
	VMAXPS  Y4, Y5, Y4
	VANDPS  Y13, Y3, Y5
	VMAXPS  Y4, Y5, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS  X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS  X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS  X5, X4, X4 // amax in every lane
	VDIVSS  X11, X4, X4 // d = amax/127
	VCVTPS2PH $0, X4, X5
	VPEXTRW $0, X5, AX
	MOVW    AX, (DI)
	VDIVSS  X4, X8, X5 // 1/d
	VXORPS  X6, X6, X6
	VCMPSS  $4, X6, X4, X6 // d != 0
	VANDPS  X6, X5, X5
	VBROADCASTSS X5, Y5 // id
	VMULPS  Y5, Y0, Y0
	VMULPS  Y5, Y1, Y1
	VMULPS  Y5, Y2, Y2
	VMULPS  Y5, Y3, Y3
	Q8_ROUND(Y0)
	Q8_ROUND(Y1)
	Q8_ROUND(Y2)
	Q8_ROUND(Y3)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD    Y0, Y7, Y0
	VMOVDQU   Y0, 2(DI)
	ADDQ    $128, SI
	ADDQ    $34, DI
	DECQ    CX
	JNZ     q80quantloop
	VZEROUPPER
	RET

// GEMV4_REDUCE adds accumulator pairs (Y0,Y4) (Y1,Y5) (Y2,Y6) (Y3,Y7) of rows 0..3 and
// writes the four row sums to (DX).
#define GEMV4_REDUCE \
	VADDPS       Y4, Y0, Y0 \
	VADDPS       Y5, Y1, Y1 \
	VADDPS       Y6, Y2, Y2 \
	VADDPS       Y7, Y3, Y3 \
	ROWS4_STORE

// GEMV4_INIT prepares a 4-row float matrix-vector kernel whose arguments are loaded (rows
// at SI, SI+R8, SI+2*R8, and SI+R9, which it sets; x at DI; n in CX, which it turns into
// iterations of 32 elements; output at DX) and zeroes the accumulators Y0-Y7.
#define GEMV4_INIT \
	LEAQ   (R8)(R8*2), R9 \
	SHRQ   $5, CX \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// GEMV4_X loads 32 activations into Y8-Y11.
#define GEMV4_X \
	VMOVUPS (DI), Y8 \
	VMOVUPS 32(DI), Y9 \
	VMOVUPS 64(DI), Y10 \
	VMOVUPS 96(DI), Y11

// GEMV_F16_ROW adds 32 f16 weights at base times Y8-Y11 to acc0/acc1.
#define GEMV_F16_ROW(b0, b1, b2, b3, pf, acc0, acc1) \
	PREFETCHT0  pf \
	VCVTPH2PS   b0, Y12 \
	VCVTPH2PS   b1, Y13 \
	VFMADD231PS Y12, Y8, acc0 \
	VFMADD231PS Y13, Y9, acc1 \
	VCVTPH2PS   b2, Y12 \
	VCVTPH2PS   b3, Y13 \
	VFMADD231PS Y12, Y10, acc0 \
	VFMADD231PS Y13, Y11, acc1

// func gemv4F16AVX2(w *byte, stride int, x *float32, n int, out *float32)   (n % 32 == 0)
// out[i] = sum_{c<n} f16 w[i*stride/2 + c] * x[c] for rows i < 4 (stride in bytes).
TEXT ·gemv4F16AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	GEMV4_INIT
	LEAQ (SI)(R8*4), R12 // the next 4 rows, prefetched 256 bytes per iteration

gemv4f16loop:
	GEMV4_X
	GEMV_F16_ROW((SI), 16(SI), 32(SI), 48(SI), 0(R12), Y0, Y4)
	GEMV_F16_ROW((SI)(R8*1), 16(SI)(R8*1), 32(SI)(R8*1), 48(SI)(R8*1), 64(R12), Y1, Y5)
	GEMV_F16_ROW((SI)(R8*2), 16(SI)(R8*2), 32(SI)(R8*2), 48(SI)(R8*2), 128(R12), Y2, Y6)
	GEMV_F16_ROW((SI)(R9*1), 16(SI)(R9*1), 32(SI)(R9*1), 48(SI)(R9*1), 192(R12), Y3, Y7)
	ADDQ $64, SI
	ADDQ $256, R12
	ADDQ $128, DI
	DECQ CX
	JNZ  gemv4f16loop
	GEMV4_REDUCE
	RET

// GEMV_BF16_ROW is GEMV_F16_ROW for bf16 weights.
#define GEMV_BF16_ROW(b0, b1, b2, b3, pf, acc0, acc1) \
	PREFETCHT1  pf \
	VPMOVZXWD   b0, Y12 \
	VPMOVZXWD   b1, Y13 \
	VPSLLD      $16, Y12, Y12 \
	VPSLLD      $16, Y13, Y13 \
	VFMADD231PS Y12, Y8, acc0 \
	VFMADD231PS Y13, Y9, acc1 \
	VPMOVZXWD   b2, Y12 \
	VPMOVZXWD   b3, Y13 \
	VPSLLD      $16, Y12, Y12 \
	VPSLLD      $16, Y13, Y13 \
	VFMADD231PS Y12, Y10, acc0 \
	VFMADD231PS Y13, Y11, acc1

// func gemv4BF16AVX2(w *byte, stride int, x *float32, n int, out *float32)   (n % 32 == 0)
TEXT ·gemv4BF16AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	GEMV4_INIT
	LEAQ (SI)(R8*4), R12 // the next 4 rows, prefetched 256 bytes per iteration

gemv4bf16loop:
	GEMV4_X
	GEMV_BF16_ROW((SI), 16(SI), 32(SI), 48(SI), 0(R12), Y0, Y4)
	GEMV_BF16_ROW((SI)(R8*1), 16(SI)(R8*1), 32(SI)(R8*1), 48(SI)(R8*1), 64(R12), Y1, Y5)
	GEMV_BF16_ROW((SI)(R8*2), 16(SI)(R8*2), 32(SI)(R8*2), 48(SI)(R8*2), 128(R12), Y2, Y6)
	GEMV_BF16_ROW((SI)(R9*1), 16(SI)(R9*1), 32(SI)(R9*1), 48(SI)(R9*1), 192(R12), Y3, Y7)
	ADDQ $64, SI
	ADDQ $256, R12
	ADDQ $128, DI
	DECQ CX
	JNZ  gemv4bf16loop
	GEMV4_REDUCE
	RET

#define GEMV_F32_ROW(b0, b1, b2, b3, pf, pf2, acc0, acc1) \
	PREFETCHT0  pf \
	PREFETCHT0  pf2 \
	VFMADD231PS b0, Y8, acc0 \
	VFMADD231PS b1, Y9, acc1 \
	VFMADD231PS b2, Y10, acc0 \
	VFMADD231PS b3, Y11, acc1

// func gemv4F32AVX2(w *byte, stride int, x *float32, n int, out *float32)   (n % 32 == 0)
TEXT ·gemv4F32AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), R8
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	GEMV4_INIT

gemv4f32loop:
	GEMV4_X
	GEMV_F32_ROW((SI), 32(SI), 64(SI), 96(SI), 1024(SI), 1088(SI), Y0, Y4)
	GEMV_F32_ROW((SI)(R8*1), 32(SI)(R8*1), 64(SI)(R8*1), 96(SI)(R8*1), 1024(SI)(R8*1), 1088(SI)(R8*1), Y1, Y5)
	GEMV_F32_ROW((SI)(R8*2), 32(SI)(R8*2), 64(SI)(R8*2), 96(SI)(R8*2), 1024(SI)(R8*2), 1088(SI)(R8*2), Y2, Y6)
	GEMV_F32_ROW((SI)(R9*1), 32(SI)(R9*1), 64(SI)(R9*1), 96(SI)(R9*1), 1024(SI)(R9*1), 1088(SI)(R9*1), Y3, Y7)
	ADDQ $128, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  gemv4f32loop
	GEMV4_REDUCE
	RET

// DEQ4K_HALF widens the 32 nibbles in yreg (bytes, 0..15; xreg its low half) to floats, y = s*q - m with s and m
// broadcast from soff(R8) and soff(R9), and stores them at doff(DI).
#define DEQ4K_HALF(xreg, yreg, soff, doff) \
	VBROADCASTSS soff(R8), Y8 \
	VBROADCASTSS soff(R9), Y9 \
	VPMOVZXBD    xreg, Y2 \
	VPSRLDQ      $8, xreg, X3 \
	VPMOVZXBD    X3, Y3 \
	VEXTRACTI128 $1, yreg, X4 \
	VPSRLDQ      $8, X4, X5 \
	VPMOVZXBD    X4, Y4 \
	VPMOVZXBD    X5, Y5 \
	VCVTDQ2PS    Y2, Y2 \
	VCVTDQ2PS    Y3, Y3 \
	VCVTDQ2PS    Y4, Y4 \
	VCVTDQ2PS    Y5, Y5 \
	VMULPS       Y8, Y2, Y2 \
	VMULPS       Y8, Y3, Y3 \
	VMULPS       Y8, Y4, Y4 \
	VMULPS       Y8, Y5, Y5 \
	VSUBPS       Y9, Y2, Y2 \
	VSUBPS       Y9, Y3, Y3 \
	VSUBPS       Y9, Y4, Y4 \
	VSUBPS       Y9, Y5, Y5 \
	VMOVUPS      Y2, doff(DI) \
	VMOVUPS      Y3, doff+32(DI) \
	VMOVUPS      Y4, doff+64(DI) \
	VMOVUPS      Y5, doff+96(DI)

// func dequantQ4KBodyAVX2(dst *float32, qs *byte, sc, mn *float32)
// The 256 values of one Q4_K block from its 128 nibble bytes qs, given the 8 sub-block
// scales sc[j] = d*scale_j and mins mn[j] = dmin*min_j: y = float32(sc*q) - mn, rounded as
// quant.DequantizeBlockQ4_K rounds.
TEXT ·dequantQ4KBodyAVX2(SB), NOSPLIT, $0-32
	MOVQ         dst+0(FP), DI
	MOVQ         qs+8(FP), SI
	MOVQ         sc+16(FP), R8
	MOVQ         mn+24(FP), R9
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14
	MOVQ         $4, CX

deq4kloop:
	VMOVDQU (SI), Y0
	VPAND   Y14, Y0, Y1
	DEQ4K_HALF(X1, Y1, 0, 0)
	VPSRLW  $4, Y0, Y1
	VPAND   Y14, Y1, Y1
	DEQ4K_HALF(X1, Y1, 4, 128)
	ADDQ    $32, SI
	ADDQ    $256, DI
	ADDQ    $8, R8
	ADDQ    $8, R9
	DECQ    CX
	JNZ     deq4kloop
	VZEROUPPER
	RET

// DEQ6K_VEC widens the 32 quants in yreg (unsigned 6-bit bytes; xreg its low half) to
// floats y = sc * (q-32), elements 0..15 scaled by the float at soff(R8) and 16..31 by the
// next one, and stores them at doff(DI).
#define DEQ6K_VEC(xreg, yreg, soff, doff) \
	VPSUBB       Y12, yreg, yreg \
	VPMOVSXBD    xreg, Y2 \
	VPSRLDQ      $8, xreg, X3 \
	VPMOVSXBD    X3, Y3 \
	VEXTRACTI128 $1, yreg, X4 \
	VPSRLDQ      $8, X4, X5 \
	VPMOVSXBD    X4, Y4 \
	VPMOVSXBD    X5, Y5 \
	VCVTDQ2PS    Y2, Y2 \
	VCVTDQ2PS    Y3, Y3 \
	VCVTDQ2PS    Y4, Y4 \
	VCVTDQ2PS    Y5, Y5 \
	VBROADCASTSS soff(R8), Y8 \
	VBROADCASTSS soff+4(R8), Y9 \
	VMULPS       Y8, Y2, Y2 \
	VMULPS       Y8, Y3, Y3 \
	VMULPS       Y9, Y4, Y4 \
	VMULPS       Y9, Y5, Y5 \
	VMOVUPS      Y2, doff(DI) \
	VMOVUPS      Y3, doff+32(DI) \
	VMOVUPS      Y4, doff+64(DI) \
	VMOVUPS      Y5, doff+96(DI)

// DEQ6K_HALF widens 128 values of a Q6_K block: ql at qloff(SI), qh at qhoff(SI), scales
// from soff(R8), output at doff(DI).
#define DEQ6K_HALF(qloff, qloff2, qhoff, s0, s1, s2, s3, d0, d1, d2, d3) \
	VMOVDQU qloff(SI), Y0 \
	VMOVDQU qloff2(SI), Y1 \
	VMOVDQU qhoff(SI), Y11 \
	VPSRLW  $4, Y0, Y6 \
	VPSRLW  $4, Y1, Y7 \
	VPAND   Y14, Y0, Y0 \
	VPAND   Y14, Y1, Y1 \
	VPAND   Y14, Y6, Y6 \
	VPAND   Y14, Y7, Y7 \
	VPSLLW  $4, Y11, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y0, Y0 \
	VPSLLW  $2, Y11, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y1, Y1 \
	VPAND   Y13, Y11, Y10 \
	VPOR    Y10, Y6, Y6 \
	VPSRLW  $2, Y11, Y10 \
	VPAND   Y13, Y10, Y10 \
	VPOR    Y10, Y7, Y7 \
	DEQ6K_VEC(X0, Y0, s0, d0) \
	DEQ6K_VEC(X1, Y1, s1, d1) \
	DEQ6K_VEC(X6, Y6, s2, d2) \
	DEQ6K_VEC(X7, Y7, s3, d3)

// func dequantQ6KBodyAVX2(dst *float32, b *byte, sc *float32)
// The 256 values of the Q6_K block at b given its 16 scales sc[i] = d*scales[i]:
// y = sc*(q-32), rounded as quant.DequantizeBlockQ6_K rounds.
TEXT ·dequantQ6KBodyAVX2(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         b+8(FP), SI
	MOVQ         sc+16(FP), R8
	MOVL         $0x0f0f0f0f, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14 // 0x0f bytes
	MOVL         $0x30303030, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13 // 0x30 bytes
	MOVL         $0x20202020, AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12 // 32s
	DEQ6K_HALF(0, 32, 128, 0, 8, 16, 24, 0, 128, 256, 384)
	DEQ6K_HALF(64, 96, 160, 32, 40, 48, 56, 512, 640, 768, 896)
	VZEROUPPER
	RET

// func absMaxAVX2(src *float32, n int) float32   (n % 8 == 0, n > 0)
// The largest |src[i]|, NaNs ignored (0 when all are NaN or zero).
TEXT ·absMaxAVX2(SB), NOSPLIT, $0-20
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $3, CX
	BCAST($0x7fffffff, Y13) // abs mask
	VXORPS Y0, Y0, Y0

absmaxloop:
	VANDPS  (SI), Y13, Y1
	VMAXPS  Y0, Y1, Y0 // max(|x|, acc): a NaN |x| yields acc
	ADDQ    $32, SI
	DECQ    CX
	JNZ     absmaxloop
	VEXTRACTF128 $1, Y0, X1
	VMAXPS  X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS  X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS  X1, X0, X0
	VZEROUPPER
	MOVSS   X0, ret+16(FP)
	RET

// Q8K_ROUND turns the floats of reg into the int32 quants of quant.QuantizeBlockQ8_K:
// v = iscale*x (Y8), rounded to nearest even as v + 1.5*2^23 - 1.5*2^23 (Y9, exact for the
// |v| <= 2^22 that are not clamped anyway), NaNs to 0, clamped to [-128, 127] (Y10, Y11),
// infinities included (clobbers Y12).
#define Q8K_ROUND(reg) \
	VMULPS     Y8, reg, reg \
	VADDPS     Y9, reg, reg \
	VSUBPS     Y9, reg, reg \
	VCMPPS     $7, reg, reg, Y12 \
	VANDPS     Y12, reg, reg \
	VMINPS     Y10, reg, reg \
	VMAXPS     Y11, reg, reg \
	VCVTTPS2DQ reg, reg

// func quantQ8KBodyAVX2(dst *byte, src *float32, iscale float32)
// The 256 quants (at dst+4) and 16 int16 sums of 16 (at dst+260) of one Q8_K block of src
// with the given inverse scale, bit for bit as quant.QuantizeBlockQ8_K computes them.
TEXT ·quantQ8KBodyAVX2(SB), NOSPLIT, $0-20
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	VBROADCASTSS iscale+16(FP), Y8
	BCAST($0x4b400000, Y9)  // 1.5 * 2^23
	BCAST($0x42fe0000, Y10) // 127
	BCAST($0xc3000000, Y11) // -128
	VMOVDQU      q8perm<>(SB), Y7
	LEAQ         260(DI), DX // bsums
	ADDQ         $4, DI
	MOVQ         $8, CX

q8kloop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VMOVUPS   64(SI), Y2
	VMOVUPS   96(SI), Y3
	Q8K_ROUND(Y0)
	Q8K_ROUND(Y1)
	Q8K_ROUND(Y2)
	Q8K_ROUND(Y3)
	VPADDD    Y1, Y0, Y4 // partial sums of elements 0..15
	VPADDD    Y3, Y2, Y5 // 16..31
	VPHADDD   Y5, Y4, Y4
	VPHADDD   Y4, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDD    X5, X4, X4 // lanes 0, 1: the two sums
	VPACKSSDW X4, X4, X4
	VMOVD     X4, AX
	MOVL      AX, (DX)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD    Y0, Y7, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $128, SI
	ADDQ      $32, DI
	ADDQ      $4, DX
	DECQ      CX
	JNZ       q8kloop
	VZEROUPPER
	RET

// func dequantI8AVX2(dst *float32, src *byte, stride int, scales *float32, sstride, rows, groups, gsz int)
// (rows, groups > 0; gsz % 8 == 0, gsz > 0): row r's codes at src + r*stride, its groups'
// scales at scales + 4*r*sstride; dst takes rows x groups x gsz values.
TEXT ·dequantI8AVX2(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), R9
	MOVQ stride+16(FP), R13
	MOVQ scales+24(FP), R10
	MOVQ sstride+32(FP), DX
	SHLQ $2, DX
	MOVQ rows+40(FP), R11
	MOVQ groups+48(FP), R8
	MOVQ gsz+56(FP), AX
	SHRQ $3, AX

dqi8row:
	MOVQ R9, SI
	MOVQ R10, BX
	MOVQ R8, R12

dqi8group:
	VBROADCASTSS (BX), Y1
	MOVQ         AX, CX

dqi8loop:
	VPMOVSXBD (SI), Y0
	VCVTDQ2PS Y0, Y0
	VMULPS    Y1, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       dqi8loop
	ADDQ      $4, BX
	DECQ      R12
	JNZ       dqi8group
	ADDQ      R13, R9
	ADDQ      DX, R10
	DECQ      R11
	JNZ       dqi8row
	VZEROUPPER
	RET

// func dequantF8AVX2(dst *float32, src *byte, stride int, scales *float32, sstride, rows, groups, gsz, shift int, mul float32)
// As dequantI8AVX2 for FP8 codes: code b becomes the float32 of bits
// (b&0x7f)<<shift | (b&0x80)<<24, times mul, times its group's scale, as
// dequantF8Generic computes it.
TEXT ·dequantF8AVX2(SB), NOSPLIT, $0-76
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), R9
	MOVQ         stride+16(FP), R13
	MOVQ         scales+24(FP), R10
	MOVQ         sstride+32(FP), DX
	SHLQ         $2, DX
	MOVQ         rows+40(FP), R11
	MOVQ         groups+48(FP), R8
	MOVQ         gsz+56(FP), AX
	SHRQ         $3, AX
	MOVQ         shift+64(FP), CX
	MOVQ         CX, X5
	VBROADCASTSS mul+72(FP), Y2
	MOVL         $0x7f, CX
	MOVD         CX, X3
	VPBROADCASTD X3, Y3
	MOVL         $0x80, CX
	MOVD         CX, X4
	VPBROADCASTD X4, Y4

dqf8row:
	MOVQ R9, SI
	MOVQ R10, BX
	MOVQ R8, R12

dqf8group:
	VBROADCASTSS (BX), Y1
	MOVQ         AX, CX

dqf8loop:
	VPMOVZXBD (SI), Y0
	VPAND     Y3, Y0, Y6
	VPSLLD    X5, Y6, Y6
	VPAND     Y4, Y0, Y0
	VPSLLD    $24, Y0, Y0
	VPOR      Y6, Y0, Y0
	VMULPS    Y2, Y0, Y0
	VMULPS    Y1, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       dqf8loop
	ADDQ      $4, BX
	DECQ      R12
	JNZ       dqf8group
	ADDQ      R13, R9
	ADDQ      DX, R10
	DECQ      R11
	JNZ       dqf8row
	VZEROUPPER
	RET
