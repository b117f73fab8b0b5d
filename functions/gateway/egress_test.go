package main

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// egress is an HTTP proxy on loopback that an agent under test is pointed
// at (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, in both cases), with loopback
// left direct (NO_PROXY): every CONNECT and every proxied request it gets
// is a connection the agent tried to open outside the gateway. It answers
// each with 403, so nothing leaves the machine, and records it; check
// fails the test on any (Codex once opened github.com, api.github.com
// and chatgpt.com with every setting the docs listed but plugins off).
type egress struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newEgress(t *testing.T) *egress {
	t.Helper()
	e := &egress{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Host
		if r.Method != http.MethodConnect {
			target = r.URL.String()
		}
		e.mu.Lock()
		e.seen = append(e.seen, r.Method+" "+target)
		e.mu.Unlock()
		http.Error(w, "egress refused by the test", http.StatusForbidden)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// env is the proxy environment an agent runs with. Loopback stays direct:
// the gateway, and nothing else, is there.
func (e *egress) env() []string {
	var out []string
	for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"} {
		out = append(out, k+"="+e.srv.URL, strings.ToLower(k)+"="+e.srv.URL)
	}
	return append(out, "NO_PROXY=127.0.0.1,localhost,::1", "no_proxy=127.0.0.1,localhost,::1")
}

// check fails t for every connection the agent tried outside the gateway
// but the known ones (exactly as the proxy saw them, "CONNECT host:443"),
// which it logs: a connection the agent opens whatever its settings say,
// documented as such in docs/clients.md.
func (e *egress) check(t *testing.T, agent string, known ...string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var unknown []string
	for _, c := range e.seen {
		if slices.Contains(known, c) {
			t.Logf("%s tried the known outside connection %q (refused by the recording proxy)", agent, c)
			continue
		}
		unknown = append(unknown, c)
	}
	if len(unknown) > 0 {
		t.Errorf("%s tried %d connections outside the gateway (through the recording proxy): %q", agent, len(unknown), unknown)
	}
}

// withoutProxy drops the caller's proxy variables from env, so that the
// recording proxy's are the only ones.
func withoutProxy(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY":
			continue
		}
		out = append(out, kv)
	}
	return out
}
