package budget_test

import (
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
)

// TestDefaults: a zero Config is strict, with the documented lease,
// output reservation and timeout, failing open.
func TestDefaults(t *testing.T) {
	c := budget.Config{}.WithDefaults()
	if c.Mode != "strict" || c.Lease != 15*time.Minute || c.DefaultOutputTokens != 4096 || c.Timeout != 250*time.Millisecond || c.FailurePolicy != "open" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}
