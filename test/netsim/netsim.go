// Package netsim simulates a network of hosts on one Linux machine: each
// host is a network namespace with one veth pair onto a bridge in the
// root namespace, its own address, and optionally a tc tbf-shaped link
// (both directions: tbf on the host's end shapes what it sends, tbf on
// the bridge's end what it receives). Processes run inside a host with
// `ip netns exec`. The kernel here has tbf but no netem, so delay comes
// from a relay in the harness (relay.go), not from the link.
//
// Names carry the harness's pid and a sequence number, so parallel runs
// never clash; a new Net first deletes the namespaces and bridges of
// harnesses whose process is gone (a killed run), and Close always
// removes its own. Needs root and iproute2 (ip, tc); New skips the test
// with a loud reason without them.
//
// The package drives iproute2 through its commands, not a netlink
// library (no new module dependency).
package netsim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const nsPrefix = "shoalsim-" // shoalsim-PID-SEQ-HOST

var seq atomic.Int64

// Net is one simulated network: a bridge and the hosts on it.
type Net struct {
	t      testing.TB
	id     string // base36 pid "x" seq: unique among live harnesses
	pid    int
	bridge string
	subnet string // "10.A.B": hosts are subnet.2 and up, the bridge .1
	Dir    string // logs and per-host files

	mu struct {
		sync.Mutex
		hosts  []*Host
		procs  []*Proc
		relays []*Relay
		closed bool
	}
}

// Host is one namespace: one machine of the simulated network.
type Host struct {
	net  *Net
	Name string
	NS   string
	IP   string
	veth string // the bridge's end, in the root namespace
	Rate string // tbf rate, e.g. "50mbit"; "" unshaped
}

// Require skips t, loudly, when this process cannot make namespaces.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP netsim: needs root to make network namespaces (run as root; `make scale` does)")
	}
	for _, c := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(c); err != nil {
			if _, err := os.Stat("/usr/sbin/" + c); err != nil {
				t.Skipf("SKIP netsim: %s (iproute2) not found: `bash tools/deps.sh` installs it", c)
			}
		}
	}
	probe := fmt.Sprintf("%sprobe-%d", nsPrefix, os.Getpid())
	if out, err := run("ip", "netns", "add", probe); err != nil {
		t.Skipf("SKIP netsim: cannot make a network namespace: %v: %s", err, out)
	}
	run("ip", "netns", "del", probe)
}

// New makes an empty network whose Close runs at t's cleanup.
func New(t testing.TB) *Net {
	t.Helper()
	Require(t)
	reapLeftovers()
	pid := os.Getpid()
	n := &Net{t: t, pid: pid, id: strconv.FormatInt(int64(pid), 36) + "x" + strconv.FormatInt(seq.Add(1), 36)}
	n.bridge = "ssb" + n.id
	n.subnet = freeSubnet()
	n.Dir = t.TempDir()
	t.Cleanup(n.Close)
	if out, err := run("ip", "link", "add", n.bridge, "type", "bridge"); err != nil {
		t.Fatalf("netsim: bridge: %v: %s", err, out)
	}
	n.must("ip", "addr", "add", n.subnet+".1/24", "dev", n.bridge)
	n.must("ip", "link", "set", n.bridge, "up")
	return n
}

// BridgeIP is the root namespace's address on the network (where relays
// listen).
func (n *Net) BridgeIP() string { return n.subnet + ".1" }

// AddHost makes host name with a link shaped to rate in both directions
// ("" for none).
func (n *Net) AddHost(name, rate string) *Host {
	n.mu.Lock()
	i := len(n.mu.hosts)
	h := &Host{net: n, Name: name, Rate: rate,
		NS:   fmt.Sprintf("%s%d-%s-%s", nsPrefix, n.pid, n.id, name),
		IP:   fmt.Sprintf("%s.%d", n.subnet, i+2),
		veth: fmt.Sprintf("ssv%sh%d", n.id, i)}
	n.mu.hosts = append(n.mu.hosts, h)
	n.mu.Unlock()
	if i+2 > 254 {
		n.t.Fatalf("netsim: too many hosts")
	}
	n.must("ip", "netns", "add", h.NS)
	n.must("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
	n.must("ip", "link", "set", h.veth, "master", n.bridge, "up")
	n.must("ip", "-n", h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
	n.must("ip", "-n", h.NS, "link", "set", "eth0", "up")
	n.must("ip", "-n", h.NS, "link", "set", "lo", "up")
	if rate != "" {
		// burst: at least rate/HZ; 64 KiB holds 50 ms of 10 Mbit/s.
		tbf := []string{"root", "tbf", "rate", rate, "burst", "64kb", "latency", "100ms"}
		n.must(append([]string{"tc", "qdisc", "add", "dev", h.veth}, tbf...)...)
		n.must(append([]string{"ip", "netns", "exec", h.NS, "tc", "qdisc", "add", "dev", "eth0"}, tbf...)...)
	}
	return h
}

// Hosts returns the hosts in the order they were added.
func (n *Net) Hosts() []*Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Host(nil), n.mu.hosts...)
}

func (n *Net) must(args ...string) {
	n.t.Helper()
	if out, err := run(args...); err != nil {
		n.t.Fatalf("netsim: %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Close kills every process and relay and deletes the hosts and the
// bridge. It is idempotent, and runs at the test's cleanup.
func (n *Net) Close() {
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return
	}
	n.mu.closed = true
	procs, hosts, relays := n.mu.procs, n.mu.hosts, n.mu.relays
	n.mu.Unlock()
	for _, r := range relays {
		r.Close()
	}
	for _, p := range procs {
		p.Kill()
	}
	for _, h := range hosts {
		deleteNS(h.NS)
	}
	run("ip", "link", "del", n.bridge)
}

// deleteNS kills whatever still runs in namespace ns and deletes it
// (which deletes its veth pair).
func deleteNS(ns string) {
	if out, err := run("ip", "netns", "pids", ns); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	run("ip", "netns", "del", ns)
}

// reapLeftovers deletes the namespaces and bridges of harness processes
// that no longer exist (a run killed before its cleanup).
func reapLeftovers() {
	alive := func(pid int) bool { return syscall.Kill(pid, 0) == nil || pid == os.Getpid() }
	if out, err := run("ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
				continue
			}
			rest := strings.TrimPrefix(f[0], nsPrefix)
			pid, err := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
			if err == nil && !alive(pid) || strings.HasPrefix(rest, "probe-") && err != nil {
				deleteNS(f[0])
			}
		}
	}
	if out, err := run("ip", "-o", "link", "show", "type", "bridge"); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name := strings.TrimSuffix(f[1], ":")
			if !strings.HasPrefix(name, "ssb") {
				continue
			}
			id := strings.TrimPrefix(name, "ssb")
			pid, err := strconv.ParseInt(strings.SplitN(id, "x", 2)[0], 36, 64)
			if err == nil && !alive(int(pid)) {
				run("ip", "link", "del", name)
			}
		}
	}
}

// freeSubnet picks a 10.A.B.0/24 that no interface of the root
// namespace uses.
func freeSubnet() string {
	out, _ := run("ip", "-4", "-o", "addr")
	for {
		s := fmt.Sprintf("10.%d.%d", 100+rand.IntN(100), rand.IntN(256))
		if !bytes.Contains(out, []byte(" "+s+".")) {
			return s
		}
	}
}

func run(args ...string) ([]byte, error) {
	return exec.Command(args[0], args[1:]...).CombinedOutput()
}

// LinkDown cuts the host off the network (`ip link set down` on the
// bridge's end of its veth): its processes live on and see the network
// go silent, as when a switch port or cable fails.
func (h *Host) LinkDown() { h.net.must("ip", "link", "set", h.veth, "down") }

// LinkUp connects the host again.
func (h *Host) LinkUp() { h.net.must("ip", "link", "set", h.veth, "up") }

// Proc is a process started in a host.
type Proc struct {
	Host *Host
	Name string
	Log  string // stdout and stderr, unless Start was given an stdout file
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs args in h (inside `ip netns exec`), logging stdout and
// stderr to a file named after name, in its own process group.
func (h *Host) Start(name string, args ...string) *Proc {
	return h.start(name, "", args...)
}

// StartOut is Start with stdout to a file of its own (read with Output).
func (h *Host) StartOut(name, stdout string, args ...string) *Proc {
	return h.start(name, stdout, args...)
}

func (h *Host) start(name, stdout string, args ...string) *Proc {
	n := h.net
	p := &Proc{Host: h, Name: name, Log: filepath.Join(n.Dir, h.Name+"-"+name+".log"), done: make(chan struct{})}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", h.NS}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if stdout != "" {
		of, err := os.Create(stdout)
		if err != nil {
			n.t.Fatal(err)
		}
		p.cmd.Stdout = of
		defer of.Close()
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		n.t.Fatalf("netsim: start %s on %s: %v", name, h.Name, err)
	}
	logf.Close()
	n.mu.Lock()
	n.mu.procs = append(n.mu.procs, p)
	n.mu.Unlock()
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p
}

// Kill sends SIGKILL to the process group and waits for the process.
func (p *Proc) Kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Signal sends sig to the process group.
func (p *Proc) Signal(sig syscall.Signal) { syscall.Kill(-p.cmd.Process.Pid, sig) }

// Wait waits up to d for the process to exit; false if it still runs.
func (p *Proc) Wait(d time.Duration) (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	case <-time.After(d):
		return false, nil
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Tail returns the last bytes of the process's log.
func (p *Proc) Tail() string {
	b, _ := os.ReadFile(p.Log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// KillAll kills every process the harness started in h: the host
// crashes (its link stays up).
func (h *Host) KillAll() {
	n := h.net
	n.mu.Lock()
	var ps []*Proc
	for _, p := range n.mu.procs {
		if p.Host == h {
			ps = append(ps, p)
		}
	}
	n.mu.Unlock()
	for _, p := range ps {
		p.Kill()
	}
}

// Run runs args in h to completion and returns its stdout; stderr goes
// into the error.
func (h *Host) Run(timeout time.Duration, args ...string) ([]byte, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := time.AfterFunc(timeout, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer t.Stop()
	if err := cmd.Wait(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s on %s: %w: %s", strings.Join(args, " "), h.Name, err, lastLines(stderr.String(), 5))
	}
	return stdout.Bytes(), nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
