package netsim

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Ports, as in docs/deploy.md.
const (
	mdsPort     = 7700
	ostPort     = 7710
	ostDataPort = 7711
	mdsMetrics  = 9700
	ostMetrics  = 9710
)

// ClusterOptions say how many hosts of each kind, and their links.
type ClusterOptions struct {
	MDS     int    // members of the MDS group (1: a single MDS)
	OSTs    int    // OST hosts, one `shoal ost` each
	Clients int    // client hosts
	OSTRate string // tbf rate of each OST host's link; "" unshaped
	// DataDir holds the servers' directories; default a directory in
	// /dev/shm (tmpfs), so that the one disk of this machine is not what
	// is measured.
	DataDir string
}

// Cluster is a Shoal cluster on a simulated network: separate `shoal mds`
// and `shoal ost` processes, each in its own host, with certificates of
// the cluster's CA (mutual TLS everywhere), and client hosts that run the
// driver (test/netsim/driver) with client certificates.
type Cluster struct {
	*Net
	t       testing.TB
	Bin     string // shoal
	Drv     string // the driver
	TLS     string // certificate directory
	Data    string
	MDS     []*Host
	OSTs    []*Host
	Clients []*Host
	Admin   *Host // a host without servers for `shoal admin` (the first client)
	MDSAddr string
	mdsProc []*Proc
	ostProc []*Proc
}

var buildOnce struct {
	sync.Once
	dir string
	err error
}

// Binaries builds shoal and the driver once per test process, from the
// working tree as it is, into a temporary directory that TestMain
// removes.
func Binaries(t testing.TB) (shoal, driver string) {
	t.Helper()
	buildOnce.Do(func() {
		buildOnce.dir, buildOnce.err = os.MkdirTemp("", "netsim-bin-")
		if buildOnce.err != nil {
			return
		}
		for _, b := range [][2]string{{"shoal", "github.com/shoalfs/shoal/cmd/shoal"}, {"driver", "github.com/shoalfs/shoal/test/netsim/driver"}} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(buildOnce.dir, b[0]), b[1]).CombinedOutput()
			if err != nil {
				buildOnce.err = fmt.Errorf("go build %s: %v: %s", b[1], err, out)
				return
			}
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return filepath.Join(buildOnce.dir, "shoal"), filepath.Join(buildOnce.dir, "driver")
}

// StartCluster makes the hosts, the CA and certificates, starts the
// servers and waits until every OST is up.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	Require(t)
	c := &Cluster{t: t, Net: New(t)}
	c.Bin, c.Drv = Binaries(t)
	c.TLS = filepath.Join(c.Dir, "tls")
	c.Data = o.DataDir
	if c.Data == "" {
		d, err := os.MkdirTemp("/dev/shm", "netsim-")
		if err != nil {
			d = filepath.Join(c.Dir, "data")
		}
		c.Data = d
		t.Cleanup(func() { os.RemoveAll(d) })
	}
	for i := range o.MDS {
		c.MDS = append(c.MDS, c.AddHost(fmt.Sprintf("mds%d", i+1), ""))
	}
	for i := range o.OSTs {
		c.OSTs = append(c.OSTs, c.AddHost(fmt.Sprintf("oss%d", i+1), o.OSTRate))
	}
	for i := range max(o.Clients, 1) {
		c.Clients = append(c.Clients, c.AddHost(fmt.Sprintf("cl%d", i+1), ""))
	}
	c.Admin = c.Clients[0]
	c.certs()
	var addrs, peers []string
	for i, h := range c.MDS {
		addrs = append(addrs, fmt.Sprintf("%s:%d", h.IP, mdsPort))
		peers = append(peers, fmt.Sprintf("%d=%s:%d", i+1, h.IP, mdsPort))
	}
	c.MDSAddr = strings.Join(addrs, ",")
	c.mdsProc = make([]*Proc, len(c.MDS))
	for i := range c.MDS {
		c.StartMDS(i, strings.Join(peers, ","))
	}
	c.ostProc = make([]*Proc, len(c.OSTs))
	for i := range c.OSTs {
		c.StartOST(i)
	}
	c.WaitOSTsUp(len(c.OSTs), 60*time.Second)
	return c
}

func (c *Cluster) shoal(args ...string) {
	c.t.Helper()
	if out, err := exec.Command(c.Bin, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("shoal %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// certs makes the CA and one certificate per host, as docs/deploy.md
// does: mds and ost certificates name the host's address.
func (c *Cluster) certs() {
	ca := filepath.Join(c.Dir, "ca")
	c.shoal("admin", "ca", "init", "--dir", ca)
	for _, h := range c.MDS {
		// The bridge's address too: clients may reach the MDS through a
		// delaying relay there.
		c.shoal("admin", "cert", "issue", "--ca", ca, "--role", "mds", "--host", h.IP+","+c.BridgeIP(), h.Name, "--out", c.TLS)
	}
	for _, h := range c.OSTs {
		c.shoal("admin", "cert", "issue", "--ca", ca, "--role", "ost", "--host", h.IP+","+c.BridgeIP(), h.Name, "--out", c.TLS)
	}
	for _, h := range c.Clients {
		c.shoal("admin", "cert", "issue", "--ca", ca, "--role", "client", h.Name, "--out", c.TLS)
	}
	c.shoal("admin", "cert", "issue", "--ca", ca, "--role", "admin", "netsim-admin", "--out", c.TLS)
}

func (c *Cluster) tlsFlags(name string) []string {
	return []string{"--cert", filepath.Join(c.TLS, name+".crt"), "--key", filepath.Join(c.TLS, name+".key"), "--ca", filepath.Join(c.TLS, "ca.crt")}
}

// StartMDS starts (or restarts, on its directory) MDS member i.
func (c *Cluster) StartMDS(i int, peers string) {
	h := c.MDS[i]
	args := []string{c.Bin, "mds", "--dir", filepath.Join(c.Data, h.Name), "--listen", fmt.Sprintf("%s:%d", h.IP, mdsPort),
		"--metrics", fmt.Sprintf("%s:%d", h.IP, mdsMetrics), "--repair-after", "0"}
	if len(c.MDS) > 1 {
		args = append(args, "--id", strconv.Itoa(i+1), "--peers", peers)
	}
	c.mdsProc[i] = h.Start("mds", append(args, c.tlsFlags(h.Name)...)...)
}

// RestartMDS starts member i again after its host crashed.
func (c *Cluster) RestartMDS(i int) {
	var peers []string
	for j, h := range c.MDS {
		peers = append(peers, fmt.Sprintf("%d=%s:%d", j+1, h.IP, mdsPort))
	}
	c.StartMDS(i, strings.Join(peers, ","))
}

// StartOST starts (or restarts, on its directory) the OST of host i.
func (c *Cluster) StartOST(i int) {
	h := c.OSTs[i]
	args := []string{c.Bin, "ost", "--dir", filepath.Join(c.Data, h.Name), "--listen", fmt.Sprintf("%s:%d", h.IP, ostPort),
		"--data-listen", fmt.Sprintf("%s:%d", h.IP, ostDataPort), "--metrics", fmt.Sprintf("%s:%d", h.IP, ostMetrics),
		"--mds", c.MDSAddr}
	c.ostProc[i] = h.Start("ost", append(args, c.tlsFlags(h.Name)...)...)
}

// AdminJSON runs `shoal admin ARGS --json` on the admin host with the
// admin certificate and decodes its output into v.
func (c *Cluster) AdminJSON(v any, args ...string) error {
	full := append([]string{c.Bin, "admin"}, args...)
	full = append(full, "--json", "--mds", c.MDSAddr)
	full = append(full, c.tlsFlags("netsim-admin")...)
	out, err := c.Admin.Run(30*time.Second, full...)
	if err != nil {
		return err
	}
	return json.Unmarshal(out, v)
}

// OSTsUp returns how many OSTs the MDS counts up.
func (c *Cluster) OSTsUp() (int, error) {
	var r struct {
		Osts []struct {
			State string `json:"state"`
		} `json:"osts"`
	}
	if err := c.AdminJSON(&r, "osts"); err != nil {
		return 0, err
	}
	n := 0
	for _, o := range r.Osts {
		if o.State == "up" {
			n++
		}
	}
	return n, nil
}

// WaitOSTsUp waits until the MDS counts n OSTs up.
func (c *Cluster) WaitOSTsUp(n int, d time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < d {
		got, err := c.OSTsUp()
		if err == nil && got >= n {
			return time.Since(start)
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Fatalf("netsim: %d OSTs not up after %s (last error %v); mds log: %s", n, d, last, c.mdsProc[0].Tail())
	return 0
}

// Member is one row of `shoal admin mds status --json`.
type Member struct {
	ID     uint64 `json:"id"`
	Addr   string `json:"address"`
	Role   string `json:"role"`
	Leader uint64 `json:"leader"`
	Term   uint64 `json:"term"`
	Error  string `json:"error"`
}

// Members returns the MDS group's status.
func (c *Cluster) Members() ([]Member, error) {
	var ms []Member
	if err := c.AdminJSON(&ms, "mds", "status"); err == nil {
		return ms, nil
	}
	var wrapped struct {
		Members []Member `json:"members"`
	}
	err := c.AdminJSON(&wrapped, "mds", "status")
	return wrapped.Members, err
}

// Leader returns the index in c.MDS of the member the group names
// leader, or -1.
func (c *Cluster) Leader() int {
	ms, err := c.Members()
	if err != nil {
		return -1
	}
	for _, m := range ms {
		if m.Role == "leader" {
			return int(m.ID) - 1
		}
	}
	return -1
}

// Driver runs the driver's subcommand on client host i to completion and
// decodes its JSON into v.
func (c *Cluster) Driver(i int, v any, timeout time.Duration, sub string, args ...string) error {
	h := c.Clients[i]
	full := append([]string{c.Drv, sub, "--mds", c.MDSAddr, "--name", h.Name}, c.tlsFlags(h.Name)...)
	out, err := h.Run(timeout, append(full, args...)...)
	if err != nil {
		return err
	}
	if v != nil {
		return json.Unmarshal(out, v)
	}
	return nil
}

// StartDriver starts the driver's subcommand on client host i in the
// background, its stdout to the file out.
func (c *Cluster) StartDriver(i int, out, sub string, args ...string) *Proc {
	return c.StartDriverVia(i, c.MDSAddr, out, sub, args...)
}

// StartDriverVia is StartDriver with the MDS reached at mds (a relay).
func (c *Cluster) StartDriverVia(i int, mds, out, sub string, args ...string) *Proc {
	h := c.Clients[i]
	full := append([]string{c.Drv, sub, "--mds", mds, "--name", h.Name}, c.tlsFlags(h.Name)...)
	return h.StartOut("driver-"+sub, out, append(full, args...)...)
}
