package netsim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// load is a writer and a reader running on client hosts during a
// failure: the writer makes new files until stopped and lists each
// acknowledged one (closed after fsync) with its time; the reader reads
// the base files over and over, checking every byte.
type load struct {
	c              *Cluster
	stop, acked    string
	wout, rout     string
	writer, reader *Proc
	wres, rres     Result
}

func (c *Cluster) startLoad(tag string, size int, reader bool) *load {
	l := &load{c: c, stop: filepath.Join(c.Dir, tag+".stop"), acked: filepath.Join(c.Dir, tag+".acked"),
		wout: filepath.Join(c.Dir, tag+"-w.json"), rout: filepath.Join(c.Dir, tag+"-r.json")}
	l.writer = c.StartDriver(0, l.wout, "write", "--dir", "/fail", "--prefix", tag, "--size", strconv.Itoa(size),
		"--threads", "2", "--until", l.stop, "--acked", l.acked)
	if reader {
		l.reader = c.StartDriver(1, l.rout, "read", "--dir", "/fail", "--prefix", "base", "--files", "4",
			"--size", strconv.Itoa(size), "--threads", "2", "--until", l.stop)
	}
	return l
}

// finish stops the load and reads its results.
func (l *load) finish(t *testing.T) {
	t.Helper()
	os.WriteFile(l.stop, nil, 0o644)
	for _, p := range []struct {
		pr  *Proc
		out string
		res *Result
	}{{l.writer, l.wout, &l.wres}, {l.reader, l.rout, &l.rres}} {
		if p.pr == nil {
			continue
		}
		if ok, err := p.pr.Wait(2 * time.Minute); !ok || err != nil {
			t.Fatalf("%s on %s did not finish (%v): %s", p.pr.Name, p.pr.Host.Name, err, p.pr.Tail())
		}
		b, _ := os.ReadFile(p.out)
		if err := json.Unmarshal(b, p.res); err != nil {
			t.Fatalf("%s: %v: %s", p.out, err, b)
		}
	}
}

// acksAfter counts the files acknowledged after at, and returns the
// longest time between two acknowledgements (or from at to the first).
func (l *load) acksAfter(at time.Time) (n int, gap time.Duration) {
	b, _ := os.ReadFile(l.acked)
	prev := at
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		ns, _ := strconv.ParseInt(f[2], 10, 64)
		ts := time.Unix(0, ns)
		if ts.Before(at) {
			continue
		}
		n++
		gap = max(gap, ts.Sub(prev))
		prev = ts
	}
	return n, gap
}

// report logs what a phase saw, as docs/scale.md records it.
func (l *load) report(t *testing.T, what string, cut time.Time) {
	n, gap := l.acksAfter(cut)
	t.Logf("%s: writer %d files acked (%d after the cut, longest gap %.1fs), %d errors %v, slowest file %.1fs; reader %d files read, %d errors %v, slowest file %.1fs",
		what, l.wres.Files, n, gap.Seconds(), l.wres.Errors, l.wres.FirstErrors, l.wres.MaxFileSeconds,
		l.rres.Files, l.rres.Errors, l.rres.FirstErrors, l.rres.MaxFileSeconds)
	if n == 0 {
		t.Errorf("%s: no write was acknowledged after the cut: writes did not go on", what)
	}
	if l.reader != nil && l.rres.Errors > 0 {
		t.Errorf("%s: reads failed: %v", what, l.rres.FirstErrors)
	}
}

// verify reads back every acknowledged file of every load.
func (c *Cluster) verify(t *testing.T, loads ...*load) {
	t.Helper()
	for _, l := range loads {
		var r Result
		if err := c.Driver(1, &r, 3*time.Minute, "verify", "--acked", l.acked); err != nil {
			t.Fatalf("verify %s: %v", l.acked, err)
		}
		t.Logf("verify %s: %d acknowledged files read back whole, %d lost or wrong %v", filepath.Base(l.acked), r.Files, r.Errors, r.FirstErrors)
		if r.Errors > 0 {
			t.Errorf("acknowledged data lost: %v", r.FirstErrors)
		}
	}
}

func setupFail(t *testing.T, c *Cluster, k, m, size int) {
	t.Helper()
	if err := c.Driver(0, nil, time.Minute, "setup", "--dir", "/fail", "--k", strconv.Itoa(k), "--m", strconv.Itoa(m), "--unit", strconv.Itoa(256<<10)); err != nil {
		t.Fatal(err)
	}
	if err := c.Driver(0, nil, 2*time.Minute, "write", "--dir", "/fail", "--prefix", "base", "--files", "4", "--size", strconv.Itoa(size)); err != nil {
		t.Fatal(err)
	}
}

// TestNetsimQuick is the small version that `make test` runs (about 40
// s): a 3-OST-host scaling point, and one OST host cut off during a
// write and a read, then back.
func TestNetsimQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (-short): starts a cluster of processes in network namespaces")
	}
	const size = 4 << 20
	c := StartCluster(t, ClusterOptions{MDS: 1, OSTs: 3, Clients: 2, OSTRate: "40mbit"})
	setupFail(t, c, 2, 1, size)
	if err := c.Driver(0, nil, time.Minute, "setup", "--dir", "/scale", "--k", "2", "--m", "1", "--unit", strconv.Itoa(256<<10)); err != nil {
		t.Fatal(err)
	}
	p := measure(t, c, 1, 8, "q")
	t.Logf("3 OST hosts at 40 Mbit/s, one client host: write %.1f MiB/s, read %.1f MiB/s (links sum %.1f MiB/s)", p.WriteMiBps, p.ReadMiBps, 3*40e6/8/(1<<20))
	if p.WriteMiBps <= 0 || p.ReadMiBps <= 0 {
		t.Fatalf("no throughput: %+v", p)
	}
	c.mountCheck(t, 1)
	l := c.startLoad("q", size, true)
	time.Sleep(2 * time.Second)
	cut := time.Now()
	c.OSTs[0].LinkDown()
	time.Sleep(10 * time.Second)
	c.OSTs[0].LinkUp()
	back := c.WaitOSTsUp(3, 30*time.Second)
	time.Sleep(2 * time.Second)
	l.finish(t)
	l.report(t, "one of 3 OST hosts cut off for 10 s", cut)
	t.Logf("the OST host counted up again %.1fs after its link came back", back.Seconds())
	c.verify(t, l)
}

// mountCheck runs `shoal mount` on client host i, copies 8 MiB into the
// file system through it and compares it back, in one `ip netns exec`
// (each has its own mount namespace, so the mount is seen only there).
func (c *Cluster) mountCheck(t *testing.T, i int) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Logf("SKIP the mount check: no /dev/fuse (%v)", err)
		return
	}
	h := c.Clients[i]
	dir := filepath.Join(c.Dir, "mount-"+h.Name)
	tls := c.tlsFlags(h.Name)
	script := fmt.Sprintf(`set -e
mkdir -p %[1]s/mnt
%[2]s mount --mds %[3]s %[4]s %[1]s/mnt 2>%[1]s/mount.log &
for i in $(seq 100); do mountpoint -q %[1]s/mnt && break; sleep 0.1; done
head -c 8388608 /dev/urandom > %[1]s/src
cp %[1]s/src %[1]s/mnt/fail/via-mount
sync
cmp %[1]s/src %[1]s/mnt/fail/via-mount
umount %[1]s/mnt
wait
echo ok`, dir, c.Bin, c.MDSAddr, strings.Join(tls, " "))
	out, err := h.Run(time.Minute, "sh", "-c", script)
	if err != nil || !strings.Contains(string(out), "ok") {
		b, _ := os.ReadFile(filepath.Join(dir, "mount.log"))
		t.Fatalf("shoal mount on %s: %v: %s; mount log: %s", h.Name, err, out, lastLines(string(b), 10))
	}
	t.Logf("shoal mount on %s: 8 MiB copied in and compared back", h.Name)
}

// TestHostFailures cuts off and kills hosts under a writer and a reader
// (make scale): one OST host, m OST hosts, the MDS leader's host of a
// group of 3, and a client host holding a lock. Nothing acknowledged may
// be lost, and every host must come back without an operator.
func TestHostFailures(t *testing.T) {
	if os.Getenv("SHOAL_SCALE") != "1" {
		t.Skip("SKIP: SHOAL_SCALE=1 runs it (make scale)")
	}
	const size = 4 << 20
	const k, m = 4, 2
	c := StartCluster(t, ClusterOptions{MDS: 3, OSTs: 8, Clients: 3, OSTRate: "100mbit"})
	setupFail(t, c, k, m, size)
	var loads []*load

	t.Run("one OST host cut off", func(t *testing.T) {
		l := c.startLoad("a", size, true)
		loads = append(loads, l)
		time.Sleep(3 * time.Second)
		cut := time.Now()
		c.OSTs[0].LinkDown()
		time.Sleep(12 * time.Second)
		c.OSTs[0].LinkUp()
		back := c.WaitOSTsUp(len(c.OSTs), time.Minute)
		time.Sleep(2 * time.Second)
		l.finish(t)
		l.report(t, "one OST host cut off for 12 s", cut)
		t.Logf("oss1 counted up %.1fs after its link came back", back.Seconds())
	})
	t.Run("m OST hosts killed", func(t *testing.T) {
		l := c.startLoad("b", size, true)
		loads = append(loads, l)
		time.Sleep(3 * time.Second)
		cut := time.Now()
		for _, i := range []int{1, 2} {
			c.OSTs[i].KillAll()
		}
		time.Sleep(12 * time.Second)
		for _, i := range []int{1, 2} {
			c.StartOST(i)
		}
		back := c.WaitOSTsUp(len(c.OSTs), time.Minute)
		time.Sleep(2 * time.Second)
		l.finish(t)
		l.report(t, fmt.Sprintf("%d OST hosts killed for 12 s, then restarted", m), cut)
		t.Logf("oss2, oss3 counted up %.1fs after their restart", back.Seconds())
	})
	t.Run("MDS leader host cut off", func(t *testing.T) {
		old := c.Leader()
		if old < 0 {
			t.Fatal("no leader")
		}
		l := c.startLoad("c", size, true)
		loads = append(loads, l)
		time.Sleep(3 * time.Second)
		cut := time.Now()
		c.MDS[old].LinkDown()
		nl := -1
		for time.Since(cut) < 30*time.Second {
			if nl = c.Leader(); nl >= 0 && nl != old {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		elected := time.Since(cut)
		// Long enough for the clients' connections to the cut-off
		// leader to fail their keepalive (wire.KeepaliveTime + Timeout).
		time.Sleep(time.Until(cut.Add(22 * time.Second)))
		c.MDS[old].LinkUp()
		rejoined := time.Now()
		during, _ := l.acksAfter(cut)
		ok := false
		for time.Since(rejoined) < 30*time.Second && !ok {
			ms, err := c.Members()
			ok = err == nil && len(ms) == 3
			for _, mm := range ms {
				ok = ok && mm.Error == "" && (mm.Role == "leader" || mm.Role == "follower")
			}
			time.Sleep(250 * time.Millisecond)
		}
		l.finish(t)
		l.report(t, fmt.Sprintf("MDS leader mds%d cut off", old+1), cut)
		t.Logf("new leader mds%d seen %.1fs after the cut; %d files acknowledged while the old leader was cut off (22 s); old leader back as a member: %v (%.1fs after its link came back)", nl+1, elected.Seconds(), during, ok, time.Since(rejoined).Seconds())
		if during == 0 {
			t.Errorf("writes resumed only when the old leader's host came back")
		}
		if nl < 0 || nl == old {
			t.Errorf("no new leader after the cut")
		}
		if !ok {
			t.Errorf("the old leader did not rejoin")
		}
	})
	t.Run("client host holding a lock cut off", func(t *testing.T) {
		out := filepath.Join(c.Dir, "lock.out")
		holder := c.StartDriver(2, out, "lock", "--file", "/fail/lockfile")
		for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
			if b, _ := os.ReadFile(out); strings.Contains(string(b), "locked") {
				break
			}
			if time.Since(start) > 30*time.Second || holder.Exited() {
				t.Fatalf("lock not taken: %s", holder.Tail())
			}
		}
		var r struct {
			Granted float64 `json:"granted_after_s"`
		}
		c.Clients[2].LinkDown()
		err := c.Driver(1, &r, 2*time.Minute, "trylock", "--file", "/fail/lockfile", "--timeout", "60s")
		c.Clients[2].LinkUp()
		holder.Kill()
		if err != nil {
			t.Fatalf("the lock of the cut-off client was not released: %v", err)
		}
		t.Logf("lock of cl3 (cut off) granted to cl2 after %.1fs", r.Granted)
	})
	t.Run("nothing acknowledged lost", func(t *testing.T) {
		c.verify(t, loads...)
	})
}
