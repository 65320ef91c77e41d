//go:build amd64 && !purego

#include "textflag.h"

// Nibble popcounts, for both 128-bit lanes.
DATA popLUT<>+0x00(SB)/8, $0x0302020102010100
DATA popLUT<>+0x08(SB)/8, $0x0403030203020201
DATA popLUT<>+0x10(SB)/8, $0x0302020102010100
DATA popLUT<>+0x18(SB)/8, $0x0403030203020201
GLOBL popLUT<>(SB), RODATA|NOPTR, $32

DATA lowNibbles<>+0x00(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA lowNibbles<>+0x08(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA lowNibbles<>+0x10(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA lowNibbles<>+0x18(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL lowNibbles<>(SB), RODATA|NOPTR, $32

// func diffAVX2(a, b *byte, n int, acc *diffAcc)
//
// Compares n bytes (n a positive multiple of 32) of a and b, 32 at a
// time, adding to the accumulators in acc (see diffAcc): the OR of a's
// words, the sums of a's and of b's words and the popcount of a^b, by
// lane; the equal bytes; and, while first is unset (-1), the offset of the
// first differing byte, counted from acc.at.
TEXT ·diffAVX2(SB), NOSPLIT, $0-32
	MOVQ    a+0(FP), SI
	MOVQ    b+8(FP), DI
	MOVQ    n+16(FP), CX
	MOVQ    acc+24(FP), DX
	VMOVDQU (DX), Y8
	VMOVDQU 32(DX), Y9
	VMOVDQU 64(DX), Y10
	VMOVDQU 96(DX), Y11
	MOVQ    128(DX), R8  // equal bytes
	MOVQ    136(DX), R9  // first differing byte, -1 while none
	MOVQ    144(DX), R10 // the offset of a[0]
	VPXOR   Y15, Y15, Y15
	VMOVDQU popLUT<>(SB), Y13
	VMOVDQU lowNibbles<>(SB), Y14

loop:
	VMOVDQU   (SI), Y0
	VMOVDQU   (DI), Y1
	VPXOR     Y0, Y1, Y2
	VPOR      Y0, Y8, Y8
	VPADDQ    Y0, Y9, Y9
	VPADDQ    Y1, Y10, Y10
	VPCMPEQB  Y15, Y2, Y3
	VPMOVMSKB Y3, AX
	CMPL      AX, $0xffffffff
	JEQ       counted
	TESTQ     R9, R9
	JNS       counted
	MOVL      AX, BX
	NOTL      BX
	TZCNTL    BX, BX
	LEAQ      (R10)(BX*1), R9

counted:
	POPCNTL   AX, AX
	ADDQ      AX, R8
	VPAND     Y14, Y2, Y4
	VPSRLW    $4, Y2, Y5
	VPAND     Y14, Y5, Y5
	VPSHUFB   Y4, Y13, Y4
	VPSHUFB   Y5, Y13, Y5
	VPADDB    Y4, Y5, Y4
	VPSADBW   Y15, Y4, Y4
	VPADDQ    Y4, Y11, Y11
	ADDQ      $32, SI
	ADDQ      $32, DI
	ADDQ      $32, R10
	SUBQ      $32, CX
	JNZ       loop

	VMOVDQU Y8, (DX)
	VMOVDQU Y9, 32(DX)
	VMOVDQU Y10, 64(DX)
	VMOVDQU Y11, 96(DX)
	MOVQ    R8, 128(DX)
	MOVQ    R9, 136(DX)
	MOVQ    R10, 144(DX)
	VZEROUPPER
	RET

// func diffItemsAVX2(a, b *byte, n, sa, sb, count, q int, items *itemDiff, out *tokDiff)
//
// Compares, for each of count items i (1 <= count <= 32: the tokens of one
// head, or the heads of one token), the n bytes (n a positive multiple of
// 32, at most 7936, the logical bytes q.. of a cell) at a + i*sa with
// those at b + i*sb. It adds to items[i] the popcount of a^b, the equal
// bytes and the sums of a's and of b's 8-byte words, and sets its first
// differing logical byte when it has none yet (-1); it sets in out bit i
// of differs when they differ and bit i of nonzero when a's bytes are not
// all zero. Bit and equal-byte counts gather in byte lanes over an item
// (at most 248 steps of 32 bytes, so that no byte lane overflows).
TEXT ·diffItemsAVX2(SB), NOSPLIT, $0-72
	MOVQ    a+0(FP), R10
	MOVQ    b+8(FP), R11
	MOVQ    items+56(FP), R8
	MOVQ    out+64(FP), DX
	MOVQ    (DX), R12   // differs
	MOVQ    8(DX), R13  // nonzero
	VPXOR   Y15, Y15, Y15
	VMOVDQU popLUT<>(SB), Y13
	VMOVDQU lowNibbles<>(SB), Y14
	MOVQ    $1, SI      // the item's bit
	MOVQ    count+40(FP), CX
	MOVQ    $1, DI
	SHLQ    CX, DI      // the bit after the last item's

item:
	MOVQ  n+16(FP), CX
	MOVQ  $-1, R9       // the item's first differing byte, -1 while none
	VPXOR Y12, Y12, Y12 // the OR of a's bytes
	VPXOR Y6, Y6, Y6    // the OR of a^b
	VPXOR Y7, Y7, Y7    // equal bytes, by byte lane
	VPXOR Y8, Y8, Y8    // popcount of a^b, by byte lane
	VPXOR Y9, Y9, Y9    // sum of a's words, by lane
	VPXOR Y10, Y10, Y10 // sum of b's words, by lane

step:
	VMOVDQU  (R10), Y0
	VMOVDQU  (R11), Y1
	VPXOR    Y0, Y1, Y2
	VPOR     Y0, Y12, Y12
	VPOR     Y2, Y6, Y6
	VPADDQ   Y0, Y9, Y9
	VPADDQ   Y1, Y10, Y10
	VPCMPEQB Y15, Y2, Y3
	VPSUBB   Y3, Y7, Y7
	TESTQ    R9, R9
	JNS      count

	// No byte of the item differed yet: look for the first.
	VPMOVMSKB Y3, AX
	CMPL      AX, $0xffffffff
	JEQ       count
	NOTL      AX
	TZCNTL    AX, BX
	MOVQ      n+16(FP), R9
	SUBQ      CX, R9
	ADDQ      BX, R9

count:
	VPAND   Y14, Y2, Y4
	VPSRLW  $4, Y2, Y5
	VPAND   Y14, Y5, Y5
	VPSHUFB Y4, Y13, Y4
	VPSHUFB Y5, Y13, Y5
	VPADDB  Y4, Y5, Y4
	VPADDB  Y4, Y8, Y8
	ADDQ    $32, R10
	ADDQ    $32, R11
	SUBQ    $32, CX
	JNZ     step

	// The item's counts and sums, lanes added up, added to items[i].
	VPSADBW      Y15, Y8, Y8
	VEXTRACTI128 $1, Y8, X4
	VPADDQ       X4, X8, X8
	VPSHUFD      $0x4e, X8, X4
	VPADDQ       X4, X8, X8
	VMOVQ        X8, AX
	ADDQ         AX, 0(R8)
	VPSADBW      Y15, Y7, Y7
	VEXTRACTI128 $1, Y7, X4
	VPADDQ       X4, X7, X7
	VPSHUFD      $0x4e, X7, X4
	VPADDQ       X4, X7, X7
	VMOVQ        X7, AX
	ADDQ         AX, 8(R8)
	VEXTRACTI128 $1, Y9, X4
	VPADDQ       X4, X9, X9
	VPSHUFD      $0x4e, X9, X4
	VPADDQ       X4, X9, X9
	VMOVQ        X9, AX
	ADDQ         AX, 16(R8)
	VEXTRACTI128 $1, Y10, X4
	VPADDQ       X4, X10, X10
	VPSHUFD      $0x4e, X10, X4
	VPADDQ       X4, X10, X10
	VMOVQ        X10, AX
	ADDQ         AX, 24(R8)
	TESTQ        R9, R9
	JS           recorded
	CMPQ         32(R8), $0
	JGE          recorded
	ADDQ         q+48(FP), R9
	MOVQ         R9, 32(R8)

recorded:
	ADDQ $40, R8
	VPTEST       Y6, Y6
	JZ           equal
	ORQ          SI, R12

equal:
	VPTEST Y12, Y12
	JZ     zero
	ORQ    SI, R13

zero:
	MOVQ n+16(FP), AX
	SUBQ AX, R10
	SUBQ AX, R11
	ADDQ sa+24(FP), R10
	ADDQ sb+32(FP), R11
	SHLQ $1, SI
	CMPQ SI, DI
	JNE  item

	MOVQ R12, (DX)
	MOVQ R13, 8(DX)
	VZEROUPPER
	RET
