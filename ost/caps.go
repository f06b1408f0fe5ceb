package ost

// Capability checks (docs/security.md, "Capabilities"): every chunk call
// carries a capability the MDS signed, checked here with the cluster
// secret the MDS handed over at registration, without asking the MDS. An
// OST that registers with an MDS refuses chunk calls until it holds the
// secret; one without an MDS (Options.MDSAddr empty: tests of the store
// alone) checks nothing.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/capability"
	"github.com/shoalfs/shoal/internal/errs"
)

func (s *Server) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

// setCapSecret adopts the secret of a RegisterOst reply.
func (s *Server) setCapSecret(secret []byte) error {
	if len(secret) == 0 {
		// An MDS that signs nothing (older than capabilities): check
		// nothing until one hands a secret over.
		if s.capk.Load() == nil && !s.capNone.Swap(true) {
			s.log.Warn("the MDS sent no capability secret: chunk calls are not checked")
		}
		return nil
	}
	k, err := capability.NewKey(secret)
	if err != nil {
		return fmt.Errorf("ost: capability secret from the MDS: %w", err)
	}
	s.capk.Store(k)
	return nil
}

// checkCap checks the capability of the call in ctx for access to extent.
func (s *Server) checkCap(ctx context.Context, extent uint64, access capability.Access) error {
	var tok []byte
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(capability.MetadataKey); len(v) > 0 {
			tok = []byte(v[0])
		}
	}
	return s.checkToken(tok, extent, access)
}

// checkToken checks a capability for access to extent: the gRPC calls
// and the data path both come here.
func (s *Server) checkToken(tok []byte, extent uint64, access capability.Access) error {
	k := s.capk.Load()
	if k == nil {
		if s.opts.MDSAddr == "" || s.capNone.Load() {
			return nil
		}
		return &errs.CapabilityError{Reason: errs.CapNoKey, Msg: "capability refused: this OST has no key from the MDS yet (not registered)"}
	}
	err := k.Check(tok, s.now(), extent, access)
	if err != nil {
		s.m.capRefused.Inc()
	}
	return err
}
