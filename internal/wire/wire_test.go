package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shoalfs/shoal/internal/errs"
)

// TestRoundTrip sends every sentinel, wrapped, through the server and
// client translations: errors.Is must still match, and no other sentinel.
func TestRoundTrip(t *testing.T) {
	all := append(append([]error(nil), errs.All...), errs.Internal...)
	for _, s := range all {
		got := FromStatus(ToStatus(fmt.Errorf("op on inode 7: %w", s)))
		if !errors.Is(got, s) {
			t.Errorf("%v: came back as %v", s, got)
		}
		for _, other := range all {
			if other != s && errors.Is(got, other) {
				t.Errorf("%v: also matches %v", s, other)
			}
		}
	}
	if len(table) != len(all) {
		t.Errorf("wire table has %d entries, errs.All and errs.Internal %d", len(table), len(all))
	}
}

// TestNotLeaderHint: the leader's address crosses the wire in the status
// detail, not in the text.
func TestNotLeaderHint(t *testing.T) {
	got := FromStatus(ToStatus(fmt.Errorf("create: %w", &errs.NotLeaderError{Leader: "10.0.0.2:7000"})))
	var nl *errs.NotLeaderError
	if !errors.As(got, &nl) || nl.Leader != "10.0.0.2:7000" || !errors.Is(got, errs.ErrNotLeader) {
		t.Fatalf("got %#v", got)
	}
	if errors.Is(got, errs.ErrUnavailable) {
		t.Error("NOT_LEADER also matches ErrUnavailable")
	}
}

func TestOtherErrors(t *testing.T) {
	if ToStatus(nil) != nil || FromStatus(nil) != nil {
		t.Fatal("nil must stay nil")
	}
	if c := status.Code(ToStatus(errors.New("boom"))); c != codes.Internal {
		t.Errorf("plain error: %v", c)
	}
	if c := status.Code(ToStatus(context.Canceled)); c != codes.Canceled {
		t.Errorf("canceled: %v", c)
	}
	if !errors.Is(FromStatus(status.Error(codes.DeadlineExceeded, "slow")), context.DeadlineExceeded) {
		t.Error("deadline")
	}
	// An unreachable peer (no Shoal reason) is ErrUnavailable.
	if !errors.Is(FromStatus(status.Error(codes.Unavailable, "connection refused")), errs.ErrUnavailable) {
		t.Error("unavailable")
	}
	// A status from elsewhere passes through ToStatus untouched.
	st := status.Error(codes.ResourceExhausted, "grpc: message too large")
	if ToStatus(st) != st {
		t.Error("foreign status changed")
	}
}
