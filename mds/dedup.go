package mds

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
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
// Every deduplicated mutation records its answer (the interceptor's
// table, intercept.go, names them and the answer's type). A record
// written before answers were (an older binary, within requestTTL of the
// upgrade) answers as the current state says (derived).
//
// Only the methods of that table take part; any other call runs again
// when retried (reads, sessions, allocations: an allocation retried
// leaves an unused pending extent, which GC collects).

// retried answers a retry of mutation name (req) that found it applied
// (de): with the answer the first try recorded, or, in a record that has
// none, the one the current state gives; a create that opened its file
// opens it again for the retry (createRetried).
func (s *Server) retried(ctx context.Context, name string, mu mutation, req any, de *dupError) (any, error) {
	out := mu.reply()
	if de.replied {
		if err := proto.Unmarshal(de.reply, out); err != nil {
			return nil, fmt.Errorf("mds: recorded answer of a retried %s: %v: %w", name, err, errs.ErrCorrupt)
		}
	} else {
		var err error
		if out, err = s.derived(ctx, req, out); err != nil {
			return nil, err
		}
	}
	if r, ok := req.(*mdspb.CreateRequest); ok {
		a := out.(*mdspb.AttrReply)
		if !de.replied {
			a.Created = true // the entry the retried create made
		}
		return s.createRetried(ctx, r, a)
	}
	return out, nil
}

// derived is the answer of an applied mutation req that recorded none:
// empty answers stay empty; an attribute answer is the attributes of the
// inode the request names, or else of the entry at the name it made.
func (s *Server) derived(ctx context.Context, req any, out proto.Message) (proto.Message, error) {
	if _, ok := out.(*mdspb.AttrReply); !ok {
		return out, nil
	}
	if r, ok := req.(interface{ GetIno() uint64 }); ok {
		return s.handleGetAttr(ctx, &mdspb.GetAttrRequest{Ino: r.GetIno()})
	}
	r, ok := req.(interface {
		GetParent() uint64
		GetName() []byte
	})
	if !ok {
		return nil, fmt.Errorf("mds: no answer for a retried %T: %w", req, errs.ErrInvalid)
	}
	return s.handleLookup(ctx, &mdspb.LookupRequest{Parent: r.GetParent(), Name: r.GetName()})
}

// createRetried completes the answer of a retried Create (the
// attributes of the file it created, Created). With open_session the
// first try also opened the file for the session, and the retry must
// return an open handle too: it opens the created inode (by its number,
// whatever its name is now) for the session, as dupCreate does by name.
// If the session is gone (a new leader), the file was removed since, or
// another client wrote to it in between, it answers Created = false and
// no handle, and the caller opens the inode itself (client.CreateFileIn),
// as for a create of an existing file.
func (s *Server) createRetried(ctx context.Context, r *mdspb.CreateRequest, out *mdspb.AttrReply) (*mdspb.AttrReply, error) {
	out.Handle = 0
	if r.GetOpenSession() == 0 || !isReg(out.GetAttr().GetMode()) {
		return out, nil
	}
	o, err := s.handleOpen(ctx, &mdspb.OpenRequest{Session: r.GetOpenSession(), Ino: out.GetAttr().GetIno(), Extents: true})
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
