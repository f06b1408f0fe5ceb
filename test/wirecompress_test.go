package test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/test/cluster"
)

// textLike is n bytes of text-like data (numbered log lines).
func textLike(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%08d level=info msg=\"chunk written\" extent=%d index=%d bytes=%d\n", i, i/6, i%6, 4096*(i%97))
	}
	return b.Bytes()[:n]
}

// TestWireCompression: a client with WireCompression "s2" writes and
// reads files over the TLS data path, text-like ones compressed on the
// wire both ways and random ones raw; the OSTs store the uncompressed
// bytes (a client without compression, and a degraded read from parity,
// read them back). "auto" compresses nothing on loopback. Wire
// compression is of TCP: the compressing clients do not use the OSTs'
// local endpoints (short-circuit), which the plain client does.
func TestWireCompression(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout(), Registry: reg})
	files := map[string][]byte{"text": textLike(3<<20 + 12345), "random": randBytes(5, 1<<20+777)}

	for _, name := range []string{"text", "random"} {
		data := files[name]
		creg := prometheus.NewRegistry()
		w := cl.ClientWith(client.Options{WireCompression: client.WireS2, Registry: creg, NoShortCircuit: true})
		before := counterValue(t, reg, "shoal_ost_write_bytes_total")
		writeFile(t, w, "/"+name, data)
		st := w.DataStats()
		// The same counts as metrics.
		if p, wb := counterValue(t, creg, "shoal_client_data_payload_bytes_total"), counterValue(t, creg, "shoal_client_data_wire_bytes_total"); uint64(p) != st.WriteBytes+st.ReadBytes || uint64(wb) != st.WriteWireBytes+st.ReadWireBytes {
			t.Errorf("%s: metrics say %v payload bytes and %v on the wire, DataStats %+v", name, p, wb, st)
		}
		stored := counterValue(t, reg, "shoal_ost_write_bytes_total") - before
		if uint64(stored) != st.WriteBytes {
			t.Errorf("%s: the OSTs stored %v bytes, the client wrote %d", name, stored, st.WriteBytes)
		}
		r := cl.ClientWith(client.Options{WireCompression: client.WireS2, NoShortCircuit: true})
		got, err := readFile(r, "/"+name)
		if err != nil {
			t.Fatalf("%s: read: %v", name, err)
		}
		mustEqual(t, name+" read compressed", got, data)
		rs := r.DataStats()
		t.Logf("%s: wrote %d bytes in %d on the wire, read %d in %d", name, st.WriteBytes, st.WriteWireBytes, rs.ReadBytes, rs.ReadWireBytes)
		if name == "text" {
			if st.WriteWireBytes*2 > st.WriteBytes || rs.ReadWireBytes*2 > rs.ReadBytes {
				t.Errorf("text: %+v, %+v: not compressed to under half", st, rs)
			}
		} else if st.WriteWireBytes*10 < st.WriteBytes*9 || rs.ReadWireBytes != rs.ReadBytes {
			// Only chunks holding the zero padding of the last row shrink.
			t.Errorf("random: %+v, %+v: compressed", st, rs)
		}
		// Stored raw: a client without compression reads them.
		plain := cl.ClientWith(client.Options{})
		got, err = readFile(plain, "/"+name)
		if err != nil {
			t.Fatalf("%s: read uncompressed: %v", name, err)
		}
		mustEqual(t, name+" read uncompressed", got, data)
		if ps := plain.DataStats(); ps.LocalReadBytes != ps.ReadBytes || ps.ReadWireBytes != 0 {
			t.Errorf("%s: a client on the OSTs' host read %+v, not all through their local endpoints", name, ps)
		}
	}
	// auto: every OST is on loopback here.
	a := cl.ClientWith(client.Options{WireCompression: client.WireAuto, NoShortCircuit: true})
	got, err := readFile(a, "/text")
	if err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "text read with auto", got, files["text"])
	if st := a.DataStats(); st.ReadWireBytes != st.ReadBytes || st.ReadBytes == 0 {
		t.Errorf("auto on loopback: %+v", st)
	}
	// Degraded: one OST down, the text file reads from parity, compressed.
	cl.StopOST(0)
	d := cl.ClientWith(client.Options{WireCompression: client.WireS2, NoShortCircuit: true})
	got, err = readFile(d, "/text")
	if err != nil {
		t.Fatalf("degraded read: %v", err)
	}
	mustEqual(t, "text degraded", got, files["text"])
}
