package ost

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/datanet"
	"github.com/shoalfs/shoal/internal/errs"
)

// DataListenOff as Options.DataListen turns the data path off: chunk I/O
// is then served over gRPC only, as before the data path existed.
const DataListenOff = "off"

// dataShutdownGrace is how long Close lets data-path requests in flight
// finish before it closes their connections.
const dataShutdownGrace = 2 * time.Second

// startData binds the data path's listener and starts serving it. It
// returns the address clients reach it at: the bound one, with
// AdvertiseAddr's host when bound to every interface. With Options.Creds
// it serves mutual TLS only, with the same certificates as gRPC (a
// reload applies to new connections), to the roles of chunkRoles
// (authorizeData, authorize.go).
func (s *Server) startData() error {
	addr := s.opts.DataListen
	if addr == DataListenOff {
		return nil
	}
	if addr == "" {
		host := "127.0.0.1"
		if h, _, err := net.SplitHostPort(s.opts.AdvertiseAddr); err == nil && h != "" {
			host = h
		}
		addr = net.JoinHostPort(host, "0")
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("ost: data path: listen %s: %w", addr, err)
	}
	bound := lis.Addr().(*net.TCPAddr)
	advertise := bound.String()
	if bound.IP.IsUnspecified() {
		host := "127.0.0.1"
		if h, _, err := net.SplitHostPort(s.opts.AdvertiseAddr); err == nil && h != "" {
			host = h
		}
		advertise = net.JoinHostPort(host, fmt.Sprint(bound.Port))
	}
	var tlsConf *tls.Config
	var authorize func(*x509.Certificate) error
	if s.opts.Creds != nil {
		tlsConf, authorize = s.opts.Creds.DataServerConfig(), authorizeData
	}
	srv, err := datanet.Serve(lis, datanet.ServerOptions{
		Handler:   dataHandler{s},
		Logger:    s.log,
		Bufs:      s.bufs,
		TLS:       tlsConf,
		Authorize: authorize,
	})
	if err != nil {
		lis.Close()
		return fmt.Errorf("ost: data path: %w", err)
	}
	s.data, s.dataAddr = srv, advertise
	if !s.opts.NoLocalData {
		s.startLocal(advertise)
	}
	return nil
}

// startLocal serves the data path's local endpoint for the address
// advertised (datanet.ListenLocal). An endpoint that cannot be bound (the
// name is taken in this network namespace) is logged and left out:
// clients then use TCP.
func (s *Server) startLocal(advertise string) {
	lis, err := datanet.ListenLocal(advertise)
	if err != nil {
		s.log.Warn("data path: no local endpoint; clients on this host use TCP", "name", datanet.LocalName(advertise), "err", err)
		return
	}
	srv, err := datanet.Serve(lis, datanet.ServerOptions{Handler: dataHandler{s}, Logger: s.log, Bufs: s.bufs, Local: true})
	if err != nil {
		lis.Close()
		s.log.Warn("data path: no local endpoint; clients on this host use TCP", "err", err)
		return
	}
	s.local = srv
}

// stopData stops the data path, letting requests in flight finish for a
// while.
func (s *Server) stopData() error {
	if s.data == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dataShutdownGrace)
	defer cancel()
	if s.local != nil {
		if err := s.local.Shutdown(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("ost: data path's local endpoint: %w", err)
		}
	}
	if err := s.data.Shutdown(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("ost: data path: %w", err)
	}
	return nil
}

// DataAddr is the address of the OST's data path ("" when it is off), as
// Info reports it.
func (s *Server) DataAddr() string { return s.dataAddr }

// dataHandler serves the data path with the same code as the gRPC calls,
// capability checks included.
type dataHandler struct{ s *Server }

func (h dataHandler) WriteChunk(ctx context.Context, req datanet.Request, data []byte) error {
	c, err := checkChunkID(req.Extent, req.Index)
	if err != nil {
		return err
	}
	if err := h.s.checkToken(req.Cap, c.extent, capability.Write); err != nil {
		return err
	}
	return h.s.writeChunk(ctx, c, data)
}

func (h dataHandler) ReadChunk(ctx context.Context, req datanet.Request, dst []byte) error {
	c, err := checkChunkID(req.Extent, req.Index)
	if err != nil {
		return err
	}
	if err := h.s.checkToken(req.Cap, c.extent, capability.Read); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return h.s.st.readInto(c, req.Offset, dst)
}

// OpenChunk serves datanet's OpOpen on the local endpoint: the chunk's
// data file and checksum table, after the same capability check as a read.
func (h dataHandler) OpenChunk(ctx context.Context, req datanet.Request) (f, direct *os.File, table []byte, err error) {
	c, err := checkChunkID(req.Extent, req.Index)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := h.s.checkToken(req.Cap, c.extent, capability.Read); err != nil {
		return nil, nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	f, direct, table, err = h.s.st.openChunk(c)
	if err == nil {
		h.s.m.localOpens.Inc()
	}
	return f, direct, table, err
}

// checkChunkID validates a chunk id from the wire: extent not 0.
func checkChunkID(extent uint64, index uint32) (chunkID, error) {
	if extent == 0 {
		return chunkID{}, fmt.Errorf("ost: extent id 0: %w", errs.ErrInvalid)
	}
	return chunkID{extent: extent, index: index}, nil
}

// writeChunk validates and stores a chunk for either transport, and counts
// its bytes when it is new.
func (s *Server) writeChunk(ctx context.Context, c chunkID, data []byte) error {
	switch {
	case len(data) == 0:
		return fmt.Errorf("ost: write chunk %s: no data: %w", c, errs.ErrInvalid)
	case len(data) > MaxChunkSize:
		return fmt.Errorf("ost: write chunk %s: %d bytes, over %d: %w", c, len(data), MaxChunkSize, errs.ErrTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	created, err := s.st.write(c, data)
	if created {
		s.m.writeBytes.Add(float64(len(data)))
	}
	return err
}
