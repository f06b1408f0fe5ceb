package netsim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Result is what the driver's write and read print.
type Result struct {
	Bytes          int64    `json:"bytes"`
	Seconds        float64  `json:"seconds"`
	MiBps          float64  `json:"MiBps"`
	Files          int      `json:"files"`
	Errors         int      `json:"errors"`
	MaxFileSeconds float64  `json:"max_file_seconds"`
	FirstErrors    []string `json:"first_errors"`
}

// Point is one measurement of the scaling run.
type Point struct {
	OSTHosts    int     `json:"ost_hosts"`
	ClientHosts int     `json:"client_hosts"`
	WriteMiBps  float64 `json:"write_MiBps"`
	ReadMiBps   float64 `json:"read_MiBps"`
	// Wire figures: writes send (k+m)/k bytes per byte written.
	WriteWireMiBps float64 `json:"write_wire_MiBps"`
	// CPU seconds per MiB moved, of the clients and of all OSTs.
	ClientCPUPerMiB float64 `json:"client_cpu_s_per_MiB"`
	OSTCPUPerMiB    float64 `json:"ost_cpu_s_per_MiB"`
}

func (p Point) rounded() Point {
	r := func(v, unit float64) float64 { return math.Round(v/unit) * unit }
	p.WriteMiBps, p.ReadMiBps, p.WriteWireMiBps = r(p.WriteMiBps, 0.01), r(p.ReadMiBps, 0.01), r(p.WriteWireMiBps, 0.01)
	p.ClientCPUPerMiB, p.OSTCPUPerMiB = r(p.ClientCPUPerMiB, 0.0001), r(p.OSTCPUPerMiB, 0.0001)
	return p
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// layout of the scaling run: 2+1 fits the 3-OST point, the same at each.
const scaleK, scaleM = 2, 1

// measure writes then reads mibPerOST MiB per OST host from clients
// client hosts at once, 4 MiB files, 4 threads each.
func measure(t *testing.T, c *Cluster, clients, mibPerOST int, tag string) Point {
	threads := envInt("SHOAL_SCALE_THREADS", 4)
	const fileMiB = 4
	files := max(1, len(c.OSTs)*mibPerOST/fileMiB/clients)
	p := Point{OSTHosts: len(c.OSTs), ClientHosts: clients}
	cpu0 := c.ostCPU()
	for _, phase := range []string{"write", "read"} {
		var wg sync.WaitGroup
		res := make([]Result, clients)
		cpu := make([]float64, clients)
		errs := make([]error, clients)
		for i := range clients {
			wg.Go(func() {
				out := filepath.Join(c.Dir, fmt.Sprintf("%s-%s-%d.json", tag, phase, i))
				pr := c.StartDriver(i, out, phase, "--dir", "/scale", "--prefix", fmt.Sprintf("%s-c%d", tag, i),
					"--files", strconv.Itoa(files), "--size", strconv.Itoa(fileMiB<<20), "--threads", strconv.Itoa(threads))
				if ok, err := pr.Wait(5 * time.Minute); !ok || err != nil {
					errs[i] = fmt.Errorf("driver %s on %s: %v: %s", phase, pr.Host.Name, err, pr.Tail())
					return
				}
				b, _ := os.ReadFile(out)
				errs[i] = json.Unmarshal(b, &res[i])
				st := pr.cmd.ProcessState
				cpu[i] = (st.UserTime() + st.SystemTime()).Seconds()
			})
		}
		wg.Wait()
		var bytes int64
		var secs, ccpu float64
		for i := range clients {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if res[i].Errors > 0 {
				t.Fatalf("%s: %d errors: %v", phase, res[i].Errors, res[i].FirstErrors)
			}
			bytes += res[i].Bytes
			secs = max(secs, res[i].Seconds)
			ccpu += cpu[i]
		}
		mibps := float64(bytes) / (1 << 20) / secs
		mib := float64(bytes) / (1 << 20)
		cpu1 := c.ostCPU()
		if phase == "write" {
			p.WriteMiBps = mibps
			p.WriteWireMiBps = mibps * (scaleK + scaleM) / scaleK
			p.ClientCPUPerMiB = ccpu / mib
		} else {
			p.ReadMiBps = mibps
		}
		p.OSTCPUPerMiB += (cpu1 - cpu0) / mib / 2
		cpu0 = cpu1
	}
	return p
}

// ostCPU is the CPU seconds the OST processes have used so far.
func (c *Cluster) ostCPU() float64 {
	tick := 100.0 // USER_HZ
	var s float64
	for _, p := range c.ostProc {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseFloat(f[11], 64)
		sy, _ := strconv.ParseFloat(f[12], 64)
		s += (u + sy) / tick
	}
	return s
}

// TestScale is `make scale`'s scaling run: aggregate write and read
// throughput with 3, 6 and 12 OST hosts, each behind a link of
// SHOAL_SCALE_MBIT (default 40) Mbit/s both ways, from one client host
// and from SHOAL_SCALE_CLIENTS (default 4), each with SHOAL_SCALE_THREADS
// (default 4) threads; SHOAL_SCALE_OSTS (e.g. "12" or "6,12") picks the points, and
// SHOAL_SCALE_CLIENTS=1 measures only the one-client points. It writes the figures as one
// line of JSON to $SHOAL_SCALE_OUT. Skipped unless SHOAL_SCALE=1.
func TestScale(t *testing.T) {
	if os.Getenv("SHOAL_SCALE") != "1" {
		t.Skip("SKIP: SHOAL_SCALE=1 runs it (make scale)")
	}
	mbit := envInt("SHOAL_SCALE_MBIT", 40)
	clients := envInt("SHOAL_SCALE_CLIENTS", 4)
	mib := envInt("SHOAL_SCALE_MIB_PER_OST", 24)
	var pts []Point
	sizes := []int{3, 6, 12}
	if v := os.Getenv("SHOAL_SCALE_OSTS"); v != "" { // e.g. "12": one point
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("osts=%d", n), func(t *testing.T) {
			c := StartCluster(t, ClusterOptions{MDS: 1, OSTs: n, Clients: clients, OSTRate: fmt.Sprintf("%dmbit", mbit)})
			if err := c.Driver(0, nil, time.Minute, "setup", "--dir", "/scale", "--k", strconv.Itoa(scaleK), "--m", strconv.Itoa(scaleM), "--unit", strconv.Itoa(256<<10)); err != nil {
				t.Fatal(err)
			}
			for i, cl := range []int{1, clients} {
				if i > 0 && cl == 1 {
					break // SHOAL_SCALE_CLIENTS=1: the one-client point once
				}
				p := measure(t, c, cl, mib, fmt.Sprintf("n%dc%d", n, cl))
				t.Logf("ost_hosts=%d client_hosts=%d write %.1f MiB/s (wire %.1f) read %.1f MiB/s; links sum %.1f MiB/s; cpu s/MiB client %.3f osts %.3f",
					n, cl, p.WriteMiBps, p.WriteWireMiBps, p.ReadMiBps, float64(n*mbit)/8*1e6/(1<<20), p.ClientCPUPerMiB, p.OSTCPUPerMiB)
				pts = append(pts, p.rounded())
			}
			if os.Getenv("SHOAL_SCALE_PROFILE") == "1" && n == 12 {
				profile(t, c, clients, mib)
			}
		})
	}
	line, _ := json.Marshal(map[string]any{"link_mbit": mbit, "k": scaleK, "m": scaleM, "points": pts})
	t.Logf("%s", line)
	if out := os.Getenv("SHOAL_SCALE_OUT"); out != "" {
		os.WriteFile(out, append(line, '\n'), 0o644)
	}
}

// profile takes 5 s CPU profiles of one OST and the MDS during a write
// from every client, into $SHOAL_SCALE_PROFILE_DIR (default the test's
// directory).
func profile(t *testing.T, c *Cluster, clients, mib int) {
	dir := os.Getenv("SHOAL_SCALE_PROFILE_DIR")
	if dir == "" {
		dir = c.Dir
	}
	var wg sync.WaitGroup
	for _, s := range []struct{ name, addr string }{
		{"ost", fmt.Sprintf("%s:%d", c.OSTs[0].IP, ostMetrics)}, {"mds", fmt.Sprintf("%s:%d", c.MDS[0].IP, mdsMetrics)},
	} {
		wg.Go(func() {
			time.Sleep(2 * time.Second)
			out := filepath.Join(dir, s.name+".pprof")
			if _, err := c.Admin.Run(time.Minute, "curl", "-sf", "-o", out, "http://"+s.addr+"/debug/pprof/profile?seconds=5"); err != nil {
				t.Logf("profile %s: %v", s.name, err)
			}
		})
	}
	measure(t, c, clients, mib, "prof")
	wg.Wait()
	t.Logf("profiles in %s", dir)
}
