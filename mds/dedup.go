package mds

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Request ids (docs/mds-raft.md, "Retries"). A client of a replicated MDS
// sends every call with a request id (wire.RequestIDHeader) that stays the
// same when it retries the call at another member after a leader change
// or a timeout. The mutation's batch records the id ("q" key, expiring
// after requestTTL), so a retry of a mutation that was applied finds it and
// is not applied again (errDuplicate). The retry's answer is then derived
// from the current state by the method's entry in dupReplies (a create
// answers with the entry it created, an unlink with success), so a create
// retried after its first try was applied neither creates twice nor fails
// with EEXIST.
//
// Only the methods of dupReplies take part; any other call runs again when
// retried (reads, sessions, allocations: an allocation retried leaves an
// unused pending extent, which GC collects).

type reqIDKey struct{}

// reqSlot is a call's request id, and whether update found it applied.
// (The handler's error reaches the wrapper already turned into a gRPC
// status by the server's interceptor, so the finding travels here.)
type reqSlot struct {
	id  string
	dup bool
}

// requestSlot returns the call's request id slot when the MDS is
// replicated and the method takes part in deduplication.
func (s *Server) requestSlot(ctx context.Context) *reqSlot {
	if s.raft == nil {
		return nil
	}
	sl, _ := ctx.Value(reqIDKey{}).(*reqSlot)
	return sl
}

// dupReplies derives the answer of a retried mutation that was applied.
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
	"SetXattr": func(s *Server, ctx context.Context, req any) (any, error) {
		return s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: req.(*mdspb.SetXattrRequest).GetIno()})
	},
	"RemoveXattr": func(s *Server, ctx context.Context, req any) (any, error) {
		return s.GetAttr(ctx, &mdspb.GetAttrRequest{Ino: req.(*mdspb.RemoveXattrRequest).GetIno()})
	},
}

// serviceDesc is the Mds service description with the methods of
// dupReplies wrapped: the request id goes into the context, and an
// errDuplicate becomes the derived answer.
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
				s.log.DebugContext(ctx, "retried request already applied", "op", m.MethodName, "request", ids[0])
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
