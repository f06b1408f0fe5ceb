package test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/layout"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/ost/ostpb"
	"github.com/shoalfs/shoal/test/cluster"
)

// TestSecurityTLS: a TLS cluster refuses a client without a certificate
// and one with a certificate from another CA; a client of its own CA works.
func TestSecurityTLS(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout()})
	ctx := context.Background()
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 3*time.Second) }

	// Plaintext.
	cc, err := wire.Dial(cl.MDSAddr())
	if err != nil {
		t.Fatal(err)
	}
	c1, cancel := short()
	_, err = mdspb.NewMdsClient(cc).GetAttr(c1, &mdspb.GetAttrRequest{Ino: 1})
	cancel()
	cc.Close()
	if err == nil {
		t.Fatal("plaintext call to a TLS MDS succeeded")
	}

	// Another CA.
	other, err := pki.InitCA(filepath.Join(t.TempDir(), "other"), "other", 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := other.IssueTo(filepath.Join(t.TempDir(), "o"), pki.Request{Role: pki.RoleAdmin, Name: "intruder"})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := wire.LoadCreds(wire.TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA})
	if err != nil {
		t.Fatal(err)
	}
	cc, err = wire.Dial(cl.MDSAddr(), wire.WithCreds(oc))
	if err != nil {
		t.Fatal(err)
	}
	c2, cancel := short()
	_, err = mdspb.NewMdsClient(cc).GetAttr(c2, &mdspb.GetAttrRequest{Ino: 1})
	cancel()
	cc.Close()
	if err == nil {
		t.Fatal("a certificate of another CA was accepted")
	}

	// A client certificate may not call administrative methods.
	cr, err := cl.IssueCreds(nil, pki.RoleClient, "plain-client")
	if err != nil {
		t.Fatal(err)
	}
	cc, err = wire.Dial(cl.MDSAddr(), wire.WithCreds(cr))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := mdspb.NewMdsClient(cc).GetAttr(ctx, &mdspb.GetAttrRequest{Ino: 1}); err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	if _, err := mdspb.NewMdsClient(cc).RunGC(ctx, &mdspb.GCRequest{}); !errors.Is(err, errs.ErrPermission) {
		t.Fatalf("RunGC with a client certificate: %v, want permission denied", err)
	}
	if _, err := mdspb.NewMdsClient(cc).RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: "x", Addr: "127.0.0.1:1"}); !errors.Is(err, errs.ErrPermission) {
		t.Fatalf("RegisterOst with a client certificate: %v, want permission denied", err)
	}
}

// writeTestFile writes data to name in the root through c and returns
// the file's extent map as the MDS gives it to c.
func writeTestFile(t *testing.T, cl *cluster.Cluster, c *client.Client, name string, data []byte) *mdspb.GetExtentsReply {
	t.Helper()
	ctx := context.Background()
	f, _, err := c.CreateFileIn(ctx, client.RootIno, name, client.CreateOptions{Mode: 0o644, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := c.Lookup(ctx, client.RootIno, name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.MDSStub(c).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.Ino})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetExtents()) == 0 || len(r.GetCaps()) != len(r.GetExtents()) {
		t.Fatalf("%s: %d extents, %d capabilities", name, len(r.GetExtents()), len(r.GetCaps()))
	}
	return r
}

// TestSecurityCapabilities: OSTs refuse chunk calls without a capability,
// with a forged one, an expired one, one for another file's extent and a
// read capability used to write; the right one works. Also over gRPC
// chunk I/O end to end.
func TestSecurityCapabilities(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout(), Client: client.Options{GRPCChunks: true}})
	ctx := context.Background()
	c := cl.Client()
	data := bytes.Repeat([]byte("capability"), 5000)
	a := writeTestFile(t, cl, c, "a", data)
	b := writeTestFile(t, cl, c, "b", data)
	// Reads through the client (gRPC chunk I/O) carry their capabilities.
	f, err := c.OpenIno(ctx, a.GetAttr().GetIno())
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the client: %v", err)
	}
	f.Close(ctx)

	ext := a.GetExtents()[0].GetExtent()
	// The placement names OST ids; find the address of the first.
	var ostAddr string
	infos, err := cl.MDSStub(c).ListOsts(ctx, &mdspb.ListOstsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range infos.GetOsts() {
		if o.GetId() == ext.GetOsts()[0] {
			ostAddr = o.GetAddr()
		}
	}
	cc, err := wire.Dial(ostAddr, wire.WithCreds(cl.Creds(pki.RoleClient)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ost := ostpb.NewOstClient(cc)
	read := func(tok []byte, extent uint64) error {
		cctx := ctx
		if tok != nil {
			cctx = metadataCap(ctx, tok)
		}
		_, err := ost.ReadChunk(cctx, &ostpb.ReadChunkRequest{Id: &ostpb.ChunkId{Extent: extent, Index: 0}, Offset: 0, Length: 16})
		return err
	}
	reason := func(err error) string {
		var ce *errs.CapabilityError
		if errors.As(err, &ce) {
			return ce.Reason
		}
		return "not a capability error: " + errString(err)
	}
	if err := read(a.GetCaps()[0], ext.GetId()); err != nil {
		t.Fatalf("with its capability: %v", err)
	}
	if r := reason(read(nil, ext.GetId())); r != errs.CapMissing {
		t.Errorf("no capability: %s", r)
	}
	forgedKey, _ := capability.NewKey(bytes.Repeat([]byte{7}, capability.SecretSize))
	if r := reason(read(forgedKey.Sign(capability.Read, ext.GetId(), time.Now().Add(time.Hour)), ext.GetId())); r != errs.CapForged {
		t.Errorf("forged: %s", r)
	}
	tampered := append([]byte(nil), a.GetCaps()[0]...)
	tampered[12] ^= 1 // push the expiry
	if r := reason(read(tampered, ext.GetId())); r != errs.CapForged {
		t.Errorf("tampered: %s", r)
	}
	expired, err := cl.MDS().Capability(capability.Read, ext.GetId(), time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r := reason(read(expired, ext.GetId())); r != errs.CapExpired {
		t.Errorf("expired: %s", r)
	}
	if r := reason(read(b.GetCaps()[0], ext.GetId())); r != errs.CapExtent {
		t.Errorf("another file's capability: %s", r)
	}
	_, err = ost.WriteChunk(metadataCap(ctx, a.GetCaps()[0]), &ostpb.WriteChunkRequest{Id: &ostpb.ChunkId{Extent: ext.GetId(), Index: 9}, Data: []byte("x")})
	if r := reason(err); r != errs.CapAccess {
		t.Errorf("write with a read capability: %s", r)
	}
	// DeleteChunks is for administrators and the MDS (ost.Authorize;
	// TestSecurityOSTRoles): an administrator's certificate reaches the
	// capability check.
	acc, err := wire.Dial(ostAddr, wire.WithCreds(cl.Creds(pki.RoleAdmin)))
	if err != nil {
		t.Fatal(err)
	}
	defer acc.Close()
	_, err = ostpb.NewOstClient(acc).DeleteChunks(metadataCap(ctx, a.GetCaps()[0]), &ostpb.DeleteChunksRequest{Ids: []*ostpb.ChunkId{{Extent: ext.GetId()}}})
	if r := reason(err); r != errs.CapAccess {
		t.Errorf("delete with a read capability: %s", r)
	}
}

// TestSecurityOSTRoles: the OSTs' gRPC server checks the role of the
// caller's certificate as the data path does (ost.Authorize), before any
// capability: an OST's certificate may not read, write, stat or delete
// chunks, even with a good capability; a client's may read and write
// chunks but not delete or list them; administrators and the MDS may.
// Info is open to every role.
func TestSecurityOSTRoles(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout()})
	ctx := context.Background()
	data := bytes.Repeat([]byte("roles"), 3000)
	a := writeTestFile(t, cl, cl.Client(), "a", data)
	ext := a.GetExtents()[0].GetExtent()
	ostIdx := -1
	for i := range 3 {
		if cl.OST(i).Server.ID() == ext.GetOsts()[0] {
			ostIdx = i
		}
	}
	if ostIdx < 0 {
		t.Fatalf("no OST of the cluster is OST %d", ext.GetOsts()[0])
	}
	dial := func(cr *wire.Creds) ostpb.OstClient {
		cc, err := wire.Dial(cl.OST(ostIdx).Addr, wire.WithCreds(cr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return ostpb.NewOstClient(cc)
	}
	rcap := a.GetCaps()[0]
	wcap, err := cl.MDS().Capability(capability.Write, ext.GetId(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	acap, err := cl.MDS().Capability(capability.Admin, 0, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	id := &ostpb.ChunkId{Extent: ext.GetId(), Index: 0}
	spare := &ostpb.ChunkId{Extent: ext.GetId(), Index: 9}
	// roleRefused: a permission error that is not a capability's.
	roleRefused := func(what string, err error) {
		t.Helper()
		var ce *errs.CapabilityError
		if !errors.Is(err, errs.ErrPermission) || errors.As(err, &ce) {
			t.Errorf("%s: %v, want a role refusal (permission denied, not a capability error)", what, err)
		}
	}

	// An OST's certificate: nothing but Info, whatever its capability.
	byOST := dial(cl.Creds(pki.RoleOST))
	_, err = byOST.ReadChunk(metadataCap(ctx, rcap), &ostpb.ReadChunkRequest{Id: id, Length: 16})
	roleRefused("ReadChunk with an OST certificate", err)
	_, err = byOST.WriteChunk(metadataCap(ctx, wcap), &ostpb.WriteChunkRequest{Id: spare, Data: []byte("x")})
	roleRefused("WriteChunk with an OST certificate", err)
	_, err = byOST.StatChunk(metadataCap(ctx, rcap), &ostpb.StatChunkRequest{Id: id})
	roleRefused("StatChunk with an OST certificate", err)
	_, err = byOST.DeleteChunks(metadataCap(ctx, acap), &ostpb.DeleteChunksRequest{Ids: []*ostpb.ChunkId{spare}})
	roleRefused("DeleteChunks with an OST certificate", err)
	_, err = byOST.ListChunks(metadataCap(ctx, acap), &ostpb.ListChunksRequest{})
	roleRefused("ListChunks with an OST certificate", err)
	if _, err := byOST.Info(ctx, &ostpb.InfoRequest{}); err != nil {
		t.Errorf("Info with an OST certificate: %v", err)
	}

	// A client's certificate: chunk I/O, not administration.
	cr, err := cl.IssueCreds(nil, pki.RoleClient, "roles-client")
	if err != nil {
		t.Fatal(err)
	}
	byClient := dial(cr)
	r, err := byClient.ReadChunk(metadataCap(ctx, rcap), &ostpb.ReadChunkRequest{Id: id, Length: 16})
	if err != nil || len(r.GetData()) != 16 {
		t.Errorf("ReadChunk with a client certificate: %d bytes, %v", len(r.GetData()), err)
	}
	if _, err := byClient.WriteChunk(metadataCap(ctx, wcap), &ostpb.WriteChunkRequest{Id: spare, Data: []byte("x")}); err != nil {
		t.Errorf("WriteChunk with a client certificate: %v", err)
	}
	if _, err := byClient.StatChunk(metadataCap(ctx, rcap), &ostpb.StatChunkRequest{Id: id}); err != nil {
		t.Errorf("StatChunk with a client certificate: %v", err)
	}
	_, err = byClient.DeleteChunks(metadataCap(ctx, acap), &ostpb.DeleteChunksRequest{Ids: []*ostpb.ChunkId{spare}})
	roleRefused("DeleteChunks with a client certificate", err)
	_, err = byClient.Scrub(metadataCap(ctx, acap), &ostpb.ScrubRequest{})
	roleRefused("Scrub with a client certificate", err)

	// An administrator's certificate and the MDS's: all of it.
	byAdmin := dial(cl.Creds(pki.RoleAdmin))
	if _, err := byAdmin.ReadChunk(metadataCap(ctx, rcap), &ostpb.ReadChunkRequest{Id: id, Length: 16}); err != nil {
		t.Errorf("ReadChunk with an admin certificate: %v", err)
	}
	if _, err := byAdmin.ListChunks(metadataCap(ctx, acap), &ostpb.ListChunksRequest{}); err != nil {
		t.Errorf("ListChunks with an admin certificate: %v", err)
	}
	cc, err := cl.DialOST(ostIdx) // the MDS's certificate and an admin capability
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	del, err := ostpb.NewOstClient(cc).DeleteChunks(ctx, &ostpb.DeleteChunksRequest{Ids: []*ostpb.ChunkId{spare}})
	if err != nil || del.GetDeleted() != 1 {
		t.Errorf("DeleteChunks as the MDS: %d deleted, %v", del.GetDeleted(), err)
	}
}

// TestSecurityDataPath: the OSTs' framed-TCP data path (internal/datanet)
// serves mutual TLS only and checks capabilities as the gRPC chunk calls
// do: plaintext, a certificate of another CA and an OST's certificate are
// refused; a request without a capability, with a forged, tampered,
// expired or another file's one, or a read capability used to write, is
// refused with its reason and counted. Files written and read through the
// client over the data path come back byte for byte.
func TestSecurityDataPath(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout(), Registry: reg})
	ctx := context.Background()
	c := cl.Client()
	for i := range 3 {
		if cl.OST(i).Server.DataAddr() == "" {
			t.Fatalf("OST %d has no data path", i)
		}
	}

	// Through the client: chunk I/O goes over the TLS data path.
	data := randBytes(11, 300_000+17)
	a := writeTestFile(t, cl, c, "a", data)
	b := writeTestFile(t, cl, c, "b", data[:5000])
	f, err := cl.Client().OpenIno(ctx, a.GetAttr().GetIno()) // a new client: nothing cached
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if n, err := f.ReadAt(ctx, got, 0); (err != nil && !errors.Is(err, io.EOF)) || n != len(data) {
		t.Fatalf("read through the client: %d bytes, %v", n, err)
	}
	mustEqual(t, "read over the TLS data path", got, data)
	f.Close(ctx)
	if n := counterValue(t, reg, "shoal_ost_capability_refused_total"); n != 0 {
		t.Fatalf("%v capability refusals for the client's own reads and writes", n)
	}

	// Chunk 0 of a's first extent, on its OST's data path.
	ext := a.GetExtents()[0].GetExtent()
	var dataAddr string
	for i := range 3 {
		if o := cl.OST(i).Server; o.ID() == ext.GetOsts()[0] {
			dataAddr = o.DataAddr()
		}
	}
	if dataAddr == "" {
		t.Fatalf("no OST of the cluster is OST %d", ext.GetOsts()[0])
	}
	tlsClient := func(cr *wire.Creds) *datanet.Client {
		dc := datanet.NewClient(datanet.ClientOptions{TLS: cr.DataClientConfig})
		t.Cleanup(func() { dc.Close() })
		return dc
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 5*time.Second) }
	readWith := func(dc *datanet.Client, tok []byte, extent uint64) error {
		cctx, cancel := short()
		defer cancel()
		return dc.Read(cctx, dataAddr, extent, 0, tok, 0, [][]byte{make([]byte, 16)})
	}
	good := a.GetCaps()[0]

	// Transport: plaintext, another CA, a role that may not.
	plain := datanet.NewClient(datanet.ClientOptions{})
	defer plain.Close()
	if err := readWith(plain, good, ext.GetId()); err == nil {
		t.Error("a plaintext read from the TLS data path succeeded")
	}
	other, err := pki.InitCA(filepath.Join(t.TempDir(), "other"), "other", 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := other.IssueTo(filepath.Join(t.TempDir(), "o"), pki.Request{Role: pki.RoleClient, Name: "intruder"})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := wire.LoadCreds(wire.TLSFiles{Cert: p.Cert, Key: p.Key, CA: p.CA})
	if err != nil {
		t.Fatal(err)
	}
	if err := readWith(tlsClient(oc), good, ext.GetId()); err == nil {
		t.Error("a certificate of another CA was accepted by the data path")
	}
	if err := readWith(tlsClient(cl.Creds(pki.RoleOST)), good, ext.GetId()); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("read with an OST's certificate: %v, want permission denied", err)
	}

	// Capabilities.
	cr, err := cl.IssueCreds(nil, pki.RoleClient, "data-client")
	if err != nil {
		t.Fatal(err)
	}
	dc := tlsClient(cr)
	if err := readWith(dc, good, ext.GetId()); err != nil {
		t.Fatalf("with its capability: %v", err)
	}
	reason := func(err error) string {
		var ce *errs.CapabilityError
		if errors.As(err, &ce) && errors.Is(err, errs.ErrPermission) {
			return ce.Reason
		}
		return "not a capability error: " + errString(err)
	}
	before := counterValue(t, reg, "shoal_ost_capability_refused_total")
	if r := reason(readWith(dc, nil, ext.GetId())); r != errs.CapMissing {
		t.Errorf("no capability: %s", r)
	}
	forgedKey, _ := capability.NewKey(bytes.Repeat([]byte{7}, capability.SecretSize))
	if r := reason(readWith(dc, forgedKey.Sign(capability.Read, ext.GetId(), time.Now().Add(time.Hour)), ext.GetId())); r != errs.CapForged {
		t.Errorf("forged: %s", r)
	}
	tampered := append([]byte(nil), good...)
	tampered[12] ^= 1 // push the expiry
	if r := reason(readWith(dc, tampered, ext.GetId())); r != errs.CapForged {
		t.Errorf("tampered: %s", r)
	}
	expired, err := cl.MDS().Capability(capability.Read, ext.GetId(), time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if r := reason(readWith(dc, expired, ext.GetId())); r != errs.CapExpired {
		t.Errorf("expired: %s", r)
	}
	if r := reason(readWith(dc, b.GetCaps()[0], ext.GetId())); r != errs.CapExtent {
		t.Errorf("another file's capability: %s", r)
	}
	chunk := [][]byte{bytes.Repeat([]byte("x"), 4096)}
	wctx, cancel := short()
	err = dc.Write(wctx, dataAddr, ext.GetId(), 9, good, chunk)
	cancel()
	if r := reason(err); r != errs.CapAccess {
		t.Errorf("write with a read capability: %s", r)
	}
	if n := counterValue(t, reg, "shoal_ost_capability_refused_total") - before; n != 6 {
		t.Errorf("%v refusals counted, want 6", n)
	}
	// A write capability writes.
	wcap, err := cl.MDS().Capability(capability.Write, ext.GetId(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel = short()
	err = dc.Write(wctx, dataAddr, ext.GetId(), 9, wcap, chunk)
	cancel()
	if err != nil {
		t.Errorf("write with a write capability: %v", err)
	}
	// Refused requests leave dc working.
	if err := readWith(dc, good, ext.GetId()); err != nil {
		t.Errorf("read after the refusals: %v", err)
	}
}

// TestSecurityPermissions: the MDS checks POSIX permissions with the
// caller's identity, and squashes root of a squashed node.
func TestSecurityPermissions(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout(),
		Identity: mds.IdentityOptions{Squash: []string{"squashed"}}})
	ctx := context.Background()
	root := cl.Client()
	if _, err := root.MkdirIn(ctx, client.RootIno, "private", client.CreateOptions{Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	a := writeTestFile(t, cl, root, "secret", []byte("root only"))
	if _, err := root.SetAttr(ctx, a.GetAttr().GetIno(), client.SetAttrs{Valid: client.SetMode, Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	user := client.WithUser(ctx, client.User{UID: 1000, GID: 1000})
	if _, err := root.MkdirIn(user, client.RootIno, "nope", client.CreateOptions{Mode: 0o755, UID: 1000, GID: 1000}); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("uid 1000 mkdir in a 0755 root-owned directory: %v", err)
	}
	priv, err := root.Lookup(ctx, client.RootIno, "private")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Lookup(user, priv.Ino, "x"); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("uid 1000 lookup in a 0700 directory: %v", err)
	}
	r, err := cl.MDSStub(root).GetExtents(user, &mdspb.GetExtentsRequest{Ino: a.GetAttr().GetIno()})
	if err != nil || len(r.GetCaps()) != 0 {
		t.Errorf("uid 1000 got %d capabilities for a 0600 file of root (err %v)", len(r.GetCaps()), err)
	}
	if _, err := root.SetAttr(user, a.GetAttr().GetIno(), client.SetAttrs{Valid: client.SetMode, Mode: 0o666}); !errors.Is(err, errs.ErrNotPermitted) {
		t.Errorf("uid 1000 chmod of root's file: %v", err)
	}

	// Root squash: root of the squashed node is nobody.
	cr, err := cl.IssueCreds(nil, pki.RoleClient, "squashed")
	if err != nil {
		t.Fatal(err)
	}
	sqOpts := client.Options{MDS: cl.MDSAddr(), Creds: cr, User: &client.User{UID: 0, GID: 0}}
	sq, err := client.New(ctx, sqOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	if _, err := sq.Lookup(ctx, priv.Ino, "x"); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("squashed root lookup in a 0700 directory: %v", err)
	}
	if r, err := cl.MDSStubWith(sqOpts).GetExtents(ctx, &mdspb.GetExtentsRequest{Ino: a.GetAttr().GetIno()}); err != nil || len(r.GetCaps()) != 0 {
		t.Errorf("squashed root got %d capabilities for a 0600 file (err %v)", len(r.GetCaps()), err)
	}
	if _, err := cl.MDSStubWith(sqOpts).Mkdir(ctx, &mdspb.CreateRequest{Parent: client.RootIno, Name: []byte("x"), Mode: 0o755}); !errors.Is(err, errs.ErrPermission) {
		t.Errorf("squashed root mkdir in a 0755 root directory: %v", err)
	}
	// Root of a trusted node may.
	if _, err := root.Lookup(ctx, priv.Ino, "x"); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("root lookup in a 0700 directory: %v", err)
	}
}

func metadataCap(ctx context.Context, tok []byte) context.Context {
	return metadata.AppendToOutgoingContext(ctx, capability.MetadataKey, string(tok))
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// smallLayout is RS 2+1 with 4 KiB cells: three OSTs, small chunks.
func smallLayout() layout.Layout { return layout.Layout{K: 2, M: 1, Unit: 4096} }

// TestSecurityMDSRoles: the MDS's role table (mds/authorize.go,
// docs/security.md "Roles at the MDS") through a real TLS cluster. An
// OST's certificate and an MDS member's cannot create, rename, unlink,
// change attributes or layouts, read the namespace or run jobs (the OST's
// may heartbeat and report bad chunks); a client's may use the namespace
// but not administer; an administrator's may do both, but not register
// an OST.
func TestSecurityMDSRoles(t *testing.T) {
	cl := cluster.Start(t, cluster.Options{OSTs: 3, Layout: smallLayout()})
	ctx := context.Background()
	cr, err := cl.IssueCreds(nil, pki.RoleClient, "roles-client")
	if err != nil {
		t.Fatal(err)
	}
	stub := func(c *wire.Creds) mdspb.MdsClient {
		cc, err := wire.Dial(cl.MDSAddr(), wire.WithCreds(c))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return mdspb.NewMdsClient(cc)
	}
	// A file and a directory owned by root, made by the administrator.
	admin := stub(cl.Creds(pki.RoleAdmin))
	for _, n := range []string{"victim", "victim2"} {
		if _, err := admin.Create(ctx, &mdspb.CreateRequest{Parent: client.RootIno, Name: []byte(n), Mode: 0o100644}); err != nil {
			t.Fatal(err)
		}
	}
	root := &mdspb.Layout{K: 1, M: 0, Unit: 4096}
	ostID := cl.OST(0).Server.ID()
	type call struct {
		name string
		fn   func(mdspb.MdsClient) error
	}
	namespace := []call{
		{"Create", func(s mdspb.MdsClient) error {
			_, err := s.Create(ctx, &mdspb.CreateRequest{Parent: client.RootIno, Name: []byte("new"), Mode: 0o100644})
			return err
		}},
		{"Rename", func(s mdspb.MdsClient) error {
			_, err := s.Rename(ctx, &mdspb.RenameRequest{OldParent: client.RootIno, OldName: []byte("victim"), NewParent: client.RootIno, NewName: []byte("moved")})
			return err
		}},
		{"Unlink", func(s mdspb.MdsClient) error {
			_, err := s.Unlink(ctx, &mdspb.UnlinkRequest{Parent: client.RootIno, Name: []byte("victim2")})
			return err
		}},
		{"SetLayout", func(s mdspb.MdsClient) error {
			_, err := s.SetLayout(ctx, &mdspb.SetLayoutRequest{Ino: client.RootIno, Layout: root})
			return err
		}},
		{"SetAttr", func(s mdspb.MdsClient) error {
			_, err := s.SetAttr(ctx, &mdspb.SetAttrRequest{Ino: client.RootIno, Valid: uint32(mdspb.SetAttrBits_SETATTR_MODE), Mode: 0o755})
			return err
		}},
		{"Lookup", func(s mdspb.MdsClient) error {
			_, err := s.Lookup(ctx, &mdspb.LookupRequest{Parent: client.RootIno, Name: []byte("moved")})
			return err
		}},
		{"ReadDir", func(s mdspb.MdsClient) error {
			_, err := s.ReadDir(ctx, &mdspb.ReadDirRequest{Ino: client.RootIno})
			return err
		}},
	}
	adminOnly := []call{
		{"RunGC", func(s mdspb.MdsClient) error { _, err := s.RunGC(ctx, &mdspb.GCRequest{}); return err }},
		{"StopJob", func(s mdspb.MdsClient) error {
			_, err := s.StopJob(ctx, &mdspb.JobRequest{Kind: mds.JobScrub})
			return err
		}},
		{"SetOstState", func(s mdspb.MdsClient) error {
			_, err := s.SetOstState(ctx, &mdspb.SetOstStateRequest{Id: ostID, State: "active"})
			return err
		}},
	}
	heartbeat := func(s mdspb.MdsClient) error {
		_, err := s.Heartbeat(ctx, &mdspb.HeartbeatRequest{Id: 999}) // no such OST: NOT_FOUND once let through
		return err
	}
	report := func(s mdspb.MdsClient) error {
		_, err := s.ReportCorrupt(ctx, &mdspb.ReportCorruptRequest{})
		return err
	}
	refused := func(who, what string, err error) {
		t.Helper()
		if !errors.Is(err, errs.ErrPermission) {
			t.Errorf("%s calling %s: %v, want permission denied", who, what, err)
		}
	}
	allowed := func(who, what string, err error) {
		t.Helper()
		if errors.Is(err, errs.ErrPermission) || (err != nil && what != "Heartbeat") {
			t.Errorf("%s calling %s: %v", who, what, err)
		}
	}

	// Servers: nothing of the namespace, nothing of the administration.
	for _, srv := range []struct {
		who string
		s   mdspb.MdsClient
	}{{"an OST", stub(cl.Creds(pki.RoleOST))}, {"an MDS member", stub(cl.Creds(pki.RoleMDS))}} {
		for _, c := range append(append([]call(nil), namespace...), adminOnly...) {
			refused(srv.who, c.name, c.fn(srv.s))
		}
	}
	byOST := stub(cl.Creds(pki.RoleOST))
	if err := heartbeat(byOST); !errors.Is(err, errs.ErrNotFound) {
		t.Errorf("an OST's heartbeat for an unknown id: %v, want not found (let through)", err)
	}
	allowed("an OST", "ReportCorrupt", report(byOST))
	refused("an MDS member", "Heartbeat", heartbeat(stub(cl.Creds(pki.RoleMDS))))
	// Nothing changed.
	for _, n := range []string{"victim", "victim2"} {
		if _, err := admin.Lookup(ctx, &mdspb.LookupRequest{Parent: client.RootIno, Name: []byte(n)}); err != nil {
			t.Errorf("%s after the servers' calls: %v", n, err)
		}
	}
	a, err := admin.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: client.RootIno})
	if err != nil {
		t.Fatal(err)
	}
	if l := a.GetAttr().GetLayout(); l.GetK() != uint32(smallLayout().K) || l.GetUnit() != uint32(smallLayout().Unit) {
		t.Errorf("root layout changed by a server's certificate: %v", l)
	}

	// A client: the namespace, not the administration, not an OST's calls.
	byClient := stub(cr)
	for _, c := range namespace {
		allowed("a client", c.name, c.fn(byClient))
	}
	for _, c := range adminOnly {
		refused("a client", c.name, c.fn(byClient))
	}
	refused("a client", "Heartbeat", heartbeat(byClient))
	allowed("a client", "ReportCorrupt", report(byClient))

	// An administrator: both, but not an OST's registration.
	if _, err := admin.Rename(ctx, &mdspb.RenameRequest{OldParent: client.RootIno, OldName: []byte("moved"), NewParent: client.RootIno, NewName: []byte("victim")}); err != nil {
		t.Errorf("an administrator calling Rename: %v", err)
	}
	for _, c := range adminOnly {
		allowed("an administrator", c.name, c.fn(admin))
	}
	refused("an administrator", "Heartbeat", heartbeat(admin))
	_, err = admin.RegisterOst(ctx, &mdspb.RegisterOstRequest{Uuid: "fake", Addr: "127.0.0.1:1"})
	refused("an administrator", "RegisterOst", err)
}
