package ost

import (
	"context"
	"fmt"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// service implements ostpb.OstServer on a Server. Handlers return errors
// wrapping the sentinels of internal/errs; wire's interceptor turns them
// into status codes.
type service struct {
	ostpb.UnimplementedOstServer
	s *Server
}

// chunkFromPB validates a chunk id from the wire: present, extent not 0.
func chunkFromPB(id *ostpb.ChunkId) (chunkID, error) {
	if id == nil {
		return chunkID{}, fmt.Errorf("ost: missing chunk id: %w", errs.ErrInvalid)
	}
	return checkChunkID(id.GetExtent(), id.GetIndex())
}

func (v *service) WriteChunk(ctx context.Context, req *ostpb.WriteChunkRequest) (*ostpb.WriteChunkReply, error) {
	c, err := chunkFromPB(req.GetId())
	if err != nil {
		return nil, err
	}
	if err := v.s.checkCap(ctx, c.extent, capability.Write); err != nil {
		return nil, err
	}
	if err := v.s.writeChunk(ctx, c, req.GetData()); err != nil {
		return nil, err
	}
	return &ostpb.WriteChunkReply{}, nil
}

func (v *service) ReadChunk(ctx context.Context, req *ostpb.ReadChunkRequest) (*ostpb.ReadChunkReply, error) {
	c, err := chunkFromPB(req.GetId())
	if err != nil {
		return nil, err
	}
	if err := v.s.checkCap(ctx, c.extent, capability.Read); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := v.s.st.read(c, req.GetOffset(), req.GetLength())
	if err != nil {
		return nil, err
	}
	return &ostpb.ReadChunkReply{Data: data}, nil
}

func (v *service) DeleteChunks(ctx context.Context, req *ostpb.DeleteChunksRequest) (*ostpb.DeleteChunksReply, error) {
	if err := v.s.checkCap(ctx, 0, capability.Admin); err != nil {
		return nil, err
	}
	ids := make([]chunkID, len(req.GetIds()))
	for i, id := range req.GetIds() {
		c, err := chunkFromPB(id)
		if err != nil {
			return nil, err
		}
		ids[i] = c
	}
	var n uint32
	for _, c := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		deleted, err := v.s.st.remove(c)
		if err != nil {
			return nil, err
		}
		if deleted {
			n++
		}
	}
	return &ostpb.DeleteChunksReply{Deleted: n}, nil
}

func (v *service) StatChunk(ctx context.Context, req *ostpb.StatChunkRequest) (*ostpb.StatChunkReply, error) {
	c, err := chunkFromPB(req.GetId())
	if err != nil {
		return nil, err
	}
	if err := v.s.checkCap(ctx, c.extent, capability.Read); err != nil {
		return nil, err
	}
	n, err := v.s.st.stat(c)
	if err != nil {
		return nil, err
	}
	return &ostpb.StatChunkReply{Length: n}, nil
}

func (v *service) Info(context.Context, *ostpb.InfoRequest) (*ostpb.InfoReply, error) {
	return v.s.info()
}
