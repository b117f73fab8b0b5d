package main

// Tests for issue 22, "The edges": what the gateway answers, what it
// relays, and what anyone can hold.

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
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
// $CONTAINER_APP_PORT; before issue 22 a listen equal to the default's
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

// TestAddedMsNeverNegative: with a backend that holds its first token for
// 30 ms after its headers, every stream's added_ms is at least 0 and at
// most its duration. Before issue 22 it was the client's headers minus
// the backend's first event: about -30 on each of these streams.
func TestAddedMsNeverNegative(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{TTFT: 30 * time.Millisecond}})
	tok := g.token("contoso")
	for i := range 4 {
		body := streamBody
		if i%2 == 1 {
			body = chatBody
		}
		resp := g.post("/v1/chat/completions", tok, body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		log := g.accessLog(resp.Header.Get("X-Request-Id"))
		added, _ := log["added_ms"].(float64)
		dur, _ := log["duration_ms"].(float64)
		if added < 0 || added > dur {
			t.Errorf("%s: added_ms %v, want 0 ≤ added_ms ≤ duration_ms %v", body, added, dur)
		}
	}
}
