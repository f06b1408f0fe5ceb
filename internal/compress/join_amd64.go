package compress

import "golang.org/x/sys/cpu"

// SSE2 interleaves (join_amd64.s) of n elements, n a multiple of 16.
//
//go:noescape
func join2SSE2(out, p0, p1 *byte, n int)

//go:noescape
func join4SSE2(out, p0, p1, p2, p3 *byte, n int)

//go:noescape
func join8SSE2(out *byte, p *[8]*byte, n int)

// join interleaves planes (w slices of at least m bytes) into out (m
// elements of w bytes, at least w*m bytes): the inverse of split. The
// assembly does whole groups of 16 elements, joinGeneric the rest.
func join(out []byte, planes [][]byte, m int) {
	w := len(planes)
	if len(out) < w*m {
		panic("compress: join: short output")
	}
	for _, p := range planes {
		if len(p) < m {
			panic("compress: join: short plane")
		}
	}
	n := m &^ 15
	if n > 0 {
		switch w {
		case 2:
			join2SSE2(&out[0], &planes[0][0], &planes[1][0], n)
		case 4:
			join4SSE2(&out[0], &planes[0][0], &planes[1][0], &planes[2][0], &planes[3][0], n)
		case 8:
			var p [8]*byte
			for j := range p {
				p[j] = &planes[j][0]
			}
			join8SSE2(&out[0], &p, n)
		default:
			n = 0
		}
	}
	if n == m {
		return
	}
	var rest [8][]byte
	for j, p := range planes {
		rest[j] = p[n:m]
	}
	joinGeneric(out[w*n:], rest[:w], m-n)
}

// SSSE3 exponent-row joins (join_amd64.s) of n elements, n a multiple
// of 32: the codes of pairs go through table with PSHUFB.
//
//go:noescape
func joinExp2SSSE3(out, r, pairs *byte, table *[16]byte, n int)

//go:noescape
func joinExp4SSSE3(out, p0, p1, r, pairs *byte, table *[16]byte, n int)

var hasSSSE3 = cpu.X86.HasSSSE3

// joinExp interleaves the m elements of an exponent row into out: planes
// holds planes 0..w-3 and then R (w-1 slices of at least m bytes), pairs
// the codes of the exponents, two to a byte. The assembly does whole
// groups of 32 elements, joinExpGeneric the rest.
func joinExp(out []byte, planes [][]byte, pairs []byte, table *[16]byte, m int) {
	w := len(planes) + 1
	if len(out) < w*m || len(pairs) < (m+1)/2 {
		panic("compress: joinExp: short buffers")
	}
	for _, p := range planes {
		if len(p) < m {
			panic("compress: joinExp: short plane")
		}
	}
	n := 0
	if hasSSSE3 {
		n = m &^ 31
	}
	if n > 0 {
		switch w {
		case 2:
			joinExp2SSSE3(&out[0], &planes[0][0], &pairs[0], table, n)
		case 4:
			joinExp4SSSE3(&out[0], &planes[0][0], &planes[1][0], &planes[2][0], &pairs[0], table, n)
		default:
			n = 0
		}
	}
	if n == m {
		return
	}
	var rest [3][]byte
	for j, p := range planes {
		rest[j] = p[n:m]
	}
	joinExpGeneric(out[w*n:], rest[:w-1], pairs[n/2:], table, m-n)
}
