package mds

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Every call of the Mds service passes through one interceptor
// (intercept) before its handler runs. It holds the server open for the
// call (Close waits for it), refuses the call on a member that does not
// serve (a follower, a leader without its lease), times it by method,
// maps the caller's identity (perm.go), and for a mutation takes its
// request id and asks for an early reply when the call did; a retried
// mutation that was applied gets the answer it recorded (dedup.go). The
// handlers are the operations alone.

// mutation says how a method of the Mds service that changes the
// namespace takes part in the commit path.
type mutation struct {
	// reply, when set, makes the method deduplicated: its request id
	// goes with the mutation (runTxn), and a retry of one applied gets
	// the answer recorded, of this type (setReply).
	reply func() proto.Message
	// early: the method returns before its mutation is durable when
	// the caller asks (mdspb.CommitHeader = CommitEarly; a local
	// committer only: docs/fuse.md, "Durability").
	early bool
	// dirs, when set, names the lease keys the method changes: the
	// directories whose entries it changes, and (contentKey) the inodes
	// whose attributes or contents it may change. Before the handler
	// runs, serve recalls the leases other sessions hold on them and
	// keeps new ones from being granted until the handler returns
	// (leaseChange, dirlease_rpc.go). Inodes the handler finds as it
	// runs (the one an unlink removes a name of) it readies itself
	// (touchContent).
	dirs func(req any) []uint64
}

// changes adapts f, the directories a request of type R changes, to
// mutation.dirs.
func changes[R any](f func(R) []uint64) func(any) []uint64 {
	return func(req any) []uint64 {
		r, ok := req.(R)
		if !ok {
			return nil
		}
		return f(r)
	}
}

var (
	parentOfCreate  = changes(func(r *mdspb.CreateRequest) []uint64 { return []uint64{r.GetParent()} })
	parentOfUnlink  = changes(func(r *mdspb.UnlinkRequest) []uint64 { return []uint64{r.GetParent()} })
	parentOfSymlink = changes(func(r *mdspb.SymlinkRequest) []uint64 { return []uint64{r.GetParent()} })
	parentOfLink    = changes(func(r *mdspb.LinkRequest) []uint64 { return []uint64{r.GetNewParent(), contentKey(r.GetIno())} })
	parentsOfRename = changes(func(r *mdspb.RenameRequest) []uint64 { return []uint64{r.GetOldParent(), r.GetNewParent()} })
	parentOfMigrate = changes(func(r *mdspb.MigrateCommitRequest) []uint64 {
		return []uint64{r.GetTmpParent(), contentKey(r.GetSrcIno())}
	})
	// The inode leases (docs/fuse.md, "Inode leases") of the inodes
	// whose attributes or contents a method changes.
	contentOfSetAttr   = changes(func(r *mdspb.SetAttrRequest) []uint64 { return []uint64{contentKey(r.GetIno())} })
	contentOfSetX      = changes(func(r *mdspb.SetXattrRequest) []uint64 { return []uint64{contentKey(r.GetIno())} })
	contentOfRemoveX   = changes(func(r *mdspb.RemoveXattrRequest) []uint64 { return []uint64{contentKey(r.GetIno())} })
	contentOfCommit    = changes(func(r *mdspb.CommitExtentsRequest) []uint64 { return []uint64{contentKey(r.GetIno())} })
	contentOfFalloc    = changes(func(r *mdspb.FallocateRequest) []uint64 { return []uint64{contentKey(r.GetIno())} })
	contentOfClone     = changes(func(r *mdspb.CloneExtentsRequest) []uint64 { return []uint64{contentKey(r.GetDstIno())} })
	contentOfSetLayout = changes(func(r *mdspb.SetLayoutRequest) []uint64 { return []uint64{contentKey(r.GetIno())} })
)

func newAttrReply() proto.Message   { return &mdspb.AttrReply{} }
func newRenameReply() proto.Message { return &mdspb.RenameReply{} }
func newUnlinkReply() proto.Message { return &mdspb.UnlinkReply{} }

// mutations are the methods whose mutation the interceptor qualifies.
// Any other method's commits carry no request id and wait until durable;
// retried, they run again (reads, sessions, allocations: an allocation
// retried leaves an unused pending extent, which GC collects).
var mutations = map[string]mutation{
	"Create":        {reply: newAttrReply, early: true, dirs: parentOfCreate},
	"Mkdir":         {reply: newAttrReply, early: true, dirs: parentOfCreate},
	"Symlink":       {reply: newAttrReply, early: true, dirs: parentOfSymlink},
	"Link":          {reply: newAttrReply, early: true, dirs: parentOfLink},
	"Unlink":        {reply: newUnlinkReply, early: true, dirs: parentOfUnlink},
	"Rmdir":         {reply: newUnlinkReply, early: true, dirs: parentOfUnlink},
	"Rename":        {reply: newRenameReply, early: true, dirs: parentsOfRename},
	"SetAttr":       {reply: newAttrReply, early: true, dirs: contentOfSetAttr},
	"SetXattr":      {reply: newAttrReply, early: true, dirs: contentOfSetX},
	"RemoveXattr":   {reply: newAttrReply, early: true, dirs: contentOfRemoveX},
	"CommitExtents": {reply: newAttrReply, dirs: contentOfCommit},
	"Fallocate":     {reply: newAttrReply, dirs: contentOfFalloc},
	"CloneExtents":  {dirs: contentOfClone},
	"SetLayout":     {dirs: contentOfSetLayout},
	"MigrateCommit": {early: true, dirs: parentOfMigrate},
}

// callInfo is what the interceptor learned of a call, in its context.
type callInfo struct {
	caller caller // the mapped identity (perm.go)
	reqID  string // request id of a deduplicated mutation, or ""
	early  bool   // the mutation may be answered before it is durable
	// session is the caller's MDS session (wire.SessionHeader), 0 when
	// it names none or a malformed one: its own directory leases are
	// not recalled for its changes (dirlease.go).
	session uint64
	// keys are the lease keys the request names, whose change serve
	// readied before the handler ran; found, those an earlier run of the
	// handler found (leaseWaitError), readied too, without sparing the
	// session's own inode leases; ends are the changes the handler
	// readied itself (touchContent), ended by serve once it returned.
	keys  []uint64
	found []uint64
	ends  []func()
}

type callKey struct{}

// callFrom returns the call in ctx; the zero callInfo (no request id, no
// early reply) for a ctx of no call.
func callFrom(ctx context.Context) callInfo {
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	if ci == nil {
		return callInfo{}
	}
	return *ci
}

// callerOf returns the mapped identity of the call in ctx: the one the
// interceptor found, or, for a ctx it did not see (an internal call with
// a background context), the identity in ctx's metadata, if any.
func (s *Server) callerOf(ctx context.Context) caller {
	if ci, ok := ctx.Value(callKey{}).(*callInfo); ok {
		return ci.caller
	}
	c, err := s.mapCaller(ctx)
	if err != nil {
		return caller{squashed: true, uid: s.o.Identity.SquashUID, gid: s.o.Identity.SquashGID}
	}
	return c
}

// method is what serve knows of one method of the Mds service.
type method struct {
	op string // metric label and error prefix: the name in lower case
	mutation
}

// methodTable describes every method of the Mds service (Open builds it
// once; serve reads it).
func methodTable() map[string]method {
	t := make(map[string]method, len(mdspb.Mds_ServiceDesc.Methods))
	for _, m := range mdspb.Mds_ServiceDesc.Methods {
		t[m.MethodName] = method{op: strings.ToLower(m.MethodName), mutation: mutations[m.MethodName]}
	}
	return t
}

// serve is the interceptor: it runs handler h of method name for one
// call (req), as the comment at the top of this file says. Every method
// of the Mds service is serve over its handler (rpc.go).
func serve[Req any, Resp proto.Message](s *Server, ctx context.Context, name string, req Req, h func(context.Context, Req) (Resp, error)) (_ Resp, err error) {
	var zero Resp
	m := s.methods[name]
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return zero, fmt.Errorf("mds: server closed: %w", errs.ErrUnavailable)
	}
	// Only the leader serves (reads included: linearizable reads from
	// the leader's applied state under its lease).
	if err := s.commits.check(); err != nil {
		return zero, fmt.Errorf("mds %s: %w", m.op, err)
	}
	t0 := time.Now()
	defer func() { s.m.observe(m.op, t0, err) }()
	cl, err := s.mapCaller(ctx)
	if err != nil {
		return zero, err
	}
	ci := &callInfo{caller: cl}
	md, _ := metadata.FromIncomingContext(ctx)
	if m.early {
		v := md.Get(mdspb.CommitHeader)
		ci.early = len(v) == 1 && v[0] == mdspb.CommitEarly
	}
	if v := md.Get(wire.SessionHeader); len(v) == 1 {
		if id, err := strconv.ParseUint(v[0], 10, 64); err == nil {
			ci.session = id
		}
	}
	if v := md.Get(wire.ReleaseHeader); len(v) > 0 && len(v) <= 16 && ci.session != 0 {
		gens := make([]uint64, 0, len(v))
		for _, g := range v {
			if gen, err := strconv.ParseUint(g, 10, 64); err == nil {
				gens = append(gens, gen)
			}
		}
		s.leases.release(ci.session, gens)
	}
	if m.reply != nil {
		if ids := md.Get(wire.RequestIDHeader); len(ids) == 1 && ids[0] != "" && len(ids[0]) <= 128 {
			ci.reqID = ids[0]
		}
	}
	ctx = context.WithValue(ctx, callKey{}, ci)
	var resp Resp
	if m.dirs != nil {
		ci.keys = m.dirs(req)
	}
	for try := 0; ; try++ {
		resp, err = runLeased(s, ctx, ci, req, h)
		var lw *leaseWaitError
		if !errors.As(err, &lw) {
			break
		}
		if try == 8 {
			// The names it removes keep changing under it.
			return zero, fmt.Errorf("mds: %s: leases kept changing: %w", name, errs.ErrUnavailable)
		}
		ci.found = append(ci.found, lw.keys...)
	}
	var de *dupError
	if err == nil || ci.reqID == "" || !errors.As(err, &de) {
		return resp, err
	}
	s.log.DebugContext(ctx, "retried request already applied", "op", name, "request", ci.reqID, "recorded", de.replied)
	out, err := s.retried(ctx, name, m.mutation, req, de)
	if err != nil {
		return zero, err
	}
	r, ok := out.(Resp)
	if !ok {
		return zero, fmt.Errorf("mds: answer %T of a retried %s: %w", out, name, errs.ErrCorrupt)
	}
	return r, nil
}

// runLeased runs handler h for req with the changes of ci.keys readied
// (leaseChange), and ends them, and those h readied itself, once it
// returned.
func runLeased[Req any, Resp proto.Message](s *Server, ctx context.Context, ci *callInfo, req Req, h func(context.Context, Req) (Resp, error)) (resp Resp, err error) {
	ci.ends = nil
	var dones []func(error)
	defer func() {
		for _, done := range dones {
			done(err)
		}
	}()
	for i, keys := range [][]uint64{ci.keys, ci.found} {
		if len(keys) == 0 {
			continue
		}
		done, err := s.leaseChangeAs(ctx, i == 0, keys...)
		if err != nil {
			return resp, err
		}
		dones = append(dones, done)
	}
	resp, err = h(ctx, req)
	for _, end := range ci.ends {
		end()
	}
	return resp, err
}
