#include "textflag.h"

// Byte-plane interleave (join, planes.go) with SSE2, which every amd64
// has: PUNPCKL/H BW, WL and LQ interleave bytes, words and double words
// of two registers, so a tree of them turns 16 bytes of each of w planes
// into 16 elements of w bytes.

// func join2SSE2(out, p0, p1 *byte, n int)
// n (elements) is a multiple of 16; out holds 2n bytes.
TEXT ·join2SSE2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	JZ   done2

loop2:
	MOVOU (SI), X0
	MOVOU (DX), X1
	MOVO  X0, X2
	PUNPCKLBW X1, X0
	PUNPCKHBW X1, X2
	MOVOU X0, (DI)
	MOVOU X2, 16(DI)
	ADDQ  $16, SI
	ADDQ  $16, DX
	ADDQ  $32, DI
	DECQ  CX
	JNZ   loop2

done2:
	RET

// func join4SSE2(out, p0, p1, p2, p3 *byte, n int)
// n (elements) is a multiple of 16; out holds 4n bytes.
TEXT ·join4SSE2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), DX
	MOVQ p2+24(FP), R8
	MOVQ p3+32(FP), R9
	MOVQ n+40(FP), CX
	SHRQ $4, CX
	JZ   done4

loop4:
	MOVOU (SI), X0
	MOVOU (DX), X1
	MOVOU (R8), X2
	MOVOU (R9), X3
	MOVO  X0, X4
	PUNPCKLBW X1, X0 // bytes 0,1 of elements 0-7
	PUNPCKHBW X1, X4 // bytes 0,1 of elements 8-15
	MOVO  X2, X5
	PUNPCKLBW X3, X2 // bytes 2,3 of elements 0-7
	PUNPCKHBW X3, X5 // bytes 2,3 of elements 8-15
	MOVO  X0, X6
	PUNPCKLWL X2, X0 // elements 0-3
	PUNPCKHWL X2, X6 // elements 4-7
	MOVO  X4, X7
	PUNPCKLWL X5, X4 // elements 8-11
	PUNPCKHWL X5, X7 // elements 12-15
	MOVOU X0, (DI)
	MOVOU X6, 16(DI)
	MOVOU X4, 32(DI)
	MOVOU X7, 48(DI)
	ADDQ  $16, SI
	ADDQ  $16, DX
	ADDQ  $16, R8
	ADDQ  $16, R9
	ADDQ  $64, DI
	DECQ  CX
	JNZ   loop4

done4:
	RET

// func join8SSE2(out *byte, p *[8]*byte, n int)
// n (elements) is a multiple of 16; out holds 8n bytes.
TEXT ·join8SSE2(SB), NOSPLIT, $0-24
	MOVQ out+0(FP), DI
	MOVQ p+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ 0(BX), R8
	MOVQ 8(BX), R9
	MOVQ 16(BX), R10
	MOVQ 24(BX), R11
	MOVQ 32(BX), R12
	MOVQ 40(BX), R13
	MOVQ 48(BX), R14
	MOVQ 56(BX), R15
	XORQ AX, AX
	SHRQ $4, CX
	JZ   done8

loop8:
	// Bytes: pairs of planes.
	MOVOU (R8)(AX*1), X0
	MOVOU (R9)(AX*1), X1
	MOVO  X0, X8
	PUNPCKLBW X1, X0  // p0p1, elements 0-7
	PUNPCKHBW X1, X8  // p0p1, elements 8-15
	MOVOU (R10)(AX*1), X2
	MOVOU (R11)(AX*1), X3
	MOVO  X2, X9
	PUNPCKLBW X3, X2  // p2p3, 0-7
	PUNPCKHBW X3, X9  // p2p3, 8-15
	MOVOU (R12)(AX*1), X4
	MOVOU (R13)(AX*1), X5
	MOVO  X4, X10
	PUNPCKLBW X5, X4  // p4p5, 0-7
	PUNPCKHBW X5, X10 // p4p5, 8-15
	MOVOU (R14)(AX*1), X6
	MOVOU (R15)(AX*1), X7
	MOVO  X6, X11
	PUNPCKLBW X7, X6  // p6p7, 0-7
	PUNPCKHBW X7, X11 // p6p7, 8-15

	// Words: bytes 0-3 and 4-7 of each element.
	MOVO  X0, X1
	PUNPCKLWL X2, X0  // bytes 0-3, 0-3
	PUNPCKHWL X2, X1  // bytes 0-3, 4-7
	MOVO  X8, X3
	PUNPCKLWL X9, X8  // bytes 0-3, 8-11
	PUNPCKHWL X9, X3  // bytes 0-3, 12-15
	MOVO  X4, X5
	PUNPCKLWL X6, X4  // bytes 4-7, 0-3
	PUNPCKHWL X6, X5  // bytes 4-7, 4-7
	MOVO  X10, X7
	PUNPCKLWL X11, X10 // bytes 4-7, 8-11
	PUNPCKHWL X11, X7  // bytes 4-7, 12-15

	// Double words: whole elements.
	MOVO  X0, X2
	PUNPCKLLQ X4, X0  // elements 0, 1
	PUNPCKHLQ X4, X2  // 2, 3
	MOVOU X0, (DI)
	MOVOU X2, 16(DI)
	MOVO  X1, X2
	PUNPCKLLQ X5, X1  // 4, 5
	PUNPCKHLQ X5, X2  // 6, 7
	MOVOU X1, 32(DI)
	MOVOU X2, 48(DI)
	MOVO  X8, X2
	PUNPCKLLQ X10, X8 // 8, 9
	PUNPCKHLQ X10, X2 // 10, 11
	MOVOU X8, 64(DI)
	MOVOU X2, 80(DI)
	MOVO  X3, X2
	PUNPCKLLQ X7, X3  // 12, 13
	PUNPCKHLQ X7, X2  // 14, 15
	MOVOU X3, 96(DI)
	MOVOU X2, 112(DI)

	ADDQ  $16, AX
	ADDQ  $128, DI
	DECQ  CX
	JNZ   loop8

done8:
	RET
