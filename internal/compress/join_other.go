//go:build !amd64

package compress

// join interleaves planes (w slices of m bytes) into out (m elements of
// w bytes): the inverse of split.
func join(out []byte, planes [][]byte, m int) { joinGeneric(out, planes, m) }
