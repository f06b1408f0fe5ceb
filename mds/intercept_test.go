package mds

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/shoalfs/shoal/internal/errs"
	"github.com/shoalfs/shoal/internal/wire"
	"github.com/shoalfs/shoal/mds/mdspb"
)

// Every method of the Mds service goes through the interceptor: called
// directly from Go after Close, each fails with ErrUnavailable (none is
// left to the Unimplemented default, none panics on the closed database).
func TestEveryMethodIntercepted(t *testing.T) {
	s, err := Open(context.Background(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sv := reflect.ValueOf(s)
	for _, m := range mdspb.Mds_ServiceDesc.Methods {
		fn := sv.MethodByName(m.MethodName)
		if !fn.IsValid() {
			t.Errorf("%s: no method", m.MethodName)
			continue
		}
		req := reflect.New(fn.Type().In(1).Elem())
		out := fn.Call([]reflect.Value{reflect.ValueOf(context.Background()), req})
		err, _ := out[1].Interface().(error)
		if !errors.Is(err, errs.ErrUnavailable) {
			t.Errorf("%s after Close: %v, want ErrUnavailable", m.MethodName, err)
		}
	}
}

// The interceptor reads the caller's identity once: a malformed identity
// header fails the call with EINVAL before the handler runs, for a read
// as for a mutation.
func TestMalformedIdentityRefused(t *testing.T) {
	e := newEnv(t)
	bad := metadata.NewIncomingContext(context.Background(), metadata.Pairs(wire.UIDHeader, "x", wire.GIDHeader, "0"))
	if _, err := e.s.GetAttr(bad, &mdspb.GetAttrRequest{Ino: rootIno}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("getattr with a malformed uid: %v", err)
	}
	if _, err := e.s.Mkdir(bad, &mdspb.CreateRequest{Parent: rootIno, Name: []byte("d"), Mode: 0o755}); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("mkdir with a malformed uid: %v", err)
	}
	e.getattr(rootIno)
}
