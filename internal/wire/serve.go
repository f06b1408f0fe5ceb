package wire

import (
	"net"
	"time"

	"google.golang.org/grpc"
)

// Server is a gRPC server with Shoal's options serving one listener in its
// own goroutine.
type Server struct {
	G      *grpc.Server
	lis    net.Listener
	done   chan error
	served bool
	onStop []func()
}

// OnStop has Stop call fn first: for a service whose long-lived streams
// a graceful stop would otherwise wait for (the MDS's Watch streams:
// mds.Server.Drain). Call it before Stop, from the goroutine that stops.
func (s *Server) OnStop(fn func()) { s.onStop = append(s.onStop, fn) }

// Bind listens on addr ("host:port", port 0 picks one) without serving
// yet, so that the caller can learn the address before it builds the
// services.
func Bind(addr string, opts ...ServerOpt) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Server{G: grpc.NewServer(ServerOptions(opts...)...), lis: lis, done: make(chan error, 1)}, nil
}

// Serve registers the services with register and starts serving.
func (s *Server) Serve(register func(*grpc.Server)) {
	register(s.G)
	s.served = true
	go func() { s.done <- s.G.Serve(s.lis) }()
}

// Listen binds addr, registers the services and starts serving.
func Listen(addr string, register func(*grpc.Server), opts ...ServerOpt) (*Server, error) {
	s, err := Bind(addr, opts...)
	if err != nil {
		return nil, err
	}
	s.Serve(register)
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Stop stops gracefully, waiting up to grace for calls in flight, then
// closes every connection.
func (s *Server) Stop(grace time.Duration) {
	for _, fn := range s.onStop {
		fn()
	}
	if !s.served {
		s.lis.Close()
		return
	}
	t := time.AfterFunc(grace, s.G.Stop)
	s.G.GracefulStop()
	t.Stop()
	<-s.done
}

// Kill closes the listener and every connection at once, as a crash would.
func (s *Server) Kill() {
	if !s.served {
		s.lis.Close()
		return
	}
	s.G.Stop()
	<-s.done
}
