package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds"
	"github.com/shoalfs/shoal/mds/mdspb"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// A replicated MDS in the cluster (Options.MDSReplicas > 1): the members
// run in this process, each a real gRPC server on loopback with its own
// directory and its own Raft log, so that a test can kill one, restart
// it, change the group's membership and measure failover.

// MDSMember is one member of a replicated MDS.
type MDSMember struct {
	ID   uint64
	Dir  string
	Addr string
	// Server is nil while the member is stopped.
	Server *mds.Server
	srv    *wire.Server
	// joined: added to a running group (started with Join); removed: no
	// longer in the group, never started again.
	joined, removed bool
}

func (m *MDSMember) status() (mds.MemberStatus, bool) {
	if m.Server == nil {
		return mds.MemberStatus{}, false
	}
	return m.Server.MemberStatus()
}

// startGroup starts every member that is not removed: on the first start
// on new addresses (the group is formed from them), afterwards on the
// same directories and addresses.
func (c *Cluster) startGroup() error {
	first := c.members == nil
	if first {
		for i := 1; i <= c.opts.MDSReplicas; i++ {
			c.members = append(c.members, &MDSMember{ID: uint64(i), Dir: filepath.Join(c.Dir, fmt.Sprintf("mds-%d", i)), Addr: "127.0.0.1:0"})
		}
	}
	binds := map[uint64]*wire.Server{}
	for _, m := range c.members {
		if m.removed || m.Server != nil {
			continue
		}
		b, err := c.bindRetry(m.Addr)
		if err != nil {
			for _, b := range binds {
				b.Kill()
			}
			return err
		}
		binds[m.ID] = b
		m.Addr = b.Addr()
	}
	c.setGroupAddr()
	for _, m := range c.members {
		if b, ok := binds[m.ID]; ok {
			if err := c.openMember(m, b); err != nil {
				for id, b := range binds {
					if id >= m.ID {
						b.Kill()
					}
				}
				return err
			}
		}
	}
	_, err := c.MDSLeader()
	return err
}

// setGroupAddr makes the address list of the members in the group.
func (c *Cluster) setGroupAddr() {
	var addrs []string
	for _, m := range c.members {
		if !m.removed {
			addrs = append(addrs, m.Addr)
		}
	}
	c.mdsAddr = strings.Join(addrs, ",")
}

func (c *Cluster) bindRetry(addr string) (*wire.Server, error) {
	b, err := wire.Bind(addr, c.mdsServeOpts(mds.Authorize)...)
	for try := 0; err != nil && try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		b, err = wire.Bind(addr, c.mdsServeOpts(mds.Authorize)...)
	}
	return b, err
}

// openMember opens member m's MDS and serves it on b (bound first: a
// member must be reachable while its Raft node starts).
func (c *Cluster) openMember(m *MDSMember, b *wire.Server) error {
	peers := map[uint64]string{}
	for _, o := range c.members {
		if !o.removed && !o.joined {
			peers[o.ID] = o.Addr
		}
	}
	ro := c.opts.MDSRaft
	ro.ID, ro.Peers, ro.Join = m.ID, peers, m.joined
	if c.opts.MDSPeerProxy {
		ro.DialAddr = c.peerDialAddr(m.ID)
	}
	lo := c.opts.Layout
	s, err := mds.Open(c.ctx(), mds.Options{
		Dir: m.Dir, Logger: c.log.With("proc", fmt.Sprintf("mds-%d", m.ID)),
		DefaultLayout:    &mdspb.Layout{K: uint32(lo.K), M: uint32(lo.M), Unit: uint32(lo.Unit)},
		HeartbeatTimeout: c.opts.HeartbeatTimeout,
		GCInterval:       500 * time.Millisecond,
		GCGrace:          c.opts.GCGrace,
		SessionLease:     c.opts.SessionLease,
		Admin:            c.opts.Admin,
		Placement:        c.opts.Placement,
		Raft:             &ro,
		Creds:            c.Creds(pki.RoleMDS),
		Identity:         c.opts.Identity,
		Registry:         c.memberRegistry(m.ID),
	})
	if err != nil {
		b.Kill()
		return fmt.Errorf("MDS member %d: %w", m.ID, err)
	}
	b.Serve(s.Register)
	b.OnStop(s.Drain)
	m.Server, m.srv = s, b
	return nil
}

// memberRegistry is Options.Registry for member id, its series labelled
// member="id"; nil without one.
func (c *Cluster) memberRegistry(id uint64) prometheus.Registerer {
	if c.opts.Registry == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"member": fmt.Sprint(id)}, c.opts.Registry)
}

// stopGroup stops every running member gracefully.
func (c *Cluster) stopGroup() {
	for _, m := range c.members {
		if m.Server != nil {
			m.srv.Stop(time.Second)
			m.Server.Close()
			m.Server, m.srv = nil, nil
		}
	}
}

// MDSMembers returns the members of a replicated MDS (nil for a single
// MDS), removed ones included.
func (c *Cluster) MDSMembers() []*MDSMember { return slices.Clone(c.members) }

// MDSMember returns member id, or nil.
func (c *Cluster) MDSMember(id uint64) *MDSMember {
	for _, m := range c.members {
		if m.ID == id {
			return m
		}
	}
	return nil
}

// MDSLeader waits up to 10 seconds for a member that serves as leader
// (it leads and has applied every entry before its term, so it answers
// calls) and returns its id.
func (c *Cluster) MDSLeader() (uint64, error) {
	return c.MDSLeaderWithin(10 * time.Second)
}

// MDSLeaderWithin is MDSLeader with another bound.
func (c *Cluster) MDSLeaderWithin(d time.Duration) (uint64, error) {
	deadline := time.Now().Add(d)
	for {
		for _, m := range c.members {
			if st, ok := m.status(); ok && st.Serving {
				return m.ID, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no MDS member serves as leader after %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// KillMDS stops member id as abruptly as can be done in one process, the
// nearest thing to kill -9 of a member's process: its gRPC server drops
// every connection at once (callers in flight see the connection break,
// as when the kernel closes a dead process's sockets), its Raft node
// stops between two Ready batches (mds.Server.Halt: what was persisted
// stays, nothing more is persisted, applied or sent, proposals in flight
// fail), and only then is the MDS closed, which closes Pebble.
//
// What differs from kill -9: Pebble's Close writes out the state
// machine's unsynced WAL tail (which a killed process would leave in the
// page cache, where it survives too), and calls that had already entered
// a handler run on until they see the member halted (they answer
// NOT_LEADER, never success, and their connection is gone). A power cut,
// which loses unsynced data, is the crash tests' job (mds/crash_test.go).
func (c *Cluster) KillMDS(id uint64) {
	m := c.MDSMember(id)
	if m == nil || m.Server == nil {
		return
	}
	m.srv.Kill()
	m.Server.Halt()
	m.Server.Close()
	m.Server, m.srv = nil, nil
}

// StartMDS starts member id again (after KillMDS) on its directory and
// address; it catches up from the leader's log or a snapshot.
func (c *Cluster) StartMDS(id uint64) error {
	m := c.MDSMember(id)
	if m == nil || m.removed {
		return fmt.Errorf("no MDS member %d", id)
	}
	if m.Server != nil {
		return fmt.Errorf("MDS member %d is running", id)
	}
	b, err := c.bindRetry(m.Addr)
	if err != nil {
		return err
	}
	return c.openMember(m, b)
}

// peer calls the member serving as leader, again while it answers
// NOT_LEADER or is unreachable (a leader change in between).
func (c *Cluster) peer(ctx context.Context, call func(peerpb.PeerClient) error) error {
	var err error
	for try := 0; try < 20; try++ {
		var id uint64
		if id, err = c.MDSLeader(); err != nil {
			return err
		}
		var cc *wire.GroupConn
		if cc, err = wire.DialGroup(c.MDSMember(id).Addr, wire.WithCreds(c.Creds(pki.RoleAdmin))); err != nil {
			return err
		}
		err = call(peerpb.NewPeerClient(cc))
		cc.Close()
		if err == nil {
			return nil
		}
		if !errors.Is(err, errs.ErrNotLeader) && !errors.Is(err, errs.ErrUnavailable) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// AddMDS adds a new member to the group, as `shoal admin mds add` and
// `shoal mds --join` do: it binds an address, starts the member with
// Join, asks the leader to add it, and returns its id. The member
// catches up from a snapshot. Clients and mounts made afterwards get its
// address too.
func (c *Cluster) AddMDS() (uint64, error) {
	id := uint64(1)
	for _, m := range c.members {
		id = max(id, m.ID+1)
	}
	m := &MDSMember{ID: id, Dir: filepath.Join(c.Dir, fmt.Sprintf("mds-%d", id)), Addr: "127.0.0.1:0", joined: true}
	b, err := c.bindRetry(m.Addr)
	if err != nil {
		return 0, err
	}
	m.Addr = b.Addr()
	c.members = append(c.members, m)
	if err := c.openMember(m, b); err != nil {
		c.members = c.members[:len(c.members)-1]
		return 0, err
	}
	ctx, cancel := context.WithTimeout(c.ctx(), 20*time.Second)
	defer cancel()
	err = c.peer(ctx, func(p peerpb.PeerClient) error {
		_, err := p.ChangeMember(ctx, &peerpb.ChangeMemberRequest{Op: peerpb.ChangeMemberRequest_ADD, Id: id, Addr: m.Addr})
		return wire.FromStatus(err)
	})
	if err != nil {
		return 0, fmt.Errorf("add MDS member %d: %w", id, err)
	}
	c.setGroupAddr()
	return id, nil
}

// RemoveMDS asks the leader to remove member id from the group, as
// `shoal admin mds remove` does, then stops it (if it was the leader,
// another one takes over).
func (c *Cluster) RemoveMDS(id uint64) error {
	m := c.MDSMember(id)
	if m == nil || m.removed {
		return fmt.Errorf("no MDS member %d", id)
	}
	ctx, cancel := context.WithTimeout(c.ctx(), 20*time.Second)
	defer cancel()
	err := c.peer(ctx, func(p peerpb.PeerClient) error {
		_, err := p.ChangeMember(ctx, &peerpb.ChangeMemberRequest{Op: peerpb.ChangeMemberRequest_REMOVE, Id: id})
		return wire.FromStatus(err)
	})
	if err != nil {
		return fmt.Errorf("remove MDS member %d: %w", id, err)
	}
	m.removed = true
	if m.Server != nil {
		m.srv.Stop(time.Second)
		m.Server.Close()
		m.Server, m.srv = nil, nil
	}
	c.setGroupAddr()
	return nil
}

// TransferMDSLeader asks the leader to hand leadership to member id, as
// `shoal admin mds transfer-leader` does, and waits until id serves.
func (c *Cluster) TransferMDSLeader(id uint64) error {
	ctx, cancel := context.WithTimeout(c.ctx(), 20*time.Second)
	defer cancel()
	err := c.peer(ctx, func(p peerpb.PeerClient) error {
		_, err := p.TransferLeader(ctx, &peerpb.TransferLeaderRequest{To: id})
		return wire.FromStatus(err)
	})
	if err != nil {
		return fmt.Errorf("transfer MDS leadership to %d: %w", id, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if st, ok := c.MDSMember(id).status(); ok && st.Serving {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MDS member %d does not serve 10s after the transfer", id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitMDSConverged waits until every running member has applied the same
// index, and checks that their state machines are identical
// (mds.Server.StateDigest).
func (c *Cluster) WaitMDSConverged(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		var applied []uint64
		for _, m := range c.members {
			if st, ok := m.status(); ok {
				applied = append(applied, st.Applied)
			}
		}
		if len(applied) > 0 && slices.Min(applied) == slices.Max(applied) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MDS members did not converge in %v: applied %v", d, applied)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ref [32]byte
	var refID, refApplied uint64
	for _, m := range c.members {
		if m.Server == nil {
			continue
		}
		applied, dg, err := m.Server.StateDigest()
		if err != nil {
			return fmt.Errorf("MDS member %d: %w", m.ID, err)
		}
		if refID == 0 {
			ref, refID, refApplied = dg, m.ID, applied
			continue
		}
		if applied != refApplied {
			return fmt.Errorf("MDS members moved on while compared (%d at %d, %d at %d): call with no writers", refID, refApplied, m.ID, applied)
		}
		if dg != ref {
			return fmt.Errorf("MDS member %d's state differs from member %d's at applied index %d", m.ID, refID, applied)
		}
	}
	return nil
}
