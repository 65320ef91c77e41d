//go:build amd64 && !purego

#include "textflag.h"

// func adlerBlocksAVX2(p *byte, chunks int, out *[24]uint32, consts *[64]byte)
//
// Reads chunks 32-byte steps from p (1 <= chunks <= adlerMaxChunks) and
// leaves three sets of eight uint32 lanes in out, which Go sums: the byte
// sums S (out[0:8]), the prefix sums P (out[8:16]: before each step, P +=
// the byte sums of the steps before it) and the in-step weighted sums Q
// (out[16:24]: byte j of a step weighted 32-j). For n = 32*chunks bytes
// x_0 .. x_{n-1}, sum of (n-k)*x_k = 32*P + Q, which is what Adler-32's B
// adds over a block (docs/sglang.md).
TEXT ·adlerBlocksAVX2(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ chunks+8(FP), CX
	MOVQ out+16(FP), DI
	MOVQ consts+24(FP), AX
	VPXOR Y0, Y0, Y0              // zero
	VPXOR Y1, Y1, Y1              // S lanes
	VPXOR Y2, Y2, Y2              // P lanes
	VPXOR Y3, Y3, Y3              // Q lanes
	VMOVDQU (AX), Y4              // bytes 32, 31, ..., 1
	VMOVDQU 32(AX), Y5            // int16 ones

loop:
	VMOVDQU    (SI), Y6
	VPADDD     Y1, Y2, Y2
	VPSADBW    Y0, Y6, Y7
	VPADDD     Y7, Y1, Y1
	VPMADDUBSW Y4, Y6, Y8
	VPMADDWD   Y5, Y8, Y8
	VPADDD     Y8, Y3, Y3
	ADDQ       $32, SI
	DECQ       CX
	JNZ        loop

	VMOVDQU Y1, (DI)
	VMOVDQU Y2, 32(DI)
	VMOVDQU Y3, 64(DI)
	VZEROUPPER
	RET
