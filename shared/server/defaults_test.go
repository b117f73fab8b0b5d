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
	if s.MaxBodyBytes != 1<<20 || s.MaxAttempts != 3 || s.HeaderTimeout != 2*time.Minute {
		t.Fatalf("Deps defaults: max body %d, attempts %d, header timeout %s", s.MaxBodyBytes, s.MaxAttempts, s.HeaderTimeout)
	}
	if s.MaxHeaderBytes != DefaultMaxHeaderBytes || s.MinRemaining != DefaultMinRemaining || s.DefaultStreams.KeepaliveInterval != DefaultKeepaliveInterval {
		t.Fatalf("Deps defaults: max header bytes %d, min remaining %s, keepalive %s", s.MaxHeaderBytes, s.MinRemaining, s.DefaultStreams.KeepaliveInterval)
	}
	// A pool's keepalive left zero is the default; a negative one (and a
	// negative MinRemaining) is off, and stays so. The caller's map is not
	// written.
	given := map[string]StreamPolicy{"a": {FirstTokenTimeout: time.Second}, "off": {KeepaliveInterval: -1}}
	s = New(Deps{Streams: given, MinRemaining: -1})
	if a := s.Streams["a"]; a.KeepaliveInterval != DefaultKeepaliveInterval || a.FirstTokenTimeout != time.Second ||
		s.Streams["off"].KeepaliveInterval >= 0 || s.MinRemaining >= 0 || given["a"].KeepaliveInterval != 0 {
		t.Fatalf("streams %+v (given %+v), min remaining %s", s.Streams, given, s.MinRemaining)
	}
}
