//go:build !amd64

package compress

// join interleaves planes (w slices of m bytes) into out (m elements of
// w bytes): the inverse of split.
func join(out []byte, planes [][]byte, m int) { joinGeneric(out, planes, m) }

// joinExp interleaves the m elements of an exponent row into out
// (planes.go).
func joinExp(out []byte, planes [][]byte, pairs []byte, table *[16]byte, m int) {
	joinExpGeneric(out, planes, pairs, table, m)
}
