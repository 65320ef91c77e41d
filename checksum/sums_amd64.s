//go:build amd64 && !purego

#include "textflag.h"

// func sumsAVX2(p *byte, stride int, count int, n int, out *uint64)
//
// For count runs of n bytes (n a positive multiple of 32), run i starting
// at p + i*stride, writes A = sum_k x_k and B = sum_k k*x_k of the run's
// little-endian 8-byte pieces to out[2i] and out[2i+1]. Four 64-bit lanes:
// a += 32 bytes; b += a, so that B = 4*(m*A - sum b) + a1 + 2*a2 + 3*a3
// with m = n/32 (the generic sumAB's lanes, in one register).
TEXT ·sumsAVX2(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), DX
	MOVQ count+16(FP), CX
	MOVQ n+24(FP), BX
	MOVQ out+32(FP), DI
	MOVQ BX, R13
	SHRQ $5, R13

run:
	TESTQ CX, CX
	JZ    done
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	MOVQ  SI, AX
	MOVQ  BX, R8
	CMPQ  R8, $64
	JB    tail

loop64:
	PREFETCHT0 1024(AX)
	VPADDQ     (AX), Y0, Y0
	VPADDQ     Y0, Y1, Y1
	VPADDQ     32(AX), Y0, Y0
	VPADDQ     Y0, Y1, Y1
	ADDQ       $64, AX
	SUBQ       $64, R8
	CMPQ       R8, $64
	JAE        loop64

tail:
	TESTQ  R8, R8
	JZ     reduce
	VPADDQ (AX), Y0, Y0
	VPADDQ Y0, Y1, Y1

reduce:
	// a0..a3 into R8..R11.
	VEXTRACTI128 $1, Y0, X2
	VMOVQ        X0, R8
	VPEXTRQ      $1, X0, R9
	VMOVQ        X2, R10
	VPEXTRQ      $1, X2, R11

	// sum of the b lanes into R12.
	VEXTRACTI128 $1, Y1, X3
	VPADDQ       X3, X1, X1
	VMOVQ        X1, R12
	VPEXTRQ      $1, X1, AX
	ADDQ         AX, R12

	// A into R8; W = a1 + 2*a2 + 3*a3 into R9.
	ADDQ R9, R8
	ADDQ R10, R8
	ADDQ R11, R8
	LEAQ (R9)(R10*2), R9
	LEAQ (R11)(R11*2), R10
	ADDQ R10, R9

	// B = 4*(m*A - sum b) + W into AX.
	MOVQ  R13, AX
	IMULQ R8, AX
	SUBQ  R12, AX
	SHLQ  $2, AX
	ADDQ  R9, AX

	MOVQ R8, 0(DI)
	MOVQ AX, 8(DI)
	ADDQ $16, DI
	ADDQ DX, SI
	DECQ CX
	JMP  run

done:
	VZEROUPPER
	RET
