package main

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/server/listener"
)

// TestConnsWithin: the cap follows the open-file limit (two descriptors a
// connection, its refusals, the store's pools, a reserve), keeps a cap
// the limit holds, and refuses a limit that holds no connection.
func TestConnsWithin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		max      int
		fds      uint64
		store    int // the store's pools' connections
		want     int
		wantFail bool
	}{
		{"unknown limit keeps the cap", 4096, 0, 80, 4096, false},
		{"a large limit keeps the cap", 4096, 1 << 20, 80, 4096, false},
		{"ulimit -n 256", 4096, 256, 0, 85, false},
		{"ulimit -n 256, the Redis pools in their share", 4096, 256, 64, 57, false},
		{"ulimit -n 1024", 4096, 1024, 0, 341, false},
		{"ulimit -n 1024, go-redis's default pools on two cores", 4096, 1024, 80, 306, false},
		{"a small cap within a small limit", 50, 256, 0, 50, false},
		{"no cap is clamped too", 0, 1024, 0, 341, false},
		{"a limit with no room", 4096, 18, 0, 0, true},
		{"pools that take the whole limit", 4096, 256, 256, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := connsWithin(tt.max, tt.fds, tt.store)
			if tt.wantFail {
				if err == nil || !strings.Contains(err.Error(), "max_connections") {
					t.Fatalf("connsWithin(%d, %d, %d) = %d, %v; want an error naming max_connections", tt.max, tt.fds, tt.store, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("connsWithin(%d, %d, %d) = %d, %v; want %d", tt.max, tt.fds, tt.store, got, err, tt.want)
			}
			if need := uint64(2*got + listener.Refusing(got) + tt.store); tt.fds > 0 && need+max(min(fdReserve, tt.fds/4), fdReserveMin) > tt.fds {
				t.Fatalf("%d connections need %d descriptors and the reserve, more than %d", got, need, tt.fds)
			}
		})
	}
}
