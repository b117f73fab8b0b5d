package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/store"
)

// TestGuard: the policy decides failures of the store, not of a caller that
// left; a skip by the open breaker is degraded but no store error; the
// breaker's opening is logged with the guard's name and the operation.
func TestGuard(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, policy := range []string{store.PolicyOpen, store.PolicyClosed} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			g := store.NewGuard("test", policy, store.NewBreaker(2, time.Hour), slog.New(slog.NewTextHandler(&buf, nil)))
			gone, cancel := context.WithCancel(context.Background())
			cancel()
			err := g.Call(gone, "op", time.Second, func(context.Context) error { return boom })
			if refuse, left := g.Failure(gone, err); refuse || !errors.Is(left, context.Canceled) {
				t.Fatalf("caller gone: refuse %v, left %v; want the caller's cause", refuse, left)
			}
			ctx := context.Background()
			for range 2 {
				err := g.Call(ctx, "op", time.Second, func(ctx context.Context) error {
					if _, ok := ctx.Deadline(); !ok {
						t.Error("call without the guard's bound")
					}
					return boom
				})
				if refuse, left := g.Failure(ctx, err); refuse != (policy == store.PolicyClosed) || left != nil {
					t.Fatalf("store failed: refuse %v, left %v", refuse, left)
				}
			}
			err = g.Call(ctx, "op", time.Second, func(context.Context) error { return nil })
			if !errors.Is(err, store.ErrBreakerOpen) {
				t.Fatalf("open breaker: %v, want ErrBreakerOpen", err)
			}
			g.Failure(ctx, err)
			if s := g.Stats(); s.Degraded != 3 || s.StoreErrors != 2 || s.BreakerOpens != 1 || s.Breaker != store.BreakerOpen {
				t.Errorf("stats %+v; want 3 degraded, 2 store errors, opened once", s)
			}
			if log := buf.String(); !strings.Contains(log, `msg="test: store failing, breaker open" op=op`) {
				t.Errorf("log %q: want the opening with name and op", log)
			}
		})
	}
}

// TestGuardMisconfigured: a configuration error (a Redis Cluster's MOVED
// or CROSSSLOT) is refused whatever the policy, counts as no store error
// and opens no breaker, and is logged once as an error.
func TestGuardMisconfigured(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{store.PolicyOpen, store.PolicyClosed} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			g := store.NewGuard("test", policy, store.NewBreaker(2, time.Hour), slog.New(slog.NewTextHandler(&buf, nil)))
			ctx := context.Background()
			moved := fmt.Errorf("MOVED 1512 127.0.0.1:7001: %w", store.ErrMisconfigured)
			for range 5 {
				err := g.Call(ctx, "op", time.Second, func(context.Context) error { return moved })
				if refuse, left := g.Failure(ctx, err); !refuse || left != nil {
					t.Fatalf("misconfigured: refuse %v, left %v; want refused", refuse, left)
				}
			}
			if s := g.Stats(); s.Degraded != 5 || s.StoreErrors != 0 || s.BreakerOpens != 0 {
				t.Errorf("stats %+v; want 5 degraded, no store error, no opening", s)
			}
			if log := buf.String(); strings.Count(log, "level=ERROR") != 1 || !strings.Contains(log, "MOVED") {
				t.Errorf("log %q: want one error line naming the answer", log)
			}
		})
	}
}
