package csi

import (
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseEndpoint(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"unix:///csi/csi.sock", "/csi/csi.sock"},
		{"unix:/csi/csi.sock", "/csi/csi.sock"},
		{"/tmp/x.sock", "/tmp/x.sock"},
		{"tcp://127.0.0.1:10000", ""},
		{"unix://", ""},
	} {
		got, err := ParseEndpoint(c.in)
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestCapacityOf(t *testing.T) {
	for _, c := range []struct {
		req, lim int64
		want     uint64
		code     codes.Code
	}{
		{0, 0, 0, codes.OK},
		{10, 0, 10, codes.OK},
		{0, 20, 20, codes.OK},
		{10, 20, 10, codes.OK},
		{30, 20, 0, codes.InvalidArgument},
		{-1, 0, 0, codes.InvalidArgument},
	} {
		got, err := capacityOf(&csipb.CapacityRange{RequiredBytes: c.req, LimitBytes: c.lim})
		if got != c.want || status.Code(err) != c.code {
			t.Errorf("capacityOf(%d, %d) = %d, %v; want %d, %s", c.req, c.lim, got, err, c.want, c.code)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"pvc-0b5c", true}, {strings.Repeat("n", 255), true},
		{"", false}, {"a/b", false}, {"..", false}, {".creating-x", false}, {strings.Repeat("n", 256), false}, {"a\x00b", false},
	} {
		if err := checkName("volume", c.name); (err == nil) != c.ok {
			t.Errorf("checkName(%q) = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	const in = `24 1 0:22 / /proc rw,nosuid shared:13 - proc proc rw
300 24 0:77 / /var/lib/shoal-csi/mnt rw,nosuid,nodev,relatime shared:200 - fuse.shoal shoal:10.0.0.1:7700 rw,user_id=0
301 24 0:77 /volumes/pvc-1 /var/lib/kubelet/pods/p\040q/mount ro,relatime shared:200 - fuse.shoal shoal:10.0.0.1:7700 rw,user_id=0
`
	ms, err := parseMountinfo(strings.NewReader(in))
	if err != nil || len(ms) != 3 {
		t.Fatalf("parseMountinfo: %v, %v", ms, err)
	}
	e, ok := mountAt(ms, "/var/lib/kubelet/pods/p q/mount")
	if !ok || e.root != "/volumes/pvc-1" || e.fstype != shoalFSType || !e.readOnly() || e.dev != "0:77" {
		t.Fatalf("the bind mount: %+v, %v", e, ok)
	}
	if e, _ := mountAt(ms, "/var/lib/shoal-csi/mnt"); e.readOnly() || e.root != "/" {
		t.Fatalf("the node mount: %+v", e)
	}
	if _, err := parseMountinfo(strings.NewReader("garbage\n")); err == nil {
		t.Fatal("a bad line parsed")
	}
}
