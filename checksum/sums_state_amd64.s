//go:build amd64 && !purego

#include "textflag.h"

// func stateRowsAVX2(p *byte, n, stride, count, mix int, acc, keys, consts, hsum *uint64)
//
// The state rows' kernel (docs/spec.md §6 and §14): count rows of n bytes
// (n a positive multiple of 32), row r at p + r*stride, each read as
// 8-byte words, four per 32-byte step (lane q of step m: word 4m+q). For
// each row it sums the words' even and odd fields (e: x & mask, o:
// (x >> 16 or 32) & mask: the 2-byte elements 0, 2 and 1, 3 of a word in
// the 32-bit halves of a lane, or the 4-byte elements 0 and 1), and be,
// bo: e and o summed after each step (b += a). From them, per lane, a
// row's S (its field sums), C (sum of l * field l) and Bs (the
// step-weighted field sums) are added into the rows' sums and those into
// their prefix sums, so that acc receives six 4-lane vectors: sum over
// rows of S, of (count - r)*S, and the same for C and Bs; the rows' A and
// B (and any sum weighted linearly in r) follow from them (stateTotals).
// With mix set, hsum (4 lanes, shared by the rows) gains Mix(x ^ k) of
// every word, k starting at keys[r] + koff + q*MixGamma in lane q and
// stepping by 4*MixGamma.
//
// consts (uint64 offsets): 0 step (4*MixGamma), 4 D0, 8 D1, 12 D2, 16
// D3, 20 mask, 24 the lane offsets (koff + q*MixGamma), each vector in 4
// lanes, and 28 wide (0: 2-byte elements, 1: 4-byte).
//
// Registers: Y0 e, Y1 o, Y2 be, Y3 bo, Y4 k, Y5 hsum, Y6 mask, Y7 x, Y8
// odd fields, Y9 z, Y10 t; Y11 the sum of S, Y12 its prefix sum, Y13 and
// Y14 C's, Y15 Bs' (its prefix sum kept in acc).

#define STATESUMS(SH) \
	VMOVDQU (AX), Y7;    \
	VPAND   Y6, Y7, Y9;  \
	VPSRLQ  $SH, Y7, Y8; \
	VPAND   Y6, Y8, Y8;  \
	VPADDQ  Y9, Y0, Y0;  \
	VPADDQ  Y8, Y1, Y1;  \
	VPADDQ  Y0, Y2, Y2;  \
	VPADDQ  Y1, Y3, Y3

#define STATEMIX \
	VPXOR    Y4, Y7, Y9;   \
	VPADDQ   0(R13), Y4, Y4; \
	VPMULUDQ 32(R13), Y9, Y10; \
	VPXOR    Y10, Y9, Y9;  \
	VPSHUFD  $0xb1, Y9, Y9; \
	VPMULUDQ 64(R13), Y9, Y10; \
	VPXOR    Y10, Y9, Y9;  \
	VPSRLQ   $32, Y9, Y10; \
	VPXOR    Y10, Y9, Y9;  \
	VPMULUDQ 96(R13), Y9, Y10; \
	VPXOR    Y10, Y9, Y9;  \
	VPSHUFD  $0xb1, Y9, Y9; \
	VPMULUDQ 128(R13), Y9, Y10; \
	VPXOR    Y10, Y9, Y9;  \
	VPADDQ   Y9, Y5, Y5

TEXT ·stateRowsAVX2(SB), NOSPLIT, $0-72
	MOVQ    p+0(FP), SI
	MOVQ    n+8(FP), BX
	MOVQ    stride+16(FP), DX
	MOVQ    count+24(FP), CX
	MOVQ    mix+32(FP), R9
	MOVQ    acc+40(FP), DI
	MOVQ    keys+48(FP), R10
	MOVQ    consts+56(FP), R13
	MOVQ    hsum+64(FP), AX
	VMOVDQU (AX), Y5
	VMOVDQU 160(R13), Y6
	MOVQ    224(R13), R14 // wide
	VPXOR   Y11, Y11, Y11
	VPXOR   Y12, Y12, Y12
	VPXOR   Y13, Y13, Y13
	VPXOR   Y14, Y14, Y14
	VPXOR   Y15, Y15, Y15
	VMOVDQU Y15, 160(DI)

row:
	TESTQ        CX, CX
	JZ           done
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1
	VPXOR        Y2, Y2, Y2
	VPXOR        Y3, Y3, Y3
	VPBROADCASTQ (R10), Y4
	VPADDQ       192(R13), Y4, Y4
	MOVQ         SI, AX
	MOVQ         BX, R8
	TESTQ        R14, R14
	JNZ          wide
	TESTQ        R9, R9
	JZ           step2

step2mix:
	STATESUMS(16)
	STATEMIX
	ADDQ $32, AX
	SUBQ $32, R8
	JNZ  step2mix
	JMP  end2

step2:
	STATESUMS(16)
	ADDQ $32, AX
	SUBQ $32, R8
	JNZ  step2

end2:
	// 2-byte elements: l = 0, 2 in e's halves, l = 1, 3 in o's.
	VPSLLQ $32, Y0, Y7
	VPSRLQ $32, Y7, Y7   // el
	VPSRLQ $32, Y0, Y8   // eh
	VPSLLQ $32, Y1, Y9
	VPSRLQ $32, Y9, Y9   // ol
	VPSRLQ $32, Y1, Y10  // oh
	VPADDQ Y7, Y11, Y11
	VPADDQ Y8, Y11, Y11
	VPADDQ Y9, Y11, Y11
	VPADDQ Y10, Y11, Y11 // S
	VPADDQ Y8, Y10, Y7   // eh + oh
	VPADDQ Y7, Y7, Y7    // 2 eh + 2 oh
	VPADDQ Y10, Y7, Y7   // 2 eh + 3 oh
	VPADDQ Y9, Y7, Y7    // + ol: C
	VPADDQ Y7, Y13, Y13
	VPSLLQ $32, Y2, Y7
	VPSRLQ $32, Y7, Y7
	VPSRLQ $32, Y2, Y8
	VPSLLQ $32, Y3, Y9
	VPSRLQ $32, Y9, Y9
	VPSRLQ $32, Y3, Y10
	VPADDQ Y7, Y15, Y15
	VPADDQ Y8, Y15, Y15
	VPADDQ Y9, Y15, Y15
	VPADDQ Y10, Y15, Y15 // Bs
	JMP    prefix

wide:
	TESTQ R9, R9
	JZ    step4

step4mix:
	STATESUMS(32)
	STATEMIX
	ADDQ $32, AX
	SUBQ $32, R8
	JNZ  step4mix
	JMP  end4

step4:
	STATESUMS(32)
	ADDQ $32, AX
	SUBQ $32, R8
	JNZ  step4

end4:
	// 4-byte elements: l = 0 in e, l = 1 in o.
	VPADDQ Y0, Y11, Y11
	VPADDQ Y1, Y11, Y11 // S
	VPADDQ Y1, Y13, Y13 // C
	VPADDQ Y2, Y15, Y15
	VPADDQ Y3, Y15, Y15 // Bs

prefix:
	VPADDQ  Y11, Y12, Y12
	VPADDQ  Y13, Y14, Y14
	VPADDQ  160(DI), Y15, Y7
	VMOVDQU Y7, 160(DI)
	ADDQ    $8, R10
	ADDQ    DX, SI
	DECQ    CX
	JMP     row

done:
	VMOVDQU Y11, 0(DI)
	VMOVDQU Y12, 32(DI)
	VMOVDQU Y13, 64(DI)
	VMOVDQU Y14, 96(DI)
	VMOVDQU Y15, 128(DI)
	MOVQ    hsum+64(FP), AX
	VMOVDQU Y5, (AX)
	VZEROUPPER
	RET

// func rowWordsAVX2(p *byte, mode, wide, count, words, stride int, offs *int64, tail uint64, mix int, acc, keys, consts, hsum *uint64)
//
// Short state rows, four at a time, one row per 64-bit lane: count rows
// (a multiple of 4), each of words 8-byte words, word i of row r
//
//   mode 0: the 8 bytes at p + r*stride + 8*i (the last word ANDed with
//           tail: a row of contiguous bytes, zero-padded);
//   mode 1: the 2-byte elements 4i..4i+3 of the row, element e at
//           p + offs[e] + 2*r (a run of every row's element e; offs[e] < 0:
//           no such element, zero);
//   mode 2: the 4-byte elements 2i, 2i+1, element e at p + offs[e] + 4*r.
//
// Group g of 4 rows gives, in lane q, row 4g+q's plain sum A of its
// elements (wide 0: 2-byte, 1: 4-byte fields of the words) and its sum B
// of element index * element; acc receives four 4-lane vectors: the sum
// over groups of A, of (groups - g)*A, and the same for B (see
// rowTotals). With mix set, hsum (4 lanes) gains Mix(x ^ k) of every
// word, k = keys[r] + koff + i*MixGamma. consts: G (MixGamma, 4
// lanes), D0..D3, per (the elements of a word, 4 lanes), the 0xffff mask,
// the low-32-bit mask, koff (4 lanes).
//
// Registers: Y0 x, Y1-Y4 fields, Y5 S (the word's part of A), Y6 its part
// of B, Y7 A, Y8 B, Y9 k, Y10 hsum, Y11 jb (the word's first element
// index), Y12 z, Y13 t, Y14 mask.
TEXT ·rowWordsAVX2(SB), NOSPLIT, $0-104
	MOVQ    p+0(FP), SI
	MOVQ    mode+8(FP), R14
	MOVQ    wide+16(FP), R15
	MOVQ    count+24(FP), CX
	MOVQ    stride+40(FP), DX
	MOVQ    offs+48(FP), R11
	MOVQ    acc+72(FP), DI
	MOVQ    keys+80(FP), R10
	MOVQ    consts+88(FP), R13
	MOVQ    hsum+96(FP), AX
	VMOVDQU (AX), Y10
	VPXOR   Y0, Y0, Y0
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU 192(R13), Y14
	TESTQ   R15, R15
	JZ      group
	VMOVDQU 224(R13), Y14

group:
	CMPQ    CX, $4
	JB      done
	VPXOR   Y7, Y7, Y7
	VPXOR   Y8, Y8, Y8
	VPXOR   Y11, Y11, Y11
	VMOVDQU (R10), Y9
	VPADDQ  256(R13), Y9, Y9 // the row's first word's index, times MixGamma
	XORQ    R9, R9 // word index i
	MOVQ    words+32(FP), R12

word:
	CMPQ R14, $1
	JEQ  loadruns2
	CMPQ R14, $2
	JEQ  loadruns4

	// mode 0: four rows' word i
	LEAQ        (SI)(R9*8), AX
	VMOVQ       (AX), X0
	ADDQ        DX, AX
	VPINSRQ     $1, (AX), X0, X0
	ADDQ        DX, AX
	VMOVQ       (AX), X1
	ADDQ        DX, AX
	VPINSRQ     $1, (AX), X1, X1
	VINSERTI128 $1, X1, Y0, Y0
	CMPQ        R12, $1
	JNE         fields
	VPBROADCASTQ tail+56(FP), Y1
	VPAND       Y1, Y0, Y0
	JMP         fields

loadruns2:
	// elements 4i .. 4i+3 of four rows: 8 bytes of each run
	MOVQ  R9, BX
	SHLQ  $2, BX
	LEAQ  (R11)(BX*8), BX // &offs[4i]
	VPXOR X1, X1, X1
	VPXOR X2, X2, X2
	VPXOR X3, X3, X3
	VPXOR X4, X4, X4
	MOVQ  0(BX), R8
	TESTQ R8, R8
	JS    r2a
	VMOVQ (SI)(R8*1), X1
r2a:
	MOVQ  8(BX), R8
	TESTQ R8, R8
	JS    r2b
	VMOVQ (SI)(R8*1), X2
r2b:
	MOVQ  16(BX), R8
	TESTQ R8, R8
	JS    r2c
	VMOVQ (SI)(R8*1), X3
r2c:
	MOVQ  24(BX), R8
	TESTQ R8, R8
	JS    r2d
	VMOVQ (SI)(R8*1), X4
r2d:
	VPUNPCKLWD  X2, X1, X1 // rows 0..3: (e0, e1) pairs
	VPUNPCKLWD  X4, X3, X3 // rows 0..3: (e2, e3) pairs
	VPUNPCKLDQ  X3, X1, X0 // rows 0, 1
	VPUNPCKHDQ  X3, X1, X1 // rows 2, 3
	VINSERTI128 $1, X1, Y0, Y0
	JMP         fields

loadruns4:
	// elements 2i, 2i+1 of four rows: 16 bytes of each run
	MOVQ    R9, BX
	SHLQ    $1, BX
	LEAQ    (R11)(BX*8), BX // &offs[2i]
	VPXOR   X1, X1, X1
	VPXOR   X2, X2, X2
	MOVQ    0(BX), R8
	TESTQ   R8, R8
	JS      r4a
	VMOVDQU (SI)(R8*1), X1
r4a:
	MOVQ    8(BX), R8
	TESTQ   R8, R8
	JS      r4b
	VMOVDQU (SI)(R8*1), X2
r4b:
	VPUNPCKLDQ  X2, X1, X0 // rows 0, 1
	VPUNPCKHDQ  X2, X1, X1 // rows 2, 3
	VINSERTI128 $1, X1, Y0, Y0

fields:
	// S = sum of the word's fields, T = sum of field index * field.
	CMPQ   R14, $2
	JEQ    fields4
	CMPQ   R14, $1
	JEQ    fields2
	TESTQ  R15, R15
	JNZ    fields4

fields2:
	VPAND  Y14, Y0, Y1
	VPSRLQ $16, Y0, Y2
	VPAND  Y14, Y2, Y2
	VPSRLQ $32, Y0, Y3
	VPAND  Y14, Y3, Y3
	VPSRLQ $48, Y0, Y4
	VPADDQ Y1, Y2, Y5
	VPADDQ Y3, Y4, Y6
	VPADDQ Y6, Y5, Y5 // S = f0 + f1 + f2 + f3 (below 2^18)
	VPADDQ Y4, Y3, Y6 // f2 + f3
	VPADDQ Y4, Y6, Y6 // f2 + 2 f3
	VPADDQ Y3, Y6, Y6 // 2 f2 + 2 f3
	VPADDQ Y4, Y6, Y6 // 2 f2 + 3 f3
	VPADDQ Y2, Y6, Y6 // T = f1 + 2 f2 + 3 f3
	VPMULUDQ Y11, Y5, Y1
	VPADDQ Y1, Y6, Y6 // the word's part of B: jb*S + T
	JMP    weigh

fields4:
	VPAND    Y14, Y0, Y1       // f0
	VPSRLQ   $32, Y0, Y2       // f1
	VPADDQ   Y2, Y1, Y5        // S (up to 2^33: no 32-bit product of it)
	VPMULUDQ Y11, Y1, Y3
	VPMULUDQ Y11, Y2, Y4
	VPADDQ   Y4, Y3, Y6
	VPADDQ   Y2, Y6, Y6        // the word's part of B: jb*f0 + (jb+1)*f1

weigh:
	VPADDQ Y5, Y7, Y7
	VPADDQ Y6, Y8, Y8
	VPADDQ 160(R13), Y11, Y11

	// the mix check of the word
	CMPQ     mix+64(FP), $0
	JEQ      nextword
	VPXOR    Y9, Y0, Y12
	VPADDQ   0(R13), Y9, Y9
	VPMULUDQ 32(R13), Y12, Y13
	VPXOR    Y13, Y12, Y12
	VPSHUFD  $0xb1, Y12, Y12
	VPMULUDQ 64(R13), Y12, Y13
	VPXOR    Y13, Y12, Y12
	VPSRLQ   $32, Y12, Y13
	VPXOR    Y13, Y12, Y12
	VPMULUDQ 96(R13), Y12, Y13
	VPXOR    Y13, Y12, Y12
	VPSHUFD  $0xb1, Y12, Y12
	VPMULUDQ 128(R13), Y12, Y13
	VPXOR    Y13, Y12, Y12
	VPADDQ   Y12, Y10, Y10

nextword:
	INCQ R9
	DECQ R12
	JNZ  word

	VPADDQ  0(DI), Y7, Y7
	VMOVDQU Y7, 0(DI)
	VPADDQ  32(DI), Y7, Y7
	VMOVDQU Y7, 32(DI)
	VPADDQ  64(DI), Y8, Y8
	VMOVDQU Y8, 64(DI)
	VPADDQ  96(DI), Y8, Y8
	VMOVDQU Y8, 96(DI)
	ADDQ    $32, R10
	SUBQ    $4, CX
	// the next four rows
	MOVQ    DX, AX
	SHLQ    $2, AX
	CMPQ    R14, $0
	JEQ     next
	MOVQ    $8, AX
	CMPQ    R14, $1
	JEQ     next
	MOVQ    $16, AX

next:
	ADDQ AX, SI
	JMP  group

done:
	MOVQ    hsum+96(FP), AX
	VMOVDQU Y10, (AX)
	VZEROUPPER
	RET

// func adjacent16AVX2(p *byte, count, mix int, acc, keys, consts, hsum *uint64)
//
// Rows of at most four 2-byte elements in runs of one element each, rows
// adjacent (a state split on its last axis, one word per row), sixteen at a
// time: count rows (a multiple of 16); element e of row r at
// p + run[e] + 2*r, run[e] the offsets at consts+288 (4 of them; a run
// ANDed with the mask at consts+320+32*e, zero for an element the rows do
// not have). Group g of 16 rows gives, in its word vectors W0..W3 (rows
// 0, 1, 8, 9; 2, 3, 10, 11; 4, 5, 12, 13; 6, 7, 14, 15), the rows' A and
// B; acc receives their sums over the groups (32 uint64: W0's A, B, W1's
// ...) and then their prefix sums (sum of (groups - g)*v_g), see
// adjacentTotals. With mix set, hsum gains Mix(x ^ (keys[r] + koff)) of
// every row's word. consts as rowWordsAVX2's (G, D0..D3, per, the 0xffff mask,
// koff), then the run offsets and masks.
TEXT ·adjacent16AVX2(SB), NOSPLIT, $0-56
	MOVQ    p+0(FP), SI
	MOVQ    count+8(FP), CX
	MOVQ    mix+16(FP), BX
	MOVQ    acc+24(FP), DI
	MOVQ    keys+32(FP), R10
	MOVQ    consts+40(FP), R13
	MOVQ    hsum+48(FP), AX
	VMOVDQU (AX), Y14
	VPXOR   Y0, Y0, Y0
	MOVQ    $16, AX

zero16:
	VMOVDQU Y0, (DI)
	ADDQ    $32, DI
	DECQ    AX
	JNZ     zero16
	SUBQ    $512, DI
	VMOVDQU 192(R13), Y15
	MOVQ    288(R13), R8
	MOVQ    296(R13), R9
	MOVQ    304(R13), R11
	MOVQ    312(R13), R12

group16:
	CMPQ CX, $16
	JB   done16
	VMOVDQU (SI)(R8*1), Y0
	VPAND   320(R13), Y0, Y0
	VMOVDQU (SI)(R9*1), Y1
	VPAND   352(R13), Y1, Y1
	VMOVDQU (SI)(R11*1), Y2
	VPAND   384(R13), Y2, Y2
	VMOVDQU (SI)(R12*1), Y3
	VPAND   416(R13), Y3, Y3
	VPUNPCKLWD Y1, Y0, Y4 // rows 0-3 | 8-11: (e0, e1)
	VPUNPCKHWD Y1, Y0, Y5 // rows 4-7 | 12-15
	VPUNPCKLWD Y3, Y2, Y6 // (e2, e3)
	VPUNPCKHWD Y3, Y2, Y7
	VPUNPCKLDQ Y6, Y4, Y0 // W0: rows 0, 1 | 8, 9
	VPUNPCKHDQ Y6, Y4, Y1 // W1: rows 2, 3 | 10, 11
	VPUNPCKLDQ Y7, Y5, Y2 // W2: rows 4, 5 | 12, 13
	VPUNPCKHDQ Y7, Y5, Y3 // W3: rows 6, 7 | 14, 15
#define ADJSUMS(W, OFF) \
	VPAND    Y15, W, Y4;      \
	VPSRLQ   $16, W, Y5;      \
	VPAND    Y15, Y5, Y5;     \
	VPSRLQ   $32, W, Y6;      \
	VPAND    Y15, Y6, Y6;     \
	VPSRLQ   $48, W, Y7;      \
	VPADDQ   Y4, Y5, Y8;      \
	VPADDQ   Y6, Y7, Y9;      \
	VPADDQ   Y9, Y8, Y8;      \
	VPADDQ   Y7, Y6, Y9;      \
	VPADDQ   Y7, Y9, Y9;      \
	VPADDQ   Y6, Y9, Y9;      \
	VPADDQ   Y7, Y9, Y9;      \
	VPADDQ   Y5, Y9, Y9;      \
	VPADDQ   OFF(DI), Y8, Y8; \
	VMOVDQU  Y8, OFF(DI);     \
	VPADDQ   OFF+256(DI), Y8, Y8; \
	VMOVDQU  Y8, OFF+256(DI); \
	VPADDQ   OFF+32(DI), Y9, Y9; \
	VMOVDQU  Y9, OFF+32(DI);  \
	VPADDQ   OFF+288(DI), Y9, Y9; \
	VMOVDQU  Y9, OFF+288(DI)

#define ADJMIX(W, K) \
	VPADDQ   256(R13), K, K;  \
	VPXOR    K, W, W;         \
	VPMULUDQ 32(R13), W, Y4;  \
	VPXOR    Y4, W, W;        \
	VPSHUFD  $0xb1, W, W;     \
	VPMULUDQ 64(R13), W, Y4;  \
	VPXOR    Y4, W, W;        \
	VPSRLQ   $32, W, Y4;      \
	VPXOR    Y4, W, W;        \
	VPMULUDQ 96(R13), W, Y4;  \
	VPXOR    Y4, W, W;        \
	VPSHUFD  $0xb1, W, W;     \
	VPMULUDQ 128(R13), W, Y4; \
	VPXOR    Y4, W, W;        \
	VPADDQ   W, Y14, Y14

	ADJSUMS(Y0, 0)
	ADJSUMS(Y1, 64)
	ADJSUMS(Y2, 128)
	ADJSUMS(Y3, 192)
	TESTQ BX, BX
	JZ    nomix16
	// keys in the words' row order
	VMOVDQU    0(R10), Y4
	VMOVDQU    64(R10), Y5
	VPERM2I128 $0x20, Y5, Y4, Y10 // rows 0, 1, 8, 9
	VPERM2I128 $0x31, Y5, Y4, Y11 // rows 2, 3, 10, 11
	VMOVDQU    32(R10), Y4
	VMOVDQU    96(R10), Y5
	VPERM2I128 $0x20, Y5, Y4, Y12 // rows 4, 5, 12, 13
	VPERM2I128 $0x31, Y5, Y4, Y13 // rows 6, 7, 14, 15
	ADJMIX(Y0, Y10)
	ADJMIX(Y1, Y11)
	ADJMIX(Y2, Y12)
	ADJMIX(Y3, Y13)

nomix16:
	ADDQ $128, R10
	ADDQ $32, SI
	SUBQ $16, CX
	JMP  group16

done16:
	MOVQ    hsum+48(FP), AX
	VMOVDQU Y14, (AX)
	VZEROUPPER
	RET

// func wordRowsAVX2(p *byte, count, stride, mix int, acc, keys, consts, hsum *uint64)
//
// State rows of one 8-byte word each (rows of at most 8 bytes, row r at
// p + r*stride, stride + row bytes at most 16), four at a time, one row
// per 64-bit lane: count rows (a multiple of 4). The rows of a group are
// read as two 16-byte loads (rows 0, 1 and rows 2, 3) and shuffled into
// their lanes, the bytes past a row zeroed, so that each lane is the
// row's zero-padded word. Its even and odd fields (consts' mask and
// shift: the 2-byte elements 0, 2 and 1, 3 in the 32-bit halves of a
// lane, or the 4-byte elements 0 and 1) are added into E and O, and E
// and O into their prefix sums after each group: acc receives E, O and
// their prefix sums (sum of (groups - g)*v_g), 4 lanes each (see
// wordTotals; the caller keeps the 2-byte halves below 2^32). With mix
// set, hsum (4 lanes) gains Mix(x ^ (keys[r] + koff)) of every row's
// word.
//
// consts (uint64 offsets): 0 koff (4 lanes), 4 D0, 8 D1, 12 D2, 16 D3,
// 20 the field mask, 24 the shuffle (32 bytes), 28 the field shift.
//
// Registers: Y0 x, Y1 e, Y2 o, Y3 E, Y4 O, Y5 E's prefix, Y6 O's, Y7 k,
// Y8 z, Y9 hsum, Y10 t, Y12 koff, Y13 the shuffle, Y14 the mask, X15 the
// shift.
TEXT ·wordRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ    p+0(FP), SI
	MOVQ    count+8(FP), CX
	MOVQ    stride+16(FP), DX
	MOVQ    mix+24(FP), BX
	MOVQ    acc+32(FP), DI
	MOVQ    keys+40(FP), R10
	MOVQ    consts+48(FP), R13
	MOVQ    hsum+56(FP), AX
	VMOVDQU (AX), Y9
	VMOVDQU 0(R13), Y12
	VMOVDQU 160(R13), Y14
	VMOVDQU 192(R13), Y13
	VMOVQ   224(R13), X15
	VPXOR   Y3, Y3, Y3
	VPXOR   Y4, Y4, Y4
	VPXOR   Y5, Y5, Y5
	VPXOR   Y6, Y6, Y6
	LEAQ    (DX)(DX*1), R8 // 2*stride
	LEAQ    (R8)(R8*1), R9 // 4*stride
	TESTQ   CX, CX
	JZ      wdone
	TESTQ   BX, BX
	JZ      wsums

#define WORDLOAD \
	VMOVDQU     (SI), X0;        \
	VINSERTI128 $1, (SI)(R8*1), Y0, Y0; \
	VPSHUFB     Y13, Y0, Y0

#define WORDSUMS \
	VPAND  Y14, Y0, Y1;  \
	VPSRLQ X15, Y0, Y2;  \
	VPAND  Y14, Y2, Y2;  \
	VPADDQ Y1, Y3, Y3;   \
	VPADDQ Y2, Y4, Y4;   \
	VPADDQ Y3, Y5, Y5;   \
	VPADDQ Y4, Y6, Y6

wmix:
	WORDLOAD
	WORDSUMS
	VMOVDQU  (R10), Y7
	VPADDQ   Y12, Y7, Y7
	VPXOR    Y7, Y0, Y8
	VPMULUDQ 32(R13), Y8, Y10
	VPXOR    Y10, Y8, Y8
	VPSHUFD  $0xb1, Y8, Y8
	VPMULUDQ 64(R13), Y8, Y10
	VPXOR    Y10, Y8, Y8
	VPSRLQ   $32, Y8, Y10
	VPXOR    Y10, Y8, Y8
	VPMULUDQ 96(R13), Y8, Y10
	VPXOR    Y10, Y8, Y8
	VPSHUFD  $0xb1, Y8, Y8
	VPMULUDQ 128(R13), Y8, Y10
	VPXOR    Y10, Y8, Y8
	VPADDQ   Y8, Y9, Y9
	ADDQ     R9, SI
	ADDQ     $32, R10
	SUBQ     $4, CX
	JNZ      wmix
	JMP      wdone

wsums:
	WORDLOAD
	WORDSUMS
	ADDQ R9, SI
	SUBQ $4, CX
	JNZ  wsums

wdone:
	VMOVDQU Y3, 0(DI)
	VMOVDQU Y4, 32(DI)
	VMOVDQU Y5, 64(DI)
	VMOVDQU Y6, 96(DI)
	MOVQ    hsum+56(FP), AX
	VMOVDQU Y9, (AX)
	VZEROUPPER
	RET

// func pairRowsAVX2(p *byte, count, stride, mix int, acc, keys, consts, hsum *uint64)
//
// State rows of 64 bytes of 4-byte elements (two 32-byte steps, lane q of
// step m: word 4m+q), one row a loop: count rows, row r at p + r*stride.
// Each step's words are added, as they are, into R0 and R1, and their
// upper fields (x >> 32) into O0 and O1, and the four into their prefix
// sums after each row: acc receives R0, O0, R1, O1 and then their prefix
// sums (sum of (count - r)*v_r), 4 lanes each; a word's lower field sums
// are R - O<<32 modulo 2^64 (see pairTotals). With mix set, hsum (4
// lanes) gains Mix(x ^ k) of every word, k = keys[r] + koff + (4m+q)*MixGamma.
//
// consts (uint64 offsets): 0 step 0's key offsets (koff + q*MixGamma),
// 4 D0, 8 D1, 12 D2, 16 D3, 20 step 1's key offsets, 4 lanes each.
//
// Registers: Y0-Y3 R0, O0, R1, O1, Y4-Y7 their prefix sums, Y8 and Y9
// the words, Y10 and Y11 their upper fields, then z and t, Y12 k, Y13
// hsum.
TEXT ·pairRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ    p+0(FP), SI
	MOVQ    count+8(FP), CX
	MOVQ    stride+16(FP), DX
	MOVQ    mix+24(FP), BX
	MOVQ    acc+32(FP), DI
	MOVQ    keys+40(FP), R10
	MOVQ    consts+48(FP), R13
	MOVQ    hsum+56(FP), AX
	VMOVDQU (AX), Y13
	VPXOR   Y0, Y0, Y0
	VPXOR   Y1, Y1, Y1
	VPXOR   Y2, Y2, Y2
	VPXOR   Y3, Y3, Y3
	VPXOR   Y4, Y4, Y4
	VPXOR   Y5, Y5, Y5
	VPXOR   Y6, Y6, Y6
	VPXOR   Y7, Y7, Y7
	TESTQ   CX, CX
	JZ      pdone
	TESTQ   BX, BX
	JZ      psums

#define PAIRSUMS \
	VMOVDQU (SI), Y8;     \
	VMOVDQU 32(SI), Y9;   \
	VPSRLQ  $32, Y8, Y10; \
	VPSRLQ  $32, Y9, Y11; \
	VPADDQ  Y8, Y0, Y0;   \
	VPADDQ  Y10, Y1, Y1;  \
	VPADDQ  Y9, Y2, Y2;   \
	VPADDQ  Y11, Y3, Y3;  \
	VPADDQ  Y0, Y4, Y4;   \
	VPADDQ  Y1, Y5, Y5;   \
	VPADDQ  Y2, Y6, Y6;   \
	VPADDQ  Y3, Y7, Y7

#define PAIRMIX(X, KOFF) \
	VPADDQ   KOFF(R13), Y12, Y10; \
	VPXOR    Y10, X, Y10;     \
	VPMULUDQ 32(R13), Y10, Y11; \
	VPXOR    Y11, Y10, Y10;   \
	VPSHUFD  $0xb1, Y10, Y10; \
	VPMULUDQ 64(R13), Y10, Y11; \
	VPXOR    Y11, Y10, Y10;   \
	VPSRLQ   $32, Y10, Y11;   \
	VPXOR    Y11, Y10, Y10;   \
	VPMULUDQ 96(R13), Y10, Y11; \
	VPXOR    Y11, Y10, Y10;   \
	VPSHUFD  $0xb1, Y10, Y10; \
	VPMULUDQ 128(R13), Y10, Y11; \
	VPXOR    Y11, Y10, Y10;   \
	VPADDQ   Y10, Y13, Y13

pmix:
	PAIRSUMS
	VPBROADCASTQ (R10), Y12
	PAIRMIX(Y8, 0)
	PAIRMIX(Y9, 160)
	ADDQ DX, SI
	ADDQ $8, R10
	DECQ CX
	JNZ  pmix
	JMP  pdone

psums:
	PAIRSUMS
	ADDQ DX, SI
	DECQ CX
	JNZ  psums

pdone:
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	VMOVDQU Y4, 128(DI)
	VMOVDQU Y5, 160(DI)
	VMOVDQU Y6, 192(DI)
	VMOVDQU Y7, 224(DI)
	MOVQ    hsum+56(FP), AX
	VMOVDQU Y13, (AX)
	VZEROUPPER
	RET
