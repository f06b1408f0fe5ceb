package mds

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	rpb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/peerpb"
)

// peerNet sends Raft messages to the other members: one goroutine and one
// client stream (peerpb.Peer.Send) per member, fed by a bounded queue.
// A full queue drops messages, and a broken stream reports the member
// unreachable: Raft retransmits what matters.
type peerNet struct {
	r  *replica
	mu struct {
		sync.Mutex
		conns   map[string]*grpc.ClientConn
		senders map[uint64]*peerSender
		closed  bool
	}
	wg sync.WaitGroup
}

type peerSender struct {
	id   uint64
	q    chan *rpb.Message
	stop chan struct{}
}

const peerQueue = 4096

func newPeerNet(r *replica) *peerNet {
	n := &peerNet{r: r}
	n.mu.conns = map[string]*grpc.ClientConn{}
	n.mu.senders = map[uint64]*peerSender{}
	return n
}

func (n *peerNet) client(addr string) (peerpb.PeerClient, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return nil, fmt.Errorf("mds: closed: %w", errs.ErrUnavailable)
	}
	if f := n.r.o.DialAddr; f != nil && addr != "" {
		addr = f(addr)
	}
	cc, ok := n.mu.conns[addr]
	if !ok {
		var err error
		if cc, err = wire.Dial(addr, wire.WithCreds(n.r.creds)); err != nil {
			return nil, err
		}
		n.mu.conns[addr] = cc
	}
	return peerpb.NewPeerClient(cc), nil
}

// send queues messages for their members.
func (n *peerNet) send(msgs []*rpb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		if to == n.r.o.ID {
			continue
		}
		s := n.sender(to)
		if s == nil {
			continue
		}
		select {
		case s.q <- m:
		default:
			n.r.node.ReportUnreachable(to)
			if m.GetType() == rpb.MessageType_MsgSnap {
				n.r.node.ReportSnapshot(to, raft.SnapshotFailure)
			}
		}
	}
}

func (n *peerNet) sender(id uint64) *peerSender {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return nil
	}
	if s, ok := n.mu.senders[id]; ok {
		return s
	}
	s := &peerSender{id: id, q: make(chan *rpb.Message, peerQueue), stop: make(chan struct{})}
	n.mu.senders[id] = s
	n.wg.Add(1)
	go n.runSender(s)
	return s
}

func (n *peerNet) addr(id uint64) string {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	return n.r.mu.members[id]
}

// runSender keeps a stream to member s.id and writes its queue to it.
func (n *peerNet) runSender(s *peerSender) {
	defer n.wg.Done()
	var st peerpb.Peer_SendClient
	var cancel context.CancelFunc = func() {}
	defer func() { cancel() }()
	for {
		var m *rpb.Message
		select {
		case <-s.stop:
			return
		case m = <-s.q:
		}
		if st == nil {
			addr := n.addr(s.id)
			cli, err := n.client(addr)
			if addr == "" || err != nil {
				n.failed(s.id, m)
				continue
			}
			ctx, c := context.WithCancel(context.Background())
			cancel = c
			if st, err = cli.Send(ctx); err != nil {
				cancel()
				st = nil
				n.failed(s.id, m)
				continue
			}
		}
		b, err := proto.Marshal(m)
		if err == nil {
			err = st.Send(&peerpb.Envelope{Msg: b})
		}
		if err != nil {
			cancel()
			st = nil
			n.failed(s.id, m)
			// Do not spin on a dead member: drop what is queued (Raft
			// resends) and wait a little.
			select {
			case <-s.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if m.GetType() == rpb.MessageType_MsgSnap {
			n.r.node.ReportSnapshot(s.id, raft.SnapshotFinish)
		}
	}
}

func (n *peerNet) failed(id uint64, m *rpb.Message) {
	n.r.node.ReportUnreachable(id)
	if m.GetType() == rpb.MessageType_MsgSnap {
		n.r.node.ReportSnapshot(id, raft.SnapshotFailure)
	}
}

func (n *peerNet) close() {
	n.mu.Lock()
	n.mu.closed = true
	for _, s := range n.mu.senders {
		close(s.stop)
	}
	n.mu.Unlock()
	n.wg.Wait()
	n.mu.Lock()
	for a, cc := range n.mu.conns {
		cc.Close()
		delete(n.mu.conns, a)
	}
	n.mu.Unlock()
}

// peerService implements peerpb.PeerServer for a replicated Server.
type peerService struct {
	peerpb.UnimplementedPeerServer
	s *Server
}

func (p *peerService) replica() (*replica, error) {
	p.s.life.RLock()
	defer p.s.life.RUnlock()
	if p.s.closed || p.s.raft == nil {
		return nil, fmt.Errorf("mds: closed: %w", errs.ErrUnavailable)
	}
	return p.s.raft, nil
}

func (p *peerService) Send(st peerpb.Peer_SendServer) error {
	r, err := p.replica()
	if err != nil {
		return err
	}
	for {
		env, err := st.Recv()
		if err == io.EOF {
			return st.SendAndClose(&peerpb.Empty{})
		}
		if err != nil {
			return err
		}
		m := &rpb.Message{}
		if err := proto.Unmarshal(env.GetMsg(), m); err != nil {
			return fmt.Errorf("mds: raft message: %v: %w", err, errs.ErrInvalid)
		}
		select {
		case <-r.stop:
			return fmt.Errorf("mds: closed: %w", errs.ErrUnavailable)
		default:
		}
		if err := r.node.Step(st.Context(), m); err != nil {
			return err
		}
	}
}

func (p *peerService) Snapshot(_ *peerpb.SnapshotRequest, st peerpb.Peer_SnapshotServer) error {
	r, err := p.replica()
	if err != nil {
		return err
	}
	return r.sendSnapshot(st)
}

func (p *peerService) Status(context.Context, *peerpb.StatusRequest) (*peerpb.StatusReply, error) {
	r, err := p.replica()
	if err != nil {
		return nil, err
	}
	return r.status(), nil
}

// status is this member's view of itself and its group.
func (r *replica) status() *peerpb.StatusReply {
	st := r.node.Status()
	r.mu.Lock()
	defer r.mu.Unlock()
	self := &peerpb.Member{
		Id: r.o.ID, Addr: r.mu.members[r.o.ID], Role: roleName(st.RaftState),
		AppliedIndex: r.mu.applied, CommitIndex: st.GetCommit(), Term: st.GetTerm(), Leader: st.Lead,
	}
	out := &peerpb.StatusReply{Self: self}
	ids := make([]uint64, 0, len(r.mu.members))
	for id := range r.mu.members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		m := &peerpb.Member{Id: id, Addr: r.mu.members[id]}
		if id == st.Lead {
			m.Role = "leader"
		}
		if pr, ok := st.Progress[id]; ok {
			m.AppliedIndex = pr.Match // as the leader knows it: the log index it has
		}
		out.Members = append(out.Members, m)
	}
	return out
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return s.String()
}

func (p *peerService) ChangeMember(ctx context.Context, req *peerpb.ChangeMemberRequest) (*peerpb.StatusReply, error) {
	r, err := p.replica()
	if err != nil {
		return nil, err
	}
	if err := r.check(); err != nil {
		return nil, wire.ToStatus(err)
	}
	cc := &rpb.ConfChange{NodeId: new(req.GetId())}
	switch req.GetOp() {
	case peerpb.ChangeMemberRequest_ADD:
		if req.GetAddr() == "" || req.GetId() == 0 {
			return nil, wire.ToStatus(fmt.Errorf("add member: id and address needed: %w", errs.ErrInvalid))
		}
		cc.Type = rpb.ConfChangeType_ConfChangeAddNode.Enum()
		cc.Context = []byte(req.GetAddr())
	case peerpb.ChangeMemberRequest_REMOVE:
		cc.Type = rpb.ConfChangeType_ConfChangeRemoveNode.Enum()
	}
	if err := r.node.ProposeConfChange(ctx, cc); err != nil {
		return nil, wire.ToStatus(err)
	}
	// Wait until the change is applied here.
	for i := 0; i < 200; i++ {
		r.mu.Lock()
		_, has := r.mu.members[req.GetId()]
		r.mu.Unlock()
		if has == (req.GetOp() == peerpb.ChangeMemberRequest_ADD) {
			return r.status(), nil
		}
		select {
		case <-ctx.Done():
			return nil, wire.ToStatus(ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
	return nil, wire.ToStatus(fmt.Errorf("member change not applied after 5s: %w", errs.ErrUnavailable))
}

func (p *peerService) TransferLeader(ctx context.Context, req *peerpb.TransferLeaderRequest) (*peerpb.StatusReply, error) {
	r, err := p.replica()
	if err != nil {
		return nil, err
	}
	st := r.node.Status()
	if st.RaftState != raft.StateLeader {
		r.mu.Lock()
		nl := r.notLeaderLocked()
		r.mu.Unlock()
		return nil, wire.ToStatus(nl)
	}
	// The new leader is elected at once, without waiting out the
	// others' in-lease time: this one stops answering calls first.
	r.holdLease(true)
	defer r.holdLease(false)
	r.node.TransferLeadership(ctx, st.ID, req.GetTo())
	for i := 0; i < 200; i++ {
		if r.node.Status().Lead == req.GetTo() {
			return r.status(), nil
		}
		select {
		case <-ctx.Done():
			return nil, wire.ToStatus(ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
	return nil, wire.ToStatus(fmt.Errorf("leadership not transferred to %d after 5s: %w", req.GetTo(), errs.ErrUnavailable))
}
