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

// Exponent rows (planes.go): 16 bytes of code pairs are 32 codes, split
// into even (low nibble) and odd (high nibble) elements, looked up in the
// 16-byte table with PSHUFB (SSSE3) and interleaved back into order. With
// R (sign | 7 mantissa bits) each exponent e makes the element's top two
// bytes: lo = e<<7 | R&0x7f, hi = R&0x80 | e>>1. The word shifts move
// bits across byte boundaries; the masks drop them.

// EXPCONST loads the table and the masks: X14 table, X13 0x0f, X12 0x7f,
// X11 0x80 in every byte.
#define EXPCONST \
	MOVOU (BX), X14 \
	MOVQ  $0x0f0f0f0f0f0f0f0f, AX \
	MOVQ  AX, X13 \
	PUNPCKLQDQ X13, X13 \
	MOVQ  $0x7f7f7f7f7f7f7f7f, AX \
	MOVQ  AX, X12 \
	PUNPCKLQDQ X12, X12 \
	PCMPEQB X11, X11 \
	PXOR  X12, X11

// EXPS turns the 16 code pairs at (DX) into the exponents of elements
// 0-15 in X2 and 16-31 in X4.
#define EXPS \
	MOVOU (DX), X0 \
	MOVO  X0, X1 \
	PAND  X13, X0 \
	PSRLW $4, X1 \
	PAND  X13, X1 \
	MOVO  X14, X2 \
	PSHUFB X0, X2 \
	MOVO  X14, X3 \
	PSHUFB X1, X3 \
	MOVO  X2, X4 \
	PUNPCKLBW X3, X2 \
	PUNPCKHBW X3, X4

// TOP makes the top bytes of 16 elements from their exponents E and R
// at addr: lo bytes in E, hi bytes in X6 (X5, X7 clobbered).
#define TOP(E, addr) \
	MOVOU addr, X5 \
	MOVO  E, X6 \
	PSRLW $1, X6 \
	PAND  X12, X6 \
	MOVO  X5, X7 \
	PAND  X11, X7 \
	POR   X7, X6 \
	PSLLW $7, E \
	PAND  X11, E \
	PAND  X12, X5 \
	POR   X5, E

// func joinExp2SSSE3(out, r, pairs *byte, table *[16]byte, n int)
// n (elements) is a multiple of 32; out holds 2n bytes.
TEXT ·joinExp2SSSE3(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ r+8(FP), SI
	MOVQ pairs+16(FP), DX
	MOVQ table+24(FP), BX
	MOVQ n+32(FP), CX
	SHRQ $5, CX
	JZ   doneE2
	EXPCONST

loopE2:
	EXPS
	TOP(X2, (SI))
	MOVO  X2, X7
	PUNPCKLBW X6, X2
	PUNPCKHBW X6, X7
	MOVOU X2, (DI)
	MOVOU X7, 16(DI)
	TOP(X4, 16(SI))
	MOVO  X4, X7
	PUNPCKLBW X6, X4
	PUNPCKHBW X6, X7
	MOVOU X4, 32(DI)
	MOVOU X7, 48(DI)
	ADDQ  $16, DX
	ADDQ  $32, SI
	ADDQ  $64, DI
	DECQ  CX
	JNZ   loopE2

doneE2:
	RET

// JOIN4 interleaves 16 elements: bytes 0 and 1 from the planes at a and
// b, bytes 2 and 3 from E and X6, into 64 bytes at o(DI).
#define JOIN4(E, a, b, o) \
	MOVOU a, X0 \
	MOVOU b, X1 \
	MOVO  X0, X3 \
	PUNPCKLBW X1, X0 \
	PUNPCKHBW X1, X3 \
	MOVO  E, X5 \
	PUNPCKLBW X6, E \
	PUNPCKHBW X6, X5 \
	MOVO  X0, X7 \
	PUNPCKLWL E, X0 \
	PUNPCKHWL E, X7 \
	MOVO  X3, X8 \
	PUNPCKLWL X5, X3 \
	PUNPCKHWL X5, X8 \
	MOVOU X0, o(DI) \
	MOVOU X7, o+16(DI) \
	MOVOU X3, o+32(DI) \
	MOVOU X8, o+48(DI)

// func joinExp4SSSE3(out, p0, p1, r, pairs *byte, table *[16]byte, n int)
// n (elements) is a multiple of 32; out holds 4n bytes.
TEXT ·joinExp4SSSE3(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), R8
	MOVQ r+24(FP), R9
	MOVQ pairs+32(FP), DX
	MOVQ table+40(FP), BX
	MOVQ n+48(FP), CX
	SHRQ $5, CX
	JZ   doneE4
	EXPCONST

loopE4:
	EXPS
	TOP(X2, (R9))
	JOIN4(X2, (SI), (R8), 0)
	TOP(X4, 16(R9))
	JOIN4(X4, 16(SI), 16(R8), 64)
	ADDQ  $16, DX
	ADDQ  $32, SI
	ADDQ  $32, R8
	ADDQ  $32, R9
	ADDQ  $128, DI
	DECQ  CX
	JNZ   loopE4

doneE4:
	RET
