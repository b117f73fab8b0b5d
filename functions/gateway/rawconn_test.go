package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"

	"github.com/llmgw/gateway/shared/assemble"
)

// TestRawSyscalls: raw_syscalls, left out or true, has the client's and
// the backends' connections read and write with raw system calls
// (package rawconn, Linux's); false keeps net's own *net.TCPConn. A
// relayed stream works either way.
func TestRawSyscalls(t *testing.T) {
	t.Parallel()
	raw := runtime.GOOS == "linux"
	for _, c := range []struct {
		name, yaml string
		plain      bool // the setting asks for net's own connections
	}{
		{"left out", "", false},
		{"true", "raw_syscalls: true\n", false},
		{"false", "raw_syscalls: false\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			noenv := func(string) string { return "" }
			cfg, err := assemble.Parse([]byte(checkBase+c.yaml), noenv)
			if err != nil {
				t.Fatal(err)
			}
			if got := assemble.HostOf(cfg, noenv).Conns.PlainConns; got != c.plain {
				t.Errorf("the listener's PlainConns = %v, want %v", got, c.plain)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			dial := newHTTPClient(assemble.BackendsOf(cfg), nil).Transport.(*http.Transport).DialContext
			conn, err := dial(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			if _, plain := conn.(*net.TCPConn); plain != (c.plain || !raw) {
				t.Errorf("a backend connection is net's own: %v, want %v", plain, c.plain || !raw)
			}

			g := startGateway(t, options{extra: c.yaml})
			resp := g.post("/v1/chat/completions", g.token("contoso"), streamBody)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d err %v: %s", resp.StatusCode, err, b)
			}
			if data := sseData(b); len(data) < 2 || data[len(data)-1] != "[DONE]" {
				t.Fatalf("the stream did not end with [DONE]:\n%s", b)
			}
		})
	}
}
