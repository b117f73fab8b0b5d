package server

import (
	"testing"
	"time"
)

// TestDefaults: zero Deps take the defaults the config file documents for
// the fields the gateway wires into them (listener's TestDefaults: the
// connections' options).
func TestDefaults(t *testing.T) {
	s := New(Deps{})
	if s.MaxBodyBytes != 1<<20 || s.Dispatch.MaxAttempts != 3 || s.Dispatch.HeaderTimeout != 2*time.Minute {
		t.Fatalf("Deps defaults: max body %d, attempts %d, header timeout %s", s.MaxBodyBytes, s.Dispatch.MaxAttempts, s.Dispatch.HeaderTimeout)
	}
	if s.MaxHeaderBytes != DefaultMaxHeaderBytes || *s.Lambda.MinRemaining != DefaultMinRemaining || s.DefaultStreams.Keepalive() != DefaultKeepaliveInterval {
		t.Fatalf("Deps defaults: max header bytes %d, min remaining %s, keepalive %s", s.MaxHeaderBytes, *s.Lambda.MinRemaining, s.DefaultStreams.Keepalive())
	}
	// A pool's keepalive left out is the default; one given 0 (and a
	// MinRemaining given 0) is off, and stays so. The caller's map is not
	// written.
	given := map[string]StreamPolicy{"a": {FirstTokenTimeout: new(time.Second)}, "off": {KeepaliveInterval: new(time.Duration(0))}}
	s = New(Deps{Streams: given, Lambda: LambdaSettings{MinRemaining: new(time.Duration(0))}})
	if a := s.Streams["a"]; a.Keepalive() != DefaultKeepaliveInterval || a.FirstToken() != time.Second ||
		s.Streams["off"].Keepalive() != 0 || *s.Lambda.MinRemaining != 0 || given["a"].KeepaliveInterval != nil {
		t.Fatalf("streams %+v (given %+v), min remaining %s", s.Streams, given, *s.Lambda.MinRemaining)
	}
}
