package mds

// The Mds service's methods. Each runs its handler through the one
// interceptor, serve (intercept.go): a gRPC call and a direct call from
// Go alike are held open, refused on a member that does not serve,
// timed, given the caller's identity and deduplicated. The one stream,
// Watch, is in dirlease.go: it is not held open (Close ends it).

import (
	"context"

	"github.com/shoalfs/shoal/mds/mdspb"
)

func (s *Server) Lookup(ctx context.Context, r *mdspb.LookupRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "Lookup", r, s.handleLookup)
}

func (s *Server) LookupMany(ctx context.Context, r *mdspb.LookupManyRequest) (*mdspb.LookupManyReply, error) {
	return serve(s, ctx, "LookupMany", r, s.handleLookupMany)
}

func (s *Server) GetAttr(ctx context.Context, r *mdspb.GetAttrRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "GetAttr", r, s.handleGetAttr)
}

func (s *Server) SetAttr(ctx context.Context, r *mdspb.SetAttrRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "SetAttr", r, s.handleSetAttr)
}

func (s *Server) Create(ctx context.Context, r *mdspb.CreateRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "Create", r, s.handleCreate)
}

func (s *Server) Mkdir(ctx context.Context, r *mdspb.CreateRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "Mkdir", r, s.handleMkdir)
}

func (s *Server) Symlink(ctx context.Context, r *mdspb.SymlinkRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "Symlink", r, s.handleSymlink)
}

func (s *Server) Readlink(ctx context.Context, r *mdspb.GetAttrRequest) (*mdspb.ReadlinkReply, error) {
	return serve(s, ctx, "Readlink", r, s.handleReadlink)
}

func (s *Server) Link(ctx context.Context, r *mdspb.LinkRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "Link", r, s.handleLink)
}

func (s *Server) Unlink(ctx context.Context, r *mdspb.UnlinkRequest) (*mdspb.UnlinkReply, error) {
	return serve(s, ctx, "Unlink", r, s.handleUnlink)
}

func (s *Server) Rmdir(ctx context.Context, r *mdspb.UnlinkRequest) (*mdspb.UnlinkReply, error) {
	return serve(s, ctx, "Rmdir", r, s.handleRmdir)
}

func (s *Server) Rename(ctx context.Context, r *mdspb.RenameRequest) (*mdspb.RenameReply, error) {
	return serve(s, ctx, "Rename", r, s.handleRename)
}

func (s *Server) ReadDir(ctx context.Context, r *mdspb.ReadDirRequest) (*mdspb.ReadDirReply, error) {
	return serve(s, ctx, "ReadDir", r, s.handleReadDir)
}

func (s *Server) StatFs(ctx context.Context, r *mdspb.StatFsRequest) (*mdspb.StatFsReply, error) {
	return serve(s, ctx, "StatFs", r, s.handleStatFs)
}

func (s *Server) GetExtents(ctx context.Context, r *mdspb.GetExtentsRequest) (*mdspb.GetExtentsReply, error) {
	return serve(s, ctx, "GetExtents", r, s.handleGetExtents)
}

func (s *Server) AllocExtents(ctx context.Context, r *mdspb.AllocExtentsRequest) (*mdspb.AllocExtentsReply, error) {
	return serve(s, ctx, "AllocExtents", r, s.handleAllocExtents)
}

func (s *Server) CommitExtents(ctx context.Context, r *mdspb.CommitExtentsRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "CommitExtents", r, s.handleCommitExtents)
}

func (s *Server) Fallocate(ctx context.Context, r *mdspb.FallocateRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "Fallocate", r, s.handleFallocate)
}

func (s *Server) RegisterOst(ctx context.Context, r *mdspb.RegisterOstRequest) (*mdspb.RegisterOstReply, error) {
	return serve(s, ctx, "RegisterOst", r, s.handleRegisterOst)
}

func (s *Server) Heartbeat(ctx context.Context, r *mdspb.HeartbeatRequest) (*mdspb.Empty, error) {
	return serve(s, ctx, "Heartbeat", r, s.handleHeartbeat)
}

func (s *Server) ListOsts(ctx context.Context, r *mdspb.ListOstsRequest) (*mdspb.ListOstsReply, error) {
	return serve(s, ctx, "ListOsts", r, s.handleListOsts)
}

func (s *Server) SetXattr(ctx context.Context, r *mdspb.SetXattrRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "SetXattr", r, s.handleSetXattr)
}

func (s *Server) GetXattr(ctx context.Context, r *mdspb.GetXattrRequest) (*mdspb.GetXattrReply, error) {
	return serve(s, ctx, "GetXattr", r, s.handleGetXattr)
}

func (s *Server) ListXattr(ctx context.Context, r *mdspb.ListXattrRequest) (*mdspb.ListXattrReply, error) {
	return serve(s, ctx, "ListXattr", r, s.handleListXattr)
}

func (s *Server) RemoveXattr(ctx context.Context, r *mdspb.RemoveXattrRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "RemoveXattr", r, s.handleRemoveXattr)
}

func (s *Server) OpenSession(ctx context.Context, r *mdspb.OpenSessionRequest) (*mdspb.OpenSessionReply, error) {
	return serve(s, ctx, "OpenSession", r, s.handleOpenSession)
}

func (s *Server) KeepAlive(ctx context.Context, r *mdspb.SessionRequest) (*mdspb.KeepAliveReply, error) {
	return serve(s, ctx, "KeepAlive", r, s.handleKeepAlive)
}

func (s *Server) CloseSession(ctx context.Context, r *mdspb.SessionRequest) (*mdspb.Empty, error) {
	return serve(s, ctx, "CloseSession", r, s.handleCloseSession)
}

func (s *Server) Open(ctx context.Context, r *mdspb.OpenRequest) (*mdspb.OpenReply, error) {
	return serve(s, ctx, "Open", r, s.handleOpen)
}

func (s *Server) Release(ctx context.Context, r *mdspb.ReleaseRequest) (*mdspb.Empty, error) {
	return serve(s, ctx, "Release", r, s.handleRelease)
}

func (s *Server) SetLock(ctx context.Context, r *mdspb.LockRequest) (*mdspb.SetLockReply, error) {
	return serve(s, ctx, "SetLock", r, s.handleSetLock)
}

func (s *Server) GetLock(ctx context.Context, r *mdspb.LockRequest) (*mdspb.GetLockReply, error) {
	return serve(s, ctx, "GetLock", r, s.handleGetLock)
}

func (s *Server) Sync(ctx context.Context, r *mdspb.Empty) (*mdspb.Empty, error) {
	return serve(s, ctx, "Sync", r, s.handleSync)
}

func (s *Server) CloneExtents(ctx context.Context, r *mdspb.CloneExtentsRequest) (*mdspb.CloneExtentsReply, error) {
	return serve(s, ctx, "CloneExtents", r, s.handleCloneExtents)
}

func (s *Server) SetLayout(ctx context.Context, r *mdspb.SetLayoutRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "SetLayout", r, s.handleSetLayout)
}

func (s *Server) SetOstState(ctx context.Context, r *mdspb.SetOstStateRequest) (*mdspb.OstInfo, error) {
	return serve(s, ctx, "SetOstState", r, s.handleSetOstState)
}

func (s *Server) StartJob(ctx context.Context, r *mdspb.StartJobRequest) (*mdspb.AdminJob, error) {
	return serve(s, ctx, "StartJob", r, s.handleStartJob)
}

func (s *Server) StopJob(ctx context.Context, r *mdspb.JobRequest) (*mdspb.AdminJob, error) {
	return serve(s, ctx, "StopJob", r, s.handleStopJob)
}

func (s *Server) GetJob(ctx context.Context, r *mdspb.JobRequest) (*mdspb.AdminJob, error) {
	return serve(s, ctx, "GetJob", r, s.handleGetJob)
}

func (s *Server) PlanRebalance(ctx context.Context, r *mdspb.StartJobRequest) (*mdspb.RebalancePlan, error) {
	return serve(s, ctx, "PlanRebalance", r, s.handlePlanRebalance)
}

func (s *Server) Fsck(ctx context.Context, r *mdspb.FsckRequest) (*mdspb.FsckReply, error) {
	return serve(s, ctx, "Fsck", r, s.handleFsck)
}

func (s *Server) RunGC(ctx context.Context, r *mdspb.GCRequest) (*mdspb.GCReply, error) {
	return serve(s, ctx, "RunGC", r, s.handleRunGC)
}

func (s *Server) ReportCorrupt(ctx context.Context, r *mdspb.ReportCorruptRequest) (*mdspb.Empty, error) {
	return serve(s, ctx, "ReportCorrupt", r, s.handleReportCorrupt)
}

func (s *Server) MigrateCommit(ctx context.Context, r *mdspb.MigrateCommitRequest) (*mdspb.AttrReply, error) {
	return serve(s, ctx, "MigrateCommit", r, s.handleMigrateCommit)
}

func (s *Server) Health(ctx context.Context, r *mdspb.HealthRequest) (*mdspb.HealthReply, error) {
	return serve(s, ctx, "Health", r, s.handleHealth)
}

func (s *Server) LeaseDir(ctx context.Context, r *mdspb.LeaseDirRequest) (*mdspb.LeaseDirReply, error) {
	return serve(s, ctx, "LeaseDir", r, s.handleLeaseDir)
}

func (s *Server) SetQuota(ctx context.Context, r *mdspb.SetQuotaRequest) (*mdspb.Quota, error) {
	return serve(s, ctx, "SetQuota", r, s.handleSetQuota)
}

func (s *Server) GetQuota(ctx context.Context, r *mdspb.QuotaRequest) (*mdspb.Quota, error) {
	return serve(s, ctx, "GetQuota", r, s.handleGetQuota)
}

func (s *Server) RemoveQuota(ctx context.Context, r *mdspb.QuotaRequest) (*mdspb.Empty, error) {
	return serve(s, ctx, "RemoveQuota", r, s.handleRemoveQuota)
}

func (s *Server) ListQuotas(ctx context.Context, r *mdspb.Empty) (*mdspb.ListQuotasReply, error) {
	return serve(s, ctx, "ListQuotas", r, s.handleListQuotas)
}

func (s *Server) CheckQuotas(ctx context.Context, r *mdspb.CheckQuotasRequest) (*mdspb.CheckQuotasReply, error) {
	return serve(s, ctx, "CheckQuotas", r, s.handleCheckQuotas)
}
