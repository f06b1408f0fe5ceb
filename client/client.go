// Package client is the Shoal client library: metadata calls to the MDS,
// striping, Reed-Solomon encoding, write-back, read-ahead and degraded reads
// against the OSTs. The FUSE mount, the checkpoint API, the admin CLI and the
// benchmarks are built on it.
//
// Lock order: File.mu, then Client.mu. Client.mu guards only the connection,
// OST address and coder caches and is never held across an RPC. File.mu also comes
// before the session's locks (session.go).
//
// A Client holds a session at the MDS (session.go): files it opens are
// announced there, and file locks are taken there.
package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/erasure"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// RootIno is the inode number of the root directory.
const RootIno = 1

// Options configure a Client.
type Options struct {
	// MDS is the metadata server's address.
	MDS string
	// Logger receives warnings about failed chunks; nil discards.
	Logger *slog.Logger
	// Registry receives the client's metrics; nil registers none.
	Registry prometheus.Registerer
	// ExtentRows is the number of full rows in a full extent: the write
	// buffer is cut into extents of ExtentRows*K*Unit bytes. Default 4.
	ExtentRows int
	// UploadsPerFile bounds extents in flight per open file. Default 4.
	UploadsPerFile int
	// ChunkTimeout bounds one chunk read or write; a read that times out is
	// served by reconstruction from the other chunks. Default 10s.
	ChunkTimeout time.Duration
	// ReadCacheRows is the number of decoded rows each open file caches for
	// sequential reads and read-ahead. Default 2*ReadAheadRows+2.
	ReadCacheRows int
	// ReadAheadRows is how many rows ahead a sequential reader prefetches.
	// Default 8 (32 MiB for RS 4+2 with 1 MiB cells): measured with
	// BenchmarkClientSequential, 2 rows gave 505 MB/s, 4 588, 8 768, 16 852.
	ReadAheadRows int
	// Name identifies the client in its MDS session, for the MDS's logs.
	// Default "shoal".
	Name string
	// EarlyNamespaceReplies has the MDS acknowledge namespace changes
	// (create, mkdir, unlink, rename, link, symlink, setattr, xattrs) once
	// they are committed and visible to every client, before their WAL
	// sync, as a local file system does; SyncNamespace (fsync of a
	// directory) and every synced call (an extent commit: fsync, close
	// with data) make them durable. Off: each is durable when it returns.
	// The FUSE mount turns it on unless told not to (docs/fuse.md).
	EarlyNamespaceReplies bool
	// NoDirLeases turns directory leases off (dirlease.go): every lookup
	// asks the MDS. For comparisons and tests.
	NoDirLeases bool

	// NoCorruptReports stops reads from reporting the corrupt chunks they
	// meet to the MDS for repair (report.go). They still reconstruct the
	// bytes from parity. For tools and tests that leave repair to a scrub.
	NoCorruptReports bool
	// GRPCChunks sends chunk reads and writes over gRPC even to OSTs that
	// offer the data path (internal/datanet), as OSTs without one always
	// get them: for comparisons and tests.
	GRPCChunks bool
	// DataConnsPerOST bounds the idle data-path connections kept per OST.
	// Default datanet.DefaultMaxIdlePerAddr.
	DataConnsPerOST int
	// WireCompression compresses chunk bytes on the data path
	// (docs/compression.md, "Wire compression"): WireNone ("", "none":
	// never, the default), WireS2 ("s2": writes send s2 frames of the
	// chunks that shrink, reads ask the OST for them), WireAuto ("auto":
	// s2 to OSTs whose data address is not loopback). For clusters where
	// the network, not the disk or the CPU, is the limit. gRPC chunk I/O
	// is never compressed.
	WireCompression string
	// NoShortCircuit turns off the data path's local endpoints: by
	// default a client reads the chunks of OSTs on its own host from
	// their files (passed by the OST, verified here) and writes to them
	// over a unix socket without TLS (docs/data-path.md, "Short-circuit
	// reads"; docs/security.md).
	NoShortCircuit bool
	// Creds is the client's mutual TLS identity (a certificate of role
	// client or admin); nil: plaintext, for clusters run --insecure.
	Creds *wire.Creds
	// User is the identity MDS calls are made for unless a call's context
	// names one (WithUser); nil: none, which the MDS takes as root of this
	// node (mapped by the node's trust level; docs/security.md).
	User *User

	// MDSRetry bounds how long a call waits for a single MDS that cannot
	// be reached (stopped, restarting): the call is sent again, with
	// backoff, until the MDS answers or MDSRetry has passed since the
	// first try; then it fails with ErrUnavailable. The start and the end
	// of an outage are logged once each (retry.go). Default
	// DefaultMDSRetry; negative: no wait. A replicated MDS (several
	// addresses) is waited for by its group connection instead, for
	// wire.GroupRetryFor.
	MDSRetry time.Duration
	// OSTRetry bounds how long a chunk write waits for an OST that cannot
	// be reached while the MDS still counts it up (a restart: it is back
	// within a heartbeat timeout, or the MDS counts it down and the write
	// goes to another placement), and how long a read that cannot rebuild
	// its bytes from the chunks it reached waits for the others (retry.go).
	// Default DefaultOSTRetry; negative: no wait (one more try on a new
	// connection).
	OSTRetry time.Duration
}

// Defaults of Options.MDSRetry and Options.OSTRetry.
const (
	DefaultMDSRetry = 30 * time.Second
	DefaultOSTRetry = 10 * time.Second
)

func (o *Options) setDefaults() error {
	if o.MDS == "" {
		return fmt.Errorf("client: no MDS address: %w", errs.ErrInvalid)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ExtentRows <= 0 {
		o.ExtentRows = 4
	}
	if o.UploadsPerFile <= 0 {
		o.UploadsPerFile = 4
	}
	if o.ChunkTimeout <= 0 {
		o.ChunkTimeout = 10 * time.Second
	}
	if o.ReadAheadRows < 0 {
		o.ReadAheadRows = 0
	} else if o.ReadAheadRows == 0 {
		o.ReadAheadRows = 8
	}
	if o.ReadCacheRows <= 0 {
		o.ReadCacheRows = 2*o.ReadAheadRows + 2
	}
	if o.Name == "" {
		o.Name = "shoal"
	}
	if o.MDSRetry == 0 {
		o.MDSRetry = DefaultMDSRetry
	}
	if o.OSTRetry == 0 {
		o.OSTRetry = DefaultOSTRetry
	}
	switch o.WireCompression {
	case "":
		o.WireCompression = WireNone
	case WireNone, WireS2, WireAuto:
	default:
		return fmt.Errorf("client: WireCompression %q (want %s, %s or %s): %w", o.WireCompression, WireNone, WireS2, WireAuto, errs.ErrInvalid)
	}
	return nil
}

// Values of Options.WireCompression.
const (
	WireNone = "none"
	WireS2   = "s2"
	WireAuto = "auto"
)

// wireCompress returns the data path's datanet.ClientOptions.Compress for
// a WireCompression mode: nil for none.
func wireCompress(mode string) func(addr string) bool {
	switch mode {
	case WireS2:
		return func(string) bool { return true }
	case WireAuto:
		return func(addr string) bool { return !isLoopback(addr) }
	}
	return nil
}

// isLoopback reports whether addr (host:port) names this machine by a
// loopback address or "localhost": compression there only costs CPU.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Client talks to one Shoal cluster. It is safe for concurrent use.
type Client struct {
	opts    Options
	log     *slog.Logger
	mdsConn *wire.GroupConn
	mds     mdspb.MdsClient
	metrics *metrics
	load    ostLoad // chunk reads in flight over the network (balance.go)
	// dirs: directory attributes from the answers to this client's own
	// namespace changes (dirattrs.go).
	dirs dirAttrs

	data *datanet.Client  // the data path to the OSTs
	bufs *datanet.BufPool // chunk buffers: parity, rows, scratch

	mu struct {
		sync.Mutex
		conns    map[string]*grpc.ClientConn // by OST address
		ostAddr  map[uint32]string           // OST id -> address
		ostUp    map[uint32]bool             // OST id -> up, as the MDS last said
		dataAddr map[uint32]dataRoute        // OST id -> its data path, from Info
		coders   map[layout.Layout]*erasure.Coder
	}

	mdsWait   bool          // calls wait for an unreachable MDS (retry.go)
	outages   outages       // servers this client cannot reach now (retry.go)
	caps      capTable      // capabilities of extents for the OSTs (caps.go)
	rep       reporter      // corrupt chunks to report to the MDS (report.go)
	sess      session       // session.go
	leases    dirLeases     // dirlease.go
	early     earlyCount    // early namespace replies, for SyncNamespace (namespace.go)
	lookups   lookupBatcher // lookups batched at the MDS (lookupbatch.go)
	ahead     openAhead     // chunk files opened ahead of readers (openahead.go)
	closed    atomic.Bool   // set by Close and Abandon
	closeOnce sync.Once
	closeErr  error
}

// New connects to the cluster whose MDS is at o.MDS.
func New(ctx context.Context, o Options) (*Client, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	addr := o.MDS
	c := &Client{}
	conn, err := wire.DialGroup(addr, wire.WithCreds(o.Creds), wire.WithUnaryInterceptor(c.mdsCapInterceptor),
		wire.WithUnaryInterceptor(c.mdsWaitInterceptor), wire.WithUnaryInterceptor(c.earlyInterceptor)) // one address, or a replicated group

	if err != nil {
		return nil, fmt.Errorf("client: dial MDS %s: %w", addr, err)
	}
	bufs := &datanet.BufPool{}
	dopts := datanet.ClientOptions{MaxIdlePerAddr: o.DataConnsPerOST, Compress: wireCompress(o.WireCompression), Bufs: bufs, ShortCircuit: !o.NoShortCircuit}
	if o.Creds != nil {
		dopts.TLS = o.Creds.DataClientConfig // the data path: mutual TLS as on gRPC
	}
	*c = Client{opts: o, log: o.Logger, mdsConn: conn, mds: mdspb.NewMdsClient(conn), metrics: newMetrics(o.Registry),
		data: datanet.NewClient(dopts), bufs: bufs, mdsWait: o.MDSRetry > 0 && len(conn.Addrs()) == 1}
	registerDataStats(o.Registry, c.data.Stats)
	c.mu.conns = map[string]*grpc.ClientConn{}
	c.mu.ostAddr = map[uint32]string{}
	c.mu.ostUp = map[uint32]bool{}
	c.mu.dataAddr = map[uint32]dataRoute{}
	c.mu.coders = map[layout.Layout]*erasure.Coder{}
	c.leases.off = o.NoDirLeases
	c.leases.dirs = map[uint64]*dirState{}
	c.leases.renew = c.renew
	c.ahead.init()
	if _, err := c.mds.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: RootIno}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("client: MDS %s: %w", addr, err)
	}
	if err := c.startSession(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("client: MDS %s: %w", addr, err)
	}
	return c, nil
}

// Close ends the client's MDS session, which releases the files it still
// has open and its locks there, and closes every connection.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		if err := c.closeSession(); err != nil {
			// The MDS lets the session expire instead; nothing to do.
			c.log.Debug("close MDS session", "err", err)
		}
		c.closeErr = c.closeConns()
		c.lookups.wg.Wait()
		c.ahead.wg.Wait()
	})
	return c.closeErr
}

// closeConns closes every connection.
func (c *Client) closeConns() error {
	c.rep.stop()
	c.mu.Lock()
	conns := c.mu.conns
	c.mu.conns = map[string]*grpc.ClientConn{}
	c.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
	c.data.Close()
	return c.mdsConn.Close()
}

// ost returns a stub for OST id and its address, refreshing the address
// table from the MDS when the id is unknown or refresh is set.
func (c *Client) ost(ctx context.Context, id uint32, refresh bool) (ostpb.OstClient, string, error) {
	c.mu.Lock()
	addr, ok := c.mu.ostAddr[id]
	c.mu.Unlock()
	if !ok || refresh {
		if err := c.refreshOsts(ctx); err != nil {
			return nil, "", err
		}
		c.mu.Lock()
		addr, ok = c.mu.ostAddr[id]
		c.mu.Unlock()
		if !ok {
			return nil, "", fmt.Errorf("OST %d is not registered: %w", id, errs.ErrUnavailable)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cc, ok := c.mu.conns[addr]
	if !ok {
		var err error
		if cc, err = wire.Dial(addr, wire.WithCreds(c.opts.Creds), wire.WithUnaryInterceptor(c.ostCapInterceptor)); err != nil {
			return nil, "", fmt.Errorf("dial OST %d at %s: %w", id, addr, err)
		}
		c.mu.conns[addr] = cc
	}
	return ostpb.NewOstClient(cc), addr, nil
}

// dataRoute is an OST's data path as its Info reported it.
type dataRoute struct {
	grpcAddr string // the gRPC address Info was asked at
	addr     string // the data path's address; "" = none, use gRPC
}

// chunkRoute returns the stub of OST id and the address of its data path
// ("" when chunk I/O must use gRPC). The data address comes from the OST's
// Info, asked once per gRPC address and again on refresh, so that an OST
// restarted on a new data port is found again.
func (c *Client) chunkRoute(ctx context.Context, id uint32, refresh bool) (ostpb.OstClient, string, error) {
	o, addr, err := c.ost(ctx, id, refresh)
	if err != nil || c.opts.GRPCChunks {
		return o, "", err
	}
	c.mu.Lock()
	d, ok := c.mu.dataAddr[id]
	c.mu.Unlock()
	if ok && !refresh && d.grpcAddr == addr {
		return o, d.addr, nil
	}
	ictx, cancel := context.WithTimeout(ctx, c.opts.ChunkTimeout)
	r, err := o.Info(ictx, &ostpb.InfoRequest{})
	cancel()
	if err != nil {
		return nil, "", fmt.Errorf("OST %d at %s: info: %w", id, addr, err)
	}
	c.mu.Lock()
	c.mu.dataAddr[id] = dataRoute{grpcAddr: addr, addr: r.GetDataAddr()}
	c.mu.Unlock()
	return o, r.GetDataAddr(), nil
}

// coder returns the erasure coder of lo, made once per layout.
func (c *Client) coder(lo layout.Layout) (*erasure.Coder, error) {
	c.mu.Lock()
	cd, ok := c.mu.coders[lo]
	c.mu.Unlock()
	if ok {
		return cd, nil
	}
	cd, err := erasure.New(lo)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.mu.coders[lo] = cd
	c.mu.Unlock()
	return cd, nil
}

func (c *Client) refreshOsts(ctx context.Context) error {
	l, err := c.ListOsts(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range l.OSTs {
		c.mu.ostAddr[o.ID] = o.Addr
		c.mu.ostUp[o.ID] = o.Up
	}
	return nil
}

// layoutOf converts a wire layout.
func layoutOf(l *mdspb.Layout) (layout.Layout, error) {
	if l == nil {
		return layout.Layout{}, fmt.Errorf("missing layout: %w", errs.ErrInvalid)
	}
	lo := layout.Layout{K: int(l.GetK()), M: int(l.GetM()), Unit: int64(l.GetUnit())}
	return lo, lo.Validate()
}

// ErrEOF is io.EOF, returned by ReadAt at or past the end of a file.
var ErrEOF = io.EOF

// DataStats counts the chunk bytes this client moved over the data path
// and the bytes that carried them on the wire: fewer where wire
// compression (Options.WireCompression) paid.
func (c *Client) DataStats() datanet.Stats { return c.data.Stats() }
