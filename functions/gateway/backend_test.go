package main

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/upstream"
)

const completionJSON = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`

// recorder is a loopback backend that answers every request with one chat
// completion and keeps the headers it was sent.
type recorder struct {
	mu      sync.Mutex
	headers []http.Header
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	rc.mu.Lock()
	rc.headers = append(rc.headers, r.Header.Clone())
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, completionJSON)
}

func (rc *recorder) seen() []http.Header {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]http.Header(nil), rc.headers...)
}

// TestForwardedHeadersAllowList: end to end, a caller's headers that pick an
// account, project, encoding or identity never reach the backend; the
// endpoint's configured organization and project do.
func TestForwardedHeadersAllowList(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	backend := httptest.NewServer(rec)
	t.Cleanup(backend.Close)
	g := startGateway(t, options{
		tenants: "  - {id: recco, models: [gpt-rec], requests: 100, interval: 1h}\n",
		extra: fmt.Sprintf(`  - name: direct
    kind: openai
    models: {gpt-rec: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY, organization: org-cfg, project: proj-cfg}
`, backend.URL),
	})
	hostile := []string{
		"OpenAI-Organization", "org-caller",
		"OpenAI-Project", "proj-caller",
		"X-Forwarded-For", "10.9.9.9",
		"X-Forwarded-Host", "evil.example",
		"Forwarded", "for=10.9.9.9",
		"X-Real-Ip", "10.9.9.9",
		"Content-Encoding", "identity",
		"Expect", "100-continue",
		"X-Ms-Foo", "bar",
		"Cookie", "session=secret",
		"Api-Key", "caller-key",
		"X-Request-Id", "caller-id",
		"X-Custom", "yes",
		"Accept", "application/json",
	}
	resp := g.post("/v1/chat/completions", g.token("recco"), `{"model":"gpt-rec","messages":[{"role":"user","content":"hi"}]}`, hostile...)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	seen := rec.seen()
	if len(seen) != 1 {
		t.Fatalf("backend saw %d requests, want 1", len(seen))
	}
	h := seen[0]
	want := map[string]string{
		"Openai-Organization": "org-cfg",
		"Openai-Project":      "proj-cfg",
		"Authorization":       "Bearer " + backendKey,
		"Content-Type":        "application/json",
		"Accept":              "application/json",
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("backend %s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "Forwarded", "X-Real-Ip", "Content-Encoding",
		"Expect", "X-Ms-Foo", "Cookie", "Api-Key", "X-Custom"} {
		if v, ok := h[k]; ok {
			t.Errorf("caller's %s reached the backend: %q", k, v)
		}
	}
	if id := h.Get("X-Request-Id"); id == "caller-id" || id != resp.Header.Get("X-Request-Id") {
		t.Errorf("backend X-Request-Id %q, want the gateway's own %q", id, resp.Header.Get("X-Request-Id"))
	}
	// Whatever else arrived is what the transport adds.
	for k := range h {
		switch k {
		case "Openai-Organization", "Openai-Project", "Authorization", "Content-Type", "Accept", "X-Request-Id",
			"Content-Length", "User-Agent":
		default:
			t.Errorf("unexpected header reached the backend: %s: %q", k, h[k])
		}
	}
}

// writeCertPEM writes srv's certificate as a PEM file and returns its path.
func writeCertPEM(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestEndpointCAFile: a backend behind a private CA is trusted for the
// endpoint that names the CA in ca_file, and only there.
func TestEndpointCAFile(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	trusted := httptest.NewTLSServer(rec) // self-signed: only its own cert vouches for it
	t.Cleanup(trusted.Close)
	untrusted := httptest.NewUnstartedServer(rec)
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)
	ca := writeCertPEM(t, trusted)

	t.Run("client", func(t *testing.T) {
		t.Parallel()
		c, err := newBackendClient(&config.Config{Pools: []config.Pool{{Name: "p", Endpoints: []config.Endpoint{
			{URL: trusted.URL, CAFile: ca}, {URL: untrusted.URL},
		}}}})
		if err != nil {
			t.Fatal(err)
		}
		do := func(u string) error {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, u+"/v1/chat/completions", strings.NewReader(`{}`))
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
		if err := do(trusted.URL); err != nil {
			t.Errorf("endpoint with ca_file: %v", err)
		}
		if err := do(untrusted.URL); err == nil || !strings.Contains(err.Error(), "x509") {
			t.Errorf("endpoint without ca_file: err %v, want an x509 failure", err)
		}
	})

	t.Run("gateway", func(t *testing.T) {
		t.Parallel()
		g := startGateway(t, options{
			tenants: "  - {id: tlsco, models: [gpt-ca, gpt-noca], requests: 100, interval: 1h}\n",
			extra: fmt.Sprintf(`  - name: private-ca
    kind: vllm
    models: {gpt-ca: ""}
    endpoints:
      - {url: %q, ca_file: %q}
  - name: no-ca
    kind: vllm
    models: {gpt-noca: ""}
    endpoints:
      - {url: %q}
`, trusted.URL, ca, untrusted.URL),
		})
		tok := g.token("tlsco")
		resp := g.post("/v1/chat/completions", tok, `{"model":"gpt-ca","messages":[{"role":"user","content":"hi"}]}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"content":"ok"`) {
			t.Fatalf("with ca_file: status %d: %s", resp.StatusCode, b)
		}
		openAIError(t, g.post("/v1/chat/completions", tok, `{"model":"gpt-noca","messages":[{"role":"user","content":"hi"}]}`),
			http.StatusBadGateway, "upstream_unreachable")
	})

	t.Run("bad ca_file", func(t *testing.T) {
		t.Parallel()
		empty := filepath.Join(t.TempDir(), "empty.pem")
		if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			eps  []config.Endpoint
			want string
		}{
			{"missing file", []config.Endpoint{{URL: trusted.URL, CAFile: filepath.Join(t.TempDir(), "nope.pem")}}, "no such file"},
			{"no certificate", []config.Endpoint{{URL: trusted.URL, CAFile: empty}}, "no PEM certificate"},
		}
		for _, tt := range tests {
			_, err := newBackendClient(&config.Config{Pools: []config.Pool{{Name: "p", Endpoints: tt.eps}}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: err %v, want one containing %q", tt.name, err, tt.want)
			}
		}
	})
}

// TestBackendClientDefaults: the backend client's own defaults apply to
// settings the config leaves out, and given values win.
func TestBackendClientDefaults(t *testing.T) {
	for _, tc := range []struct {
		in          assemble.Backends
		dial        time.Duration
		idlePerHost int
	}{
		{assemble.Backends{}, upstream.DefaultConnectTimeout, upstream.DefaultMaxIdleConnsPerHost},
		{assemble.Backends{ClientSettings: upstream.ClientSettings{ConnectTimeout: time.Second, MaxIdleConnsPerHost: 7}}, time.Second, 7},
	} {
		tr := newHTTPClient(tc.in, nil).Transport.(*http.Transport)
		if tr.TLSHandshakeTimeout != tc.dial || tr.MaxIdleConnsPerHost != tc.idlePerHost {
			t.Errorf("%+v: handshake timeout %s, idle per host %d; want %s, %d", tc.in, tr.TLSHandshakeTimeout, tr.MaxIdleConnsPerHost, tc.dial, tc.idlePerHost)
		}
	}
}

// TestHostDefaults: the host's own defaults apply to the settings the
// config leaves out, and given values win.
func TestHostDefaults(t *testing.T) {
	got := withHostDefaults(assemble.Host{})
	if got.ReadHeaderTimeout != server.DefaultReadHeaderTimeout || got.IdleTimeout != server.DefaultIdleTimeout ||
		got.ShutdownGrace != server.DefaultShutdownGrace ||
		got.Listen != defaultListen || got.MaxHeaderBytes != server.DefaultMaxHeaderBytes {
		t.Errorf("zero settings: %+v", got)
	}
	given := assemble.Host{HostSettings: server.HostSettings{ReadHeaderTimeout: 1, IdleTimeout: 2, ShutdownGrace: 3}, Listen: ":9", MaxHeaderBytes: 5}
	if got := withHostDefaults(given); got.ReadHeaderTimeout != 1 || got.IdleTimeout != 2 || got.ShutdownGrace != 3 ||
		got.Listen != ":9" || got.MaxHeaderBytes != 5 {
		t.Errorf("given settings changed: %+v", got)
	}
}
