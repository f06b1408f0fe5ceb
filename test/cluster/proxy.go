package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Partitions of a replicated MDS (Options.MDSPeerProxy): every member
// dials every other member through a TCP proxy of its own, one per
// ordered pair (from, to), listening on loopback and forwarding to the
// member's real address (mds.RaftOptions.DialAddr maps the one to the
// other). Clients, OSTs and mounts dial members directly: a partition
// cuts members off from each other, not from the clients.
//
// A cut link is a black hole, as a pulled cable or a dropping firewall
// is: the connections open on it stay open but every byte sent either
// way is read and thrown away, and new connections are accepted and
// treated alike, so the sender sees no error, only silence. Healing the
// link closes the connections that lost bytes (their streams are
// broken); the members dial again.

// peerProxies are the links of a cluster's MDS members.
type peerProxies struct {
	mu struct {
		sync.Mutex
		links  map[[2]uint64]*link // (from, to) -> link
		cut    map[uint64]bool     // members cut off from every other
		closed bool
	}
}

// link is the proxy of one ordered pair of members.
type link struct {
	from, to uint64
	lis      net.Listener
	target   string
	wg       sync.WaitGroup
	mu       struct {
		sync.Mutex
		cut    bool
		closed bool
		conns  map[*proxyConn]bool
	}
}

// proxyConn is one connection through a link: the member's side (in) and
// the target's (out). lost: it was open while the link was cut.
type proxyConn struct {
	in, out net.Conn
	mu      sync.Mutex
	lost    bool
}

func (c *Cluster) peerProxies() *peerProxies {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proxies == nil {
		p := &peerProxies{}
		p.mu.links = map[[2]uint64]*link{}
		p.mu.cut = map[uint64]bool{}
		c.proxies = p
		c.t.Cleanup(p.close)
	}
	return c.proxies
}

// peerDialAddr is member from's mds.RaftOptions.DialAddr: the address of
// its link to the member at addr (made on first use), or addr itself when
// no member has it.
func (c *Cluster) peerDialAddr(from uint64) func(addr string) string {
	p := c.peerProxies()
	return func(addr string) string {
		var to uint64
		for _, m := range c.MDSMembers() {
			if m.Addr == addr {
				to = m.ID
			}
		}
		if to == 0 || to == from {
			return addr
		}
		l, err := p.link(from, to, addr)
		if err != nil {
			c.log.Error("peer proxy", "from", from, "to", to, "err", err)
			return addr
		}
		return l.lis.Addr().String()
	}
}

func (p *peerProxies) link(from, to uint64, target string) (*link, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, errors.New("proxies closed")
	}
	if l, ok := p.mu.links[[2]uint64{from, to}]; ok {
		return l, nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{from: from, to: to, lis: lis, target: target}
	l.mu.conns = map[*proxyConn]bool{}
	l.mu.cut = p.mu.cut[from] || p.mu.cut[to]
	p.mu.links[[2]uint64{from, to}] = l
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Partition cuts member id off from every other member (both ways),
// until Heal.
func (c *Cluster) Partition(id uint64) error {
	if !c.opts.MDSPeerProxy {
		return fmt.Errorf("the cluster was started without Options.MDSPeerProxy")
	}
	p := c.peerProxies()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.cut[id] = true
	for k, l := range p.mu.links {
		if k[0] == id || k[1] == id {
			l.setCut(true)
		}
	}
	return nil
}

// Heal ends every partition: links carry bytes again, connections that
// lost bytes are closed.
func (c *Cluster) Heal() {
	p := c.peerProxies()
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.mu.cut)
	for _, l := range p.mu.links {
		l.setCut(false)
	}
}

func (p *peerProxies) close() {
	p.mu.Lock()
	p.mu.closed = true
	links := p.mu.links
	p.mu.links = nil
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

func (l *link) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.cut = cut
	for pc := range l.mu.conns {
		if cut {
			pc.mu.Lock()
			pc.lost = true
			pc.mu.Unlock()
		} else if pc.isLost() {
			pc.in.Close()
			pc.out.Close()
		}
	}
}

func (pc *proxyConn) isLost() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.lost
}

func (l *link) accept() {
	defer l.wg.Done()
	for {
		in, err := l.lis.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.mu.closed {
			l.mu.Unlock()
			in.Close()
			return
		}
		cut := l.mu.cut
		l.mu.Unlock()
		var out net.Conn
		if !cut {
			if out, err = net.Dial("tcp", l.target); err != nil {
				in.Close()
				continue
			}
		} else {
			// A black hole: accept, then swallow what the member sends.
			a, b := net.Pipe()
			out = a
			go func() { io.Copy(io.Discard, b); b.Close() }()
		}
		pc := &proxyConn{in: in, out: out, lost: cut}
		l.mu.Lock()
		l.mu.conns[pc] = true
		l.mu.Unlock()
		l.wg.Add(2)
		go l.pump(pc, pc.in, pc.out)
		go l.pump(pc, pc.out, pc.in)
	}
}

// pump copies src to dst, throwing the bytes away while the connection
// is lost, until either side closes.
func (l *link) pump(pc *proxyConn, src, dst net.Conn) {
	defer l.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		l.mu.Lock()
		delete(l.mu.conns, pc)
		l.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pc.isLost() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *link) close() {
	l.mu.Lock()
	l.mu.closed = true
	for pc := range l.mu.conns {
		pc.in.Close()
		pc.out.Close()
	}
	l.mu.Unlock()
	l.lis.Close()
	l.wg.Wait()
}
