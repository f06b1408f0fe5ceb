package mds

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// maxLookupMany bounds the lookups of one LookupMany call.
const maxLookupMany = 256

// handleLookupMany answers each lookup of the call as handleLookup would,
// in order; one that fails carries its status, and the call itself fails
// only when it is malformed.
func (s *Server) handleLookupMany(ctx context.Context, req *mdspb.LookupManyRequest) (*mdspb.LookupManyReply, error) {
	n := len(req.GetLookups())
	if n == 0 || n > maxLookupMany {
		return nil, fmt.Errorf("lookup of %d names (1..%d): %w", n, maxLookupMany, errs.ErrInvalid)
	}
	out := &mdspb.LookupManyReply{Results: make([]*mdspb.LookupResult, n)}
	for i, l := range req.GetLookups() {
		r, err := s.handleLookup(ctx, l)
		if err == nil {
			out.Results[i] = &mdspb.LookupResult{Attr: r.GetAttr()}
			continue
		}
		st, _ := status.FromError(wire.ToStatus(err))
		b, merr := proto.Marshal(st.Proto())
		if merr != nil {
			return nil, merr
		}
		out.Results[i] = &mdspb.LookupResult{Status: b}
	}
	return out, nil
}
