package redisclient_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

// TestClassifyMarksPoolTimeout: go-redis's pool timeout, wrapped or not,
// is marked as the caller's queue with its message unchanged; any other
// error, and nil, pass through as they are.
func TestClassifyMarksPoolTimeout(t *testing.T) {
	t.Parallel()
	other := errors.New("READONLY")
	for _, tc := range []struct {
		name   string
		err    error
		queued bool
	}{
		{name: "pool timeout", err: redis.ErrPoolTimeout, queued: true},
		{name: "wrapped pool timeout", err: fmt.Errorf("take: %w", redis.ErrPoolTimeout), queued: true},
		{name: "other", err: other},
		{name: "nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := redisclient.Classify(tc.err)
			if errors.Is(got, store.ErrQueued) != tc.queued {
				t.Errorf("Classify(%v) is store.ErrQueued: %v, want %v", tc.err, !tc.queued, tc.queued)
			}
			if !tc.queued {
				if got != tc.err {
					t.Errorf("Classify(%v) = %v, want it unchanged", tc.err, got)
				}
				return
			}
			if !errors.Is(got, redis.ErrPoolTimeout) || got.Error() != tc.err.Error() {
				t.Errorf("Classify(%v) = %q: want the pool timeout with its message", tc.err, got)
			}
		})
	}
}
