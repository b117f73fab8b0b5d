package main

// Where the gateway listens: an explicit listen is never widened by the
// host's port variables.

import (
	"net"
	"net/url"
	"strconv"
	"testing"
)

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestPortNeverWidensListen: an explicit listen wins over $PORT and
// $CONTAINER_APP_PORT; before, a listen equal to the default's
// value was replaced by every interface on $PORT.
func TestPortNeverWidensListen(t *testing.T) {
	t.Parallel()
	for _, env := range []string{"PORT", "CONTAINER_APP_PORT"} {
		t.Run(env, func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			// The harness writes listen: 127.0.0.1:0.
			g := startGateway(t, options{env: map[string]string{env: strconv.Itoa(port)}})
			u, err := url.Parse(g.URL)
			if err != nil {
				t.Fatal(err)
			}
			if u.Hostname() != "127.0.0.1" || u.Port() == strconv.Itoa(port) {
				t.Fatalf("listening on %s with listen: 127.0.0.1:0 and %s=%d; want 127.0.0.1 on a port of its own", u.Host, env, port)
			}
		})
	}
}
