package wire

import "testing"

func TestWithDefaultPort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"localhost", "localhost:7700"},
		{"localhost:", "localhost:7700"},
		{"localhost:9000", "localhost:9000"},
		{"10.0.0.1", "10.0.0.1:7700"},
		{"::1", "[::1]:7700"},
		{"[::1]", "[::1]:7700"},
		{"[::1]:9000", "[::1]:9000"},
		{"unix:///run/shoal.sock", "unix:///run/shoal.sock"},
	} {
		if got := WithDefaultPort(tc.in); got != tc.want {
			t.Errorf("WithDefaultPort(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
