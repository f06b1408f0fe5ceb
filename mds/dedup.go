package mds

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Request ids (docs/mds-raft.md, "Retries"). A client of a replicated MDS
// sends every call with a request id (wire.RequestIDHeader) that stays the
// same when it retries the call at another member after a leader change
// or a timeout. The mutation's batch records the id ("q" key, expiring
// after requestTTL) together with the mutation's answer (txn.setReply:
// the attributes of the inode it made or changed, the attributes of the
// inode an unlink removed), in the same Raft entry as the mutation. So a
// retry of a mutation that was applied finds it, is not applied again
// (errDuplicate), and gets the first try's answer back, even if other
// clients renamed or removed the name in between: a create retried after
// another client renamed its file away answers with the file it created,
// not ENOENT, and creates nothing.
//
// Methods that record no answer (Rename and Rmdir, whose answer is
// empty), and records written before answers were, fall back to the
// method's entry in dupReplies, which derives an answer from the current
// state (a create answers with the entry at its name).
//
// Only the methods of dupReplies take part; any other call runs again when
// retried (reads, sessions, allocations: an allocation retried leaves an
// unused pending extent, which GC collects).

type reqIDKey struct{}

// reqSlot is a call's request id, whether update found it applied, and
// then the answer the first try recorded, if replied. (The handler's
// error reaches the wrapper already turned into a gRPC status by the
// server's interceptor, so the finding travels here.)
type reqSlot struct {
	id      string
	dup     bool
	reply   []byte
	replied bool
}

// requestSlot returns the call's request id slot when the method takes
// part in deduplication. A single MDS deduplicates too: its clients
// resend a call the MDS may have applied before it went down
// (client.Options.MDSRetry).
func (s *Server) requestSlot(ctx context.Context) *reqSlot {
	sl, _ := ctx.Value(reqIDKey{}).(*reqSlot)
	return sl
}

// dupRecorded are the answer types of the methods that record their
// answer (setReply), and what a retry does with the recorded answer
// beyond returning it (nil: nothing).
var dupRecorded = map[string]struct {
	reply func() proto.Message
	fix   func(s *Server, ctx context.Context, req any, reply proto.Message) (any, error)
}{
	"Create":        {func() proto.Message { return &mdspb.AttrReply{} }, dupCreateRecorded},
	"Mkdir":         {func() proto.Message { return &mdspb.AttrReply{} }, nil},
	"Symlink":       {func() proto.Message { return &mdspb.AttrReply{} }, nil},
	"Link":          {func() proto.Message { return &mdspb.AttrReply{} }, nil},
	"Unlink":        {func() proto.Message { return &mdspb.UnlinkReply{} }, nil},
	"SetAttr":       {func() proto.Message { return &mdspb.AttrReply{} }, nil},
	"CommitExtents": {func() proto.Message { return &mdspb.AttrReply{} }, nil},
	"Fallocate":     {func() proto.Message { return &mdspb.AttrReply{} }, nil},
	"SetXattr":      {func() proto.Message { return &mdspb.AttrReply{} }, nil},
	"RemoveXattr":   {func() proto.Message { return &mdspb.AttrReply{} }, nil},
}

// dupReplies derives the answer of a retried mutation that was applied
// when it recorded none.
var dupReplies = map[string]func(s *Server, ctx context.Context, req any) (any, error){
	"Create": dupCreate,
	"Mkdir": func(s *Server, ctx context.Context, req any) (any, error) {
		r := req.(*mdspb.CreateRequest)
		return s.Lookup(ctx, &mdspb.LookupRequest{Parent: r.GetParent(), Name: r.GetName()})
	},
	"Symlink": func(s *Server, ctx context.Context, req any) (any, error) {
		r := req.(*mdspb.SymlinkRequest)
		return s.Lookup(ctx, &mdspb.LookupRequest{Parent: r.GetParent(), Name: r.GetName()})
	},
	"Link": func(s *Server, ctx context.Context, req any) (any, error) {
		r := req.(*mdspb.LinkRequest)
		return s.Lookup(ctx, &mdspb.LookupRequest{Parent: r.GetNewParent(), Name: r.GetNewName()})
	},
	"Unlink": func(s *Server, ctx context.Context, req any) (any, error) {
		return &mdspb.UnlinkReply{}, nil
	},
	"Rmdir": func(s *Server, ctx context.Context, req any) (any, error) { return &mdspb.Empty{}, nil },
	"Rename": func(s *Server, ctx context.Context, req any) (any, error) {
		return &mdspb.Empty{}, nil
	},
	"SetAttr": func(s *Server, ctx context.Context, req any) (any, error) {
		return s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: req.(*mdspb.SetAttrRequest).GetIno()})
	},
	"CommitExtents": func(s *Server, ctx context.Context, req any) (any, error) {
		return s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: req.(*mdspb.CommitExtentsRequest).GetIno()})
	},
	"Fallocate": func(s *Server, ctx context.Context, req any) (any, error) {
		return s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: req.(*mdspb.FallocateRequest).GetIno()})
	},
	"SetXattr": func(s *Server, ctx context.Context, req any) (any, error) {
		return s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: req.(*mdspb.SetXattrRequest).GetIno()})
	},
	"RemoveXattr": func(s *Server, ctx context.Context, req any) (any, error) {
		return s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: req.(*mdspb.RemoveXattrRequest).GetIno()})
	},
}

// serviceDesc is the Mds service description with the methods of
// dupReplies wrapped: the request id goes into the context, and an
// errDuplicate becomes the recorded answer, or else the derived one.
func (s *Server) serviceDesc() *grpc.ServiceDesc {
	d := mdspb.Mds_ServiceDesc
	d.Methods = append([]grpc.MethodDesc(nil), d.Methods...)
	for i, m := range d.Methods {
		derive, ok := dupReplies[m.MethodName]
		if !ok {
			continue
		}
		orig := m.Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			ids := md.Get(wire.RequestIDHeader)
			if len(ids) != 1 || ids[0] == "" || len(ids[0]) > 128 {
				return orig(srv, ctx, dec, ic)
			}
			slot := &reqSlot{id: ids[0]}
			ctx = context.WithValue(ctx, reqIDKey{}, slot)
			var req any
			rec := func(v any) error { req = v; return dec(v) }
			resp, err := orig(srv, ctx, rec, ic)
			if err != nil && slot.dup && req != nil {
				s.log.DebugContext(ctx, "retried request already applied", "op", m.MethodName, "request", ids[0], "recorded", slot.replied)
				if rec, ok := dupRecorded[m.MethodName]; ok && slot.replied {
					out := rec.reply()
					if err := proto.Unmarshal(slot.reply, out); err != nil {
						return nil, wire.ToStatus(fmt.Errorf("mds: recorded answer of request %q: %v: %w", ids[0], err, errs.ErrCorrupt))
					}
					if rec.fix == nil {
						return out, nil
					}
					resp, err := rec.fix(s, ctx, req, out)
					return resp, wire.ToStatus(err)
				}
				resp, err := derive(s, ctx, req)
				return resp, wire.ToStatus(err)
			}
			return resp, err
		}
	}
	return &d
}

// dupCreate answers a retried Create that was applied. Without
// open_session it is the entry's attributes. With open_session (the mount
// and client.CreateFileIn create and open in one call) the retry must
// also return an open handle, as the first try did: the file is opened
// for the session now. If its extent map is still empty the answer is
// the first try's (created, handle: the caller starts an empty file);
// if another client wrote to it in between, it answers created = false
// and no handle, and the caller opens it with its extent map, as for a
// create of an existing file. If the session is gone (the retry reached
// a new leader, which starts with no sessions) it answers no handle
// either, and the caller opens the file in a new session; never
// ErrStale, which would tell the caller nothing was created.
func dupCreate(s *Server, ctx context.Context, req any) (any, error) {
	r := req.(*mdspb.CreateRequest)
	out, err := s.Lookup(ctx, &mdspb.LookupRequest{Parent: r.GetParent(), Name: r.GetName()})
	if err != nil || r.GetOpenSession() == 0 || !isReg(out.GetAttr().GetMode()) {
		return out, err
	}
	o, err := s.Open(ctx, &mdspb.OpenRequest{Session: r.GetOpenSession(), Ino: out.GetAttr().GetIno(), Extents: true})
	switch {
	case errors.Is(err, errs.ErrStale):
		return out, nil
	case err != nil:
		return nil, err
	}
	if len(o.GetExtents()) > 0 || o.GetAttr().GetSize() != 0 {
		if err := s.releaseHandle(r.GetOpenSession(), o.GetHandle()); err != nil {
			s.log.WarnContext(ctx, "release handle of a retried create", "ino", out.GetAttr().GetIno(), "err", err)
		}
		return out, nil
	}
	return &mdspb.AttrReply{Attr: o.GetAttr(), Handle: o.GetHandle(), Created: true}, nil
}

// dupCreateRecorded completes the recorded answer of a retried Create
// (the attributes of the file it created, Created). With open_session the
// first try also opened the file for the session, and the retry must
// return an open handle too: it opens the created inode (by its number,
// whatever its name is now) for the session, as dupCreate does by name.
// If the session is gone (a new leader), the file was removed since, or
// another client wrote to it in between, it answers Created = false and
// no handle, and the caller opens the inode itself (client.CreateFileIn),
// as for a create of an existing file.
func dupCreateRecorded(s *Server, ctx context.Context, req any, reply proto.Message) (any, error) {
	r := req.(*mdspb.CreateRequest)
	out := reply.(*mdspb.AttrReply)
	out.Handle = 0
	if r.GetOpenSession() == 0 || !isReg(out.GetAttr().GetMode()) {
		return out, nil
	}
	o, err := s.Open(ctx, &mdspb.OpenRequest{Session: r.GetOpenSession(), Ino: out.GetAttr().GetIno(), Extents: true})
	switch {
	case errors.Is(err, errs.ErrStale), errors.Is(err, errs.ErrNotFound):
		out.Created = false
		return out, nil
	case err != nil:
		return nil, err
	}
	if len(o.GetExtents()) > 0 || o.GetAttr().GetSize() != 0 {
		if err := s.releaseHandle(r.GetOpenSession(), o.GetHandle()); err != nil {
			s.log.WarnContext(ctx, "release handle of a retried create", "ino", out.GetAttr().GetIno(), "err", err)
		}
		out.Created = false
		return out, nil
	}
	out.Handle = o.GetHandle()
	return out, nil
}
