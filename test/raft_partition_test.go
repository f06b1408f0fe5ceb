package test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoalfs/shoal/client"
	"github.com/shoalfs/shoal/internal/pki"
	"github.com/shoalfs/shoal/test/cluster"
)

// servingOtherThan waits up to d for a member other than not to serve as
// leader and returns it.
func servingOtherThan(cl *cluster.Cluster, not uint64, d time.Duration) (uint64, error) {
	deadline := time.Now().Add(d)
	for {
		for _, m := range cl.MDSMembers() {
			if m.ID == not || m.Server == nil {
				continue
			}
			if st, ok := m.Server.MemberStatus(); ok && st.Serving {
				return m.ID, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no member but %d serves after %v", not, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ackLog is the names whose creation a writer saw acknowledged, with
// when it called and when the acknowledgement came.
type ackLog struct {
	mu     sync.Mutex
	acked  []string
	called []time.Time
	at     []time.Time
	fails  int
}

func (a *ackLog) add(name string, called time.Time) {
	a.mu.Lock()
	a.acked = append(a.acked, name)
	a.called = append(a.called, called)
	a.at = append(a.at, time.Now())
	a.mu.Unlock()
}

// calledSince counts the acknowledged calls made after t.
func (a *ackLog) calledSince(t time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.called {
		if c.After(t) {
			n++
		}
	}
	return n
}

func (a *ackLog) fail() {
	a.mu.Lock()
	a.fails++
	a.mu.Unlock()
}

// since counts the acknowledgements after t.
func (a *ackLog) since(t time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, at := range a.at {
		if at.After(t) {
			n++
		}
	}
	return n
}

func (a *ackLog) names() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.acked...)
}

// TestRaftPartition cuts the leader off from the two other members (a
// black hole between members: test/cluster/proxy.go) while two clients
// write: one that knows every member, and one that knows only the old
// leader. The old leader stops acknowledging writes (the minority cannot
// commit: its client gets errors or timeouts, and any write it saw
// acknowledged is found afterwards), the majority elects a new leader
// and goes on acknowledging the first client's writes, and once the
// partition heals every member converges to the same applied index and
// state (the old leader's uncommitted tail is replaced), with every
// acknowledged write present.
func TestRaftPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	ctx := context.Background()
	cl := cluster.Start(t, cluster.Options{MDSReplicas: 3, Dir: cluster.TmpfsDir(t), MDSPeerProxy: true, OSTs: 3})
	setup := cl.Client()
	for _, d := range []string{"/group", "/old"} {
		if err := setup.Mkdir(ctx, d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lead, err := cl.MDSLeader()
	if err != nil {
		t.Fatal(err)
	}
	old := cl.MDSMember(lead)
	// A client that talks only to the leader: with one address it does
	// not follow a new leader.
	oc, err := client.New(ctx, client.Options{MDS: old.Addr, Creds: cl.Creds(pki.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	gc := cl.Client()

	var group, minority ackLog
	stop := make(chan struct{})
	var wg sync.WaitGroup
	writer := func(c *client.Client, dir string, log *ackLog, timeout time.Duration) {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("%s/d%05d", dir, i)
			cctx, cancel := context.WithTimeout(ctx, timeout)
			called := time.Now()
			err := c.Mkdir(cctx, name, 0o755)
			cancel()
			if err != nil {
				log.fail()
				time.Sleep(20 * time.Millisecond)
				continue
			}
			log.add(name, called)
		}
	}
	wg.Add(2)
	go writer(gc, "/group", &group, 30*time.Second)
	go writer(oc, "/old", &minority, time.Second)

	time.Sleep(500 * time.Millisecond)
	if err := cl.Partition(lead); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	t.Logf("member %d (leader) cut off", lead)

	// The majority elects a new leader.
	nl, err := servingOtherThan(cl, lead, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	elected := time.Since(t0)
	// The old leader stops serving (CheckQuorum: it has not heard from a
	// quorum within an election timeout).
	var stepped time.Duration
	for {
		st, _ := old.Server.MemberStatus()
		if !st.Serving {
			stepped = time.Since(t0)
			break
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("member %d still serves 10s after it was cut off", lead)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("member %d serves %v after the cut; the old leader stopped serving after %v", nl, elected.Round(time.Millisecond), stepped.Round(time.Millisecond))
	// The old leader answered reads from its state until its lease
	// ended: that must be before the new leader began to serve, or a
	// read there could miss a write acknowledged by the new one.
	ost, _ := old.Server.MemberStatus()
	nst, _ := cl.MDSMember(nl).Server.MemberStatus()
	if !ost.LeaseUntil.Before(nst.ServingSince) {
		t.Errorf("the old leader's lease ran until %v after the cut, the new leader served from %v after it",
			ost.LeaseUntil.Sub(t0), nst.ServingSince.Sub(t0))
	}
	t.Logf("old leader's lease ended %v after the cut, %v before the new leader served",
		ost.LeaseUntil.Sub(t0).Round(time.Millisecond), nst.ServingSince.Sub(ost.LeaseUntil).Round(time.Millisecond))

	// The majority goes on: the group client's writes are acknowledged.
	tMaj := time.Now()
	deadline := time.Now().Add(10 * time.Second)
	for group.since(tMaj) < 20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := group.since(tMaj); n < 20 {
		t.Errorf("the majority acknowledged %d writes in 10s after electing member %d, want 20", n, nl)
	}
	// The minority acknowledges no write called after the cut: it
	// cannot commit (only writes committed before the cut may still be
	// acknowledged, and they are checked below with every other).
	time.Sleep(time.Second)
	if n := minority.calledSince(t0); n > 0 {
		t.Errorf("the cut-off old leader acknowledged %d writes called after the cut", n)
	}
	minority.mu.Lock()
	fails := minority.fails
	minority.mu.Unlock()
	if fails == 0 {
		t.Errorf("the client of the cut-off leader saw no error in %v", time.Since(t0))
	}

	cl.Heal()
	t.Logf("healed after %v", time.Since(t0).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if err := cl.WaitMDSConverged(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ := old.Server.MemberStatus()
	t.Logf("converged: members at applied index %d; old leader %d is %s", st.Applied, lead, st.Role)
	check := cl.Client()
	for _, l := range []*ackLog{&group, &minority} {
		for _, n := range l.names() {
			if _, err := check.Stat(ctx, n); err != nil {
				t.Errorf("acknowledged %s: %v", n, err)
			}
		}
	}
	t.Logf("group client: %d acknowledged, %d failed; old leader's client: %d acknowledged (%d after the cut, %d called after it), %d failed",
		len(group.names()), group.fails, len(minority.names()), minority.since(t0), minority.calledSince(t0), minority.fails)
}
