package netsim

import (
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// Relay is a delaying TCP relay: it listens on the bridge's address in
// the root namespace and forwards each connection to a target host. Every
// chunk of bytes it reads from one side is held until Delay after it
// was read, then written to the other side; reading goes on meanwhile,
// so a stream keeps its bandwidth and only gains latency (as netem's
// delay does). A round trip through the relay gains 2*Delay, plus the
// scheduler's lateness (TestLatency measures it with a TCP ping-pong).
type Relay struct {
	Addr  string // where clients dial: BridgeIP:port
	to    string
	delay time.Duration
	ln    net.Listener

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewRelay starts a relay to target (host:port) adding delay each way.
func (n *Net) NewRelay(target string, delay time.Duration) *Relay {
	ln, err := net.Listen("tcp", n.BridgeIP()+":0")
	if err != nil {
		n.t.Fatalf("netsim: relay: %v", err)
	}
	r := &Relay{Addr: ln.Addr().String(), to: target, delay: delay, ln: ln}
	n.mu.Lock()
	n.mu.relays = append(n.mu.relays, r)
	n.mu.Unlock()
	r.wg.Add(1)
	go r.accept()
	return r
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", r.to)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, u)
		r.mu.Unlock()
		for _, p := range [][2]net.Conn{{c, u}, {u, c}} {
			r.wg.Add(1)
			go func() { defer r.wg.Done(); r.pipe(p[0], p[1]) }()
		}
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, each chunk Delay after it was read.
func (r *Relay) pipe(src, dst net.Conn) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 64<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], time.Now().Add(r.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		wait(c.at)
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			io.Copy(io.Discard, src)
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
}

// wait returns at t. time.Sleep of 0.5 ms took about 1.1 ms here (the
// runtime's timers wake on a millisecond grain), which made the relay's
// added round trip 2.2 ms instead of 1 ms: so it sleeps only to 1 ms
// before t and yields the processor in a loop for the rest (CPU, but
// only while bytes are in flight).
func wait(t time.Time) {
	if d := time.Until(t); d > time.Millisecond {
		time.Sleep(d - time.Millisecond)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}

// Close stops the relay and its connections.
func (r *Relay) Close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
