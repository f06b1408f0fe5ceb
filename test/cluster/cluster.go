// Package cluster starts real Shoal servers in-process on loopback for
// tests: one MDS and N OSTs, each a real gRPC server on 127.0.0.1 with its
// own directory, plus clients and FUSE mounts. It has controls to stop,
// restart and kill OSTs and to restart the whole cluster on the same
// directories.
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost"
)

// Options configure a test cluster.
type Options struct {
	OSTs   int           // default 6
	Layout layout.Layout // default RS 4+2, 1 MiB
	// HeartbeatTimeout after which the MDS considers an OST down. Default 2s.
	HeartbeatTimeout time.Duration
	// Client options used by Client and Mount (MDS is filled in).
	Client client.Options
	// SyncNamespace mounts with every namespace change durable when it
	// returns; by default a mount uses early replies, as `shoal mount`
	// does (client.Options.EarlyNamespaceReplies).
	SyncNamespace bool
	// Log to the test log (noisy); default discards.
	Verbose bool
	// Logger of every server and client, for tests that read the logs
	// (each line has proc=mds, ost-N, client or fuse); Verbose aside.
	Logger *slog.Logger
	// AllowOther mounts with allow_other, so that tests can act as other
	// users (setpriv) on mounts made by root.
	AllowOther bool
	// SessionLease of client sessions (opens, locks) at the MDS; default
	// the MDS's (10s).
	SessionLease time.Duration
	// DirLeaseTime is the length of directory and inode leases
	// (mds.Options.DirLeaseTime); default the MDS's (1s). Tests that
	// count what leases answer set it long, so that a loaded machine's
	// late renewal does not end a lease under them.
	DirLeaseTime time.Duration
	// GCGrace before the MDS deletes unreferenced chunks; default the
	// MDS's (2m).
	GCGrace time.Duration
	// Admin configures the MDS's administration worker (repair delay,
	// retire grace, ...); zero values take the MDS's defaults.
	Admin mds.AdminOptions
	// Scrub configures every OST's scrubber; zero values take the OST's
	// defaults.
	Scrub ost.ScrubOptions
	// Dir holds the servers' state and the mount points; default
	// t.TempDir(). Tests of semantics rather than durability may put it
	// on tmpfs, where fsync costs nothing (see TmpfsDir).
	Dir string
	// DirectIO of the OSTs (ost.Options.DirectIO); default theirs.
	DirectIO ost.DirectIO
	// Insecure runs every server and client in plaintext; by default the
	// cluster has a CA of its own and every connection is mutual TLS.
	Insecure bool
	// Identity configures the MDS's trust levels (root squash).
	Identity mds.IdentityOptions
	// NoDataPath starts the OSTs without their data path (as OSTs
	// before it): clients read and write chunks over gRPC.
	NoDataPath bool
	// SameDataPort starts an OST again (StartOST) with its data path on
	// the port it had, as an OST run with a fixed --data-listen does;
	// by default it gets a new one.
	SameDataPort bool
	// MDSReplicas runs the MDS as a replicated group of this many
	// members (docs/mds-raft.md), all in this process, member i on
	// DIR/mds-i with its own address; OSTs, clients and mounts get the
	// list of every address. 0 or 1: a single MDS without Raft.
	MDSReplicas int
	// MDSRaft is the template of the members' Raft options: the tick
	// (an election after ElectionTicks ticks without a leader), snapshot
	// and log settings; zero values take the MDS's defaults. ID, Peers
	// and Join are set per member.
	MDSRaft mds.RaftOptions
	// MDSPeerProxy puts a TCP proxy between each pair of members of a
	// replicated MDS, so that a test can cut members off from each other
	// (Partition, Heal; proxy.go).
	MDSPeerProxy bool
	// OSTCapacity[i], when not 0, caps the space OST i reports and holds
	// (ost.Options.Capacity): a small OST that fills up.
	OSTCapacity []uint64
	// Placement configures the MDS's placement (narrow writes, full
	// ratios); zero values take the MDS's defaults.
	Placement mds.PlacementOptions
	// Registry, when set, receives the metrics of the MDS and of every
	// OST (labelled ost="N"). Servers register when they start, so a test
	// that restarts them must not set it. Clients register in
	// Client.Registry.
	Registry prometheus.Registerer
}

// Cluster is a running test cluster.
type Cluster struct {
	t    testing.TB
	opts Options
	Dir  string
	log  *slog.Logger

	mu      sync.Mutex
	mdsAddr string // one address, or the group's list (a,b,c)
	mds     *mds.Server
	mdsSrv  *wire.Server
	members []*MDSMember // a replicated MDS (Options.MDSReplicas > 1)
	osts    []*OST
	clients []*client.Client
	// clientOpts are the options each client was made with; stubs the
	// stub of MDSStub for each, and stubConns the connections of every
	// stub (stub.go).
	clientOpts map[*client.Client]client.Options
	stubs      map[*client.Client]mdspb.MdsClient
	stubConns  []*wire.GroupConn
	mounts     []unmounter
	tls        *clusterTLS  // nil when Insecure
	proxies    *peerProxies // Options.MDSPeerProxy
}

// OST is one object storage target of the cluster.
type OST struct {
	Dir    string
	Addr   string
	Server *ost.Server // nil while stopped
	srv    *wire.Server

	dataAddr string // the data path's address at the last start

	// Capacity is the OST's ost.Options.Capacity (Options.OSTCapacity);
	// a change takes effect at the next StartOST.
	Capacity uint64
}

// Start starts a cluster in t.TempDir() and stops it when the test ends.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.OSTs == 0 {
		o.OSTs = 6
	}
	if o.Layout == (layout.Layout{}) {
		o.Layout = layout.Default
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = 2 * time.Second
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	c := &Cluster{t: t, opts: o, Dir: o.Dir, log: slog.New(slog.DiscardHandler)}
	if o.Logger != nil {
		c.log = o.Logger
	}
	if o.Verbose {
		c.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for i := 0; i < o.OSTs; i++ {
		c.osts = append(c.osts, &OST{Dir: filepath.Join(c.Dir, fmt.Sprintf("ost-%02d", i+1)), Addr: "127.0.0.1:0"})
		if i < len(o.OSTCapacity) {
			c.osts[i].Capacity = o.OSTCapacity[i]
		}
	}
	c.mdsAddr = "127.0.0.1:0"
	if err := c.setupTLS(); err != nil {
		t.Fatalf("cluster TLS: %v", err)
	}
	if err := c.startAll(); err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func (c *Cluster) ctx() context.Context { return context.Background() }

func (c *Cluster) startAll() error {
	if err := c.startMDS(); err != nil {
		return err
	}
	for i := range c.osts {
		if err := c.StartOST(i); err != nil {
			return err
		}
	}
	return c.WaitOSTsUp(len(c.osts))
}

func (c *Cluster) startMDS() error {
	if c.opts.MDSReplicas > 1 {
		return c.startGroup()
	}
	lo := c.opts.Layout
	m, err := mds.Open(c.ctx(), mds.Options{
		Dir: filepath.Join(c.Dir, "mds"), Logger: c.log.With("proc", "mds"),
		DefaultLayout:    &mdspb.Layout{K: uint32(lo.K), M: uint32(lo.M), Unit: uint32(lo.Unit)},
		HeartbeatTimeout: c.opts.HeartbeatTimeout,
		GCInterval:       500 * time.Millisecond,
		GCGrace:          c.opts.GCGrace,
		SessionLease:     c.opts.SessionLease,
		DirLeaseTime:     c.opts.DirLeaseTime,
		Admin:            c.opts.Admin,
		Placement:        c.opts.Placement,
		Creds:            c.Creds(pki.RoleMDS),
		Identity:         c.opts.Identity,
		Registry:         c.opts.Registry,
	})
	if err != nil {
		return err
	}
	srv, err := listenRetry(c.mdsAddr, m.Register, c.mdsServeOpts(m.Authorize)...)
	if err != nil {
		m.Close()
		return err
	}
	srv.OnStop(m.Drain)
	c.mds, c.mdsSrv, c.mdsAddr = m, srv, srv.Addr()
	return nil
}

// listenRetry binds addr, retrying for a while when a just-closed port is
// still held by the kernel.
func listenRetry(addr string, register func(*grpc.Server), opts ...wire.ServerOpt) (*wire.Server, error) {
	var err error
	for i := 0; i < 50; i++ {
		var s *wire.Server
		if s, err = wire.Listen(addr, register, opts...); err == nil {
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// MDSAddr is the MDS's address; for a replicated MDS the list of its
// members' addresses, comma-separated, as --mds takes it.
func (c *Cluster) MDSAddr() string { return c.mdsAddr }

// MDS is the running metadata server; for a replicated MDS the member
// serving as leader now, or nil (see MDSLeader to wait for one).
func (c *Cluster) MDS() *mds.Server {
	if c.members != nil {
		for _, m := range c.members {
			if st, ok := m.status(); ok && st.Serving {
				return m.Server
			}
		}
		return nil
	}
	return c.mds
}

// OST returns target i (0-based).
func (c *Cluster) OST(i int) *OST { return c.osts[i] }

// FlushChunkLogs writes the chunks every running OST holds in its chunk
// log as files now (the OSTs do so within moments on their own), for
// tests that open or damage chunk files directly.
func (c *Cluster) FlushChunkLogs(t testing.TB) {
	t.Helper()
	for i, o := range c.osts {
		if o.Server == nil {
			continue
		}
		if err := o.Server.FlushChunkLog(); err != nil {
			t.Fatalf("OST %d: %v", i, err)
		}
	}
}

// StartOST starts target i on its directory and address.
func (c *Cluster) StartOST(i int) error {
	t := c.osts[i]
	if t.Server != nil {
		return fmt.Errorf("OST %d is running", i)
	}
	s, err := wire.Bind(t.Addr, c.ostServeOpts()...)
	for try := 0; err != nil && try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		s, err = wire.Bind(t.Addr, c.ostServeOpts()...)
	}
	if err != nil {
		return err
	}
	oo := ost.Options{Dir: t.Dir, MDSAddr: c.mdsAddr, AdvertiseAddr: s.Addr(),
		Logger: c.log.With("proc", fmt.Sprintf("ost-%d", i)), HeartbeatInterval: 200 * time.Millisecond,
		DirectIO: c.opts.DirectIO, Scrub: c.opts.Scrub, Creds: c.Creds(pki.RoleOST), Capacity: t.Capacity}
	if c.opts.NoDataPath {
		oo.DataListen = ost.DataListenOff
	} else if c.opts.SameDataPort && t.dataAddr != "" {
		oo.DataListen = t.dataAddr
	}
	if c.opts.Registry != nil {
		oo.Registry = prometheus.WrapRegistererWith(prometheus.Labels{"ost": fmt.Sprint(i)}, c.opts.Registry)
	}
	o, err := ost.Open(c.ctx(), oo)
	if err != nil {
		s.Kill()
		return err
	}
	s.Serve(o.Register)
	ctx, cancel := context.WithTimeout(c.ctx(), 20*time.Second)
	defer cancel()
	if err := o.Start(ctx); err != nil {
		s.Kill()
		o.Close()
		return err
	}
	t.Server, t.srv, t.Addr = o, s, s.Addr()
	t.dataAddr = o.DataAddr()
	return nil
}

// AddOST adds a new, empty target to the running cluster, starts it and
// returns its index.
func (c *Cluster) AddOST() (int, error) {
	i := len(c.osts)
	c.osts = append(c.osts, &OST{Dir: filepath.Join(c.Dir, fmt.Sprintf("ost-%02d", i+1)), Addr: "127.0.0.1:0"})
	return i, c.StartOST(i)
}

// StopOST stops target i gracefully.
func (c *Cluster) StopOST(i int) {
	t := c.osts[i]
	if t.Server == nil {
		return
	}
	t.srv.Stop(time.Second)
	t.Server.Close()
	t.Server, t.srv = nil, nil
}

// KillOST stops target i abruptly: connections drop mid-call.
func (c *Cluster) KillOST(i int) {
	t := c.osts[i]
	if t.Server == nil {
		return
	}
	t.srv.Kill()
	t.Server.Close()
	t.Server, t.srv = nil, nil
}

// WaitOSTsUp waits until the MDS reports n OSTs up.
func (c *Cluster) WaitOSTsUp(n int) error {
	conn, err := wire.DialGroup(c.mdsAddr, wire.WithCreds(c.Creds(pki.RoleAdmin))) // one MDS or a group: follows the leader
	if err != nil {
		return err
	}
	defer conn.Close()
	stub := mdspb.NewMdsClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := stub.ListOsts(c.ctx(), &mdspb.ListOstsRequest{})
		up := 0
		for _, o := range r.GetOsts() {
			if o.GetUp() {
				up++
			}
		}
		if err == nil && up == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d OSTs up, want %d (err %v)", up, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns a new client of the cluster, closed when the test ends or
// the cluster stops.
func (c *Cluster) Client() *client.Client {
	c.t.Helper()
	return c.clientWith(c.opts.Client)
}

// ClientWith is Client with options of its own (MDS, Logger and, unless
// set, Creds are filled in).
func (c *Cluster) ClientWith(o client.Options) *client.Client {
	c.t.Helper()
	return c.clientWith(o)
}

func (c *Cluster) clientWith(o client.Options) *client.Client {
	c.t.Helper()
	o.MDS = c.mdsAddr
	o.Logger = c.log.With("proc", "client")
	if o.Creds == nil {
		o.Creds = c.Creds(pki.RoleAdmin)
	}
	cl, err := client.New(c.ctx(), o)
	if err != nil {
		c.t.Fatalf("client: %v", err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	if c.clientOpts == nil {
		c.clientOpts = map[*client.Client]client.Options{}
	}
	c.clientOpts[cl] = o
	c.mu.Unlock()
	return cl
}

// unmountAll unmounts every mount and closes every client.
func (c *Cluster) unmountAll() {
	c.mu.Lock()
	mounts, clients := c.mounts, c.clients
	c.mounts, c.clients = nil, nil
	c.mu.Unlock()
	for _, m := range mounts {
		var err error
		for try := 0; try < 50; try++ {
			if err = m.Unmount(); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			c.t.Errorf("unmount: %v", err)
		}
	}
	c.closeStubs()
	for _, cl := range clients {
		cl.Close()
	}
}

// Restart stops every server (after unmounting) and starts them again on
// the same directories and addresses.
func (c *Cluster) Restart() {
	c.t.Helper()
	c.stopServers()
	if err := c.startAll(); err != nil {
		c.t.Fatalf("restart: %v", err)
	}
}

func (c *Cluster) stopServers() {
	c.unmountAll()
	for i := range c.osts {
		c.StopOST(i)
	}
	c.stopGroup()
	if c.mdsSrv != nil {
		c.mdsSrv.Stop(time.Second)
		c.mds.Close()
		c.mds, c.mdsSrv = nil, nil
	}
}

// RestartMDS stops the MDS and starts it again on the same directory and
// address, leaving the OSTs, clients and mounts running: they reconnect.
// The MDS forgets every session, open handle and lock.
//
// For a replicated MDS it stops every member at once (KillMDS) and starts
// them all again.
func (c *Cluster) RestartMDS() {
	c.t.Helper()
	if c.members != nil {
		for _, m := range c.members {
			c.KillMDS(m.ID)
		}
	} else {
		c.mdsSrv.Stop(time.Second)
		c.mds.Close()
		c.mds, c.mdsSrv = nil, nil
	}
	if err := c.startMDS(); err != nil {
		c.t.Fatalf("restart MDS: %v", err)
	}
	up := 0
	for _, o := range c.osts {
		if o.Server != nil {
			up++
		}
	}
	if err := c.WaitOSTsUp(up); err != nil {
		c.t.Fatalf("restart MDS: %v", err)
	}
}

// StopMDS stops a single MDS as a clean shutdown does (calls in flight
// finish), leaving the OSTs, clients and mounts running; StartSingleMDS
// starts it again on the same directory and address. In between nothing
// listens there. For a replicated MDS use KillMDS and StartMDS.
func (c *Cluster) StopMDS() {
	c.t.Helper()
	if c.members != nil {
		c.t.Fatal("StopMDS of a replicated MDS: use KillMDS")
	}
	if c.mdsSrv == nil {
		return
	}
	c.mdsSrv.Stop(time.Second)
	c.mds.Close()
	c.mds, c.mdsSrv = nil, nil
}

// StartSingleMDS starts a single MDS that StopMDS stopped. Unlike
// RestartMDS it does not wait for the OSTs to heartbeat (WaitOSTsUp does).
func (c *Cluster) StartSingleMDS() error {
	if c.members != nil || c.mdsSrv != nil {
		return fmt.Errorf("StartSingleMDS: the MDS is running or replicated")
	}
	return c.startMDS()
}

// Stop stops everything. It is registered with t.Cleanup by Start.
func (c *Cluster) Stop() { c.stopServers() }

type unmounter interface{ Unmount() error }
