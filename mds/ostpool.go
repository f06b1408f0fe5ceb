package mds

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/ost/ostpb"
)

// ostPool is the MDS's one cache of client connections to OSTs, by OST
// id, shared by the GC, the administration worker and fsck. A connection
// is dialed on first use and redialed when the OST's address changed.
// Server.Close closes the pool once nothing can use it any more.
type ostPool struct {
	dial func(addr string) (*grpc.ClientConn, error)
	mu   struct {
		sync.Mutex // guards conns and closed
		conns      map[uint32]*ostConn
		closed     bool
	}
}

// ostConn is a cached client connection to one OST.
type ostConn struct {
	addr string
	cc   *grpc.ClientConn
	c    ostpb.OstClient
}

func newOstPool(dial func(addr string) (*grpc.ClientConn, error)) *ostPool {
	p := &ostPool{dial: dial}
	p.mu.conns = make(map[uint32]*ostConn)
	return p
}

// client returns a client of OST id at addr, dialing it if needed;
// ErrUnavailable once the pool is closed.
func (p *ostPool) client(id uint32, addr string) (ostpb.OstClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, fmt.Errorf("OST %d: connections closed: %w", id, errs.ErrUnavailable)
	}
	c, ok := p.mu.conns[id]
	if ok && c.addr != addr {
		c.cc.Close()
		delete(p.mu.conns, id)
		ok = false
	}
	if !ok {
		cc, err := p.dial(addr)
		if err != nil {
			return nil, fmt.Errorf("dial OST %d at %s: %w", id, addr, err)
		}
		c = &ostConn{addr: addr, cc: cc, c: ostpb.NewOstClient(cc)}
		p.mu.conns[id] = c
	}
	return c.c, nil
}

// close closes every connection; later calls of client fail.
func (p *ostPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.closed = true
	for id, c := range p.mu.conns {
		c.cc.Close()
		delete(p.mu.conns, id)
	}
}
