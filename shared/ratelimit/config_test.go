package ratelimit_test

import (
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/ratelimit"
)

// TestDefaults: a zero Config is a memory limiter with the documented
// Redis bounds, failing open.
func TestDefaults(t *testing.T) {
	c := ratelimit.Config{}.WithDefaults()
	if c.Store != "memory" || c.Timeout != 250*time.Millisecond || c.DialTimeout != time.Second || c.FailurePolicy != "open" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}
