//go:build amd64 && !purego

#include "textflag.h"

// func accumAVX2(p *byte, n int, stride int, count int, group int, heads int, state *uint64)
//
// Adds count runs of n bytes (n a positive multiple of 32), run i at
// p + i*stride, to per-head lane sums: runs i*group .. i*group+group-1
// belong to head i % heads. Head h's state is 12 uint64 at state + 96*h:
// lanes a (4), b (4) and c (4). Over a head's runs, read as one stream of
// 32-byte steps of four 8-byte pieces, a += step and b += a (the addition
// only A/B sums of docs/spec.md §1, continued across runs), and before each
// run c += a. Go turns the lanes into A, B and the run-weighted sums.
TEXT ·accumAVX2(SB), NOSPLIT, $0-56
	MOVQ  p+0(FP), SI
	MOVQ  n+8(FP), BX
	MOVQ  stride+16(FP), DX
	MOVQ  count+24(FP), CX
	MOVQ  group+32(FP), R9
	MOVQ  heads+40(FP), R10
	MOVQ  state+48(FP), DI
	MOVQ  DI, R11
	IMULQ $96, R10
	ADDQ  R11, R10

group:
	TESTQ   CX, CX
	JZ      done
	VMOVDQU (DI), Y0
	VMOVDQU 32(DI), Y1
	VMOVDQU 64(DI), Y2
	MOVQ    R9, R12

run:
	VPADDQ Y0, Y2, Y2
	MOVQ   SI, AX
	MOVQ   BX, R8
	CMPQ   R8, $64
	JB     tail

loop64:
	VPADDQ (AX), Y0, Y0
	VPADDQ Y0, Y1, Y1
	VPADDQ 32(AX), Y0, Y0
	VPADDQ Y0, Y1, Y1
	ADDQ   $64, AX
	SUBQ   $64, R8
	CMPQ   R8, $64
	JAE    loop64

tail:
	TESTQ  R8, R8
	JZ     next
	VPADDQ (AX), Y0, Y0
	VPADDQ Y0, Y1, Y1

next:
	ADDQ DX, SI
	DECQ CX
	JZ   last
	DECQ R12
	JNZ  run
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	ADDQ    $96, DI
	CMPQ    DI, R10
	JB      group
	MOVQ    R11, DI
	JMP     group

last:
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)

done:
	VZEROUPPER
	RET
