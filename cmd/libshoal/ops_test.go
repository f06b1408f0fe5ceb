//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/shoalfs/shoal/client/ckpt"
	"github.com/shoalfs/shoal/internal/errs"
)

func TestErrorKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind string
	}{
		{fmt.Errorf("ckpt: x: %w", errs.ErrNotFound), "not_found"},
		{&ckpt.CorruptError{Job: "j", Step: 3, Shard: "s", Tensor: "t", Want: "a", Got: "b"}, "corrupt"},
		{fmt.Errorf("wrapped: %w", &errs.CapabilityError{Reason: errs.CapExpired}), "permission"},
		{errs.ErrNotPermitted, "permission"},
		{fmt.Errorf("%w", errs.ErrExists), "exists"},
		{invalidf("bad %d", 1), "invalid"},
		{errs.ErrNameTooLong, "invalid"},
		{errs.ErrNoSpace, "no_space"},
		{errs.ErrUnavailable, "unavailable"},
		{context.Canceled, "canceled"},
		{errors.New("something else"), "error"},
	} {
		if got := errorKind(c.err); got != c.kind {
			t.Errorf("errorKind(%v) = %q, want %q", c.err, got, c.kind)
		}
	}
	js := errorJSON(fmt.Errorf("restore: %w", &ckpt.CorruptError{Job: "j", Step: 3, Shard: "s", Tensor: "t", Want: "a", Got: "b"}))
	if js["kind"] != "corrupt" || js["shard"] != "s" || js["tensor"] != "t" || js["want"] != "a" || js["got"] != "b" {
		t.Errorf("errorJSON of a CorruptError: %v", js)
	}
}

func TestDecodeStrict(t *testing.T) {
	var r saveReq
	if err := decodeStrict(`{"job":"j","step":3,"shards":[]}`, &r); err != nil || r.Job != "j" || r.Step != 3 {
		t.Fatalf("decode: %v %+v", err, r)
	}
	if err := decodeStrict(`{"job":"j","stpe":3}`, &r); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("a misspelt field: %v, want ErrInvalid", err)
	}
	if err := decodeStrict(`{"job":`, &r); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("bad JSON: %v, want ErrInvalid", err)
	}
}

func TestRequestPointers(t *testing.T) {
	one := 0
	r := saveReq{Shards: []shardReq{{Name: "b", Blob: &one, BlobLen: 4}}}
	if _, err := r.shards(nil); !errors.Is(err, errs.ErrInvalid) {
		t.Fatalf("a blob index past the pointers: %v, want ErrInvalid", err)
	}
	r = saveReq{Shards: []shardReq{{Name: "m", Tensors: []tensorReq{{Name: "t", DType: "F32", Shape: []int64{0}, Ptr: 0, Len: 0}}}}}
	sh, err := r.shards(nil)
	if err == nil {
		t.Fatalf("index 0 of no pointers accepted: %+v", sh)
	}
}

func TestCrashHookSpec(t *testing.T) {
	if crashHook("") != nil {
		t.Fatal("an empty spec makes a hook")
	}
	h := crashHook("write:2")
	// Points that do not match return nil (the matching one would kill the test).
	for _, p := range []ckpt.Point{{Phase: "write", Piece: 1}, {Phase: "close"}, {Phase: "writes", Piece: 2}} {
		if err := h(p); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
	}
}
