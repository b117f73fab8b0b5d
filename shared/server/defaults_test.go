package server

import (
	"testing"
	"time"
)

// TestDefaults: zero Deps and ConnOptions take the defaults the config
// file documents for the fields the gateway wires into them.
func TestDefaults(t *testing.T) {
	s := New(Deps{})
	if s.MaxBodyBytes != 1<<20 || s.MaxAttempts != 3 || s.HeaderTimeout != 2*time.Minute {
		t.Fatalf("Deps defaults: max body %d, attempts %d, header timeout %s", s.MaxBodyBytes, s.MaxAttempts, s.HeaderTimeout)
	}
	o := ConnOptions{}.withDefaults()
	if o.LingerTime != 30*time.Second || o.LingerTimeout != 5*time.Second || o.LingerBytes != 64<<20 {
		t.Fatalf("ConnOptions defaults: %+v", o)
	}
}
