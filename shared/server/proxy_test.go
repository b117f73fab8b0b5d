package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
)

// Small doubles for the server's own interfaces: the proxy's decisions are
// tested here with real HTTP backends on loopback, without JWTs or a store.

type allowAll struct{}

func (allowAll) Verify(context.Context, string) (auth.Principal, error) {
	return auth.Principal{Tenant: "t1", Subject: "s"}, nil
}

type unlimited struct{}

func (unlimited) Take(context.Context, string) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 9, Reset: time.Now().Add(time.Second)}, nil
}

// lockedBuffer collects the access log across goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the access-log lines written so far.
func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, ln := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if ln == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ln), &m); err != nil {
			t.Fatalf("log line %q: %v", ln, err)
		}
		out = append(out, m)
	}
	return out
}

type testGateway struct {
	srv  *httptest.Server
	log  *lockedBuffer
	urls []string
}

// newTestGateway serves model "m" from one openai-kind pool whose
// endpoints are the given backends, in that order.
func newTestGateway(t *testing.T, backends ...http.Handler) *testGateway {
	t.Helper()
	return newTestGatewayWith(t, nil, backends...)
}

// newTestGatewayWith is newTestGateway with Deps adjusted by tune.
func newTestGatewayWith(t *testing.T, tune func(*Deps), backends ...http.Handler) *testGateway {
	t.Helper()
	var urls []string
	for _, h := range backends {
		b := httptest.NewServer(h)
		t.Cleanup(b.Close)
		urls = append(urls, b.URL)
	}
	return gatewayOn(t, tune, urls...)
}

// gatewayOn serves model "m" from one openai-kind pool whose endpoints are
// the given URLs, in that order.
func gatewayOn(t *testing.T, tune func(*Deps), urls ...string) *testGateway {
	t.Helper()
	return gatewayOnKind(t, "openai", tune, urls...)
}

// gatewayOnKind is gatewayOn with endpoints of the given backend kind.
func gatewayOnKind(t *testing.T, kind string, tune func(*Deps), urls ...string) *testGateway {
	t.Helper()
	return gatewayOnTiers(t, kind, tune, nil, route.Options{}, urls...)
}

// gatewayOnTiers is gatewayOnKind with each endpoint's priority from
// priorities (missing: 0) and the router's options.
func gatewayOnTiers(t testing.TB, kind string, tune func(*Deps), priorities []int, ro route.Options, urls ...string) *testGateway {
	t.Helper()
	g := &testGateway{log: &lockedBuffer{}, urls: urls}
	spec := route.PoolSpec{Name: "p", Models: []string{"m"}}
	var targets []*upstream.Target
	for i, u := range urls {
		es := route.EndpointSpec{Name: u, Weight: 1}
		if i < len(priorities) {
			es.Priority = priorities[i]
		}
		spec.Endpoints = append(spec.Endpoints, es)
		tg, err := upstream.NewTarget(upstream.TargetSpec{Kind: kind, URL: u})
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, tg)
	}
	router := route.New([]route.PoolSpec{spec}, ro)
	d := Deps{
		Auth:      allowAll{},
		Tenants:   tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}}),
		Limiter:   unlimited{},
		Router:    router,
		Targets:   endpointTargets(router.Pool("m"), targets),
		Client:    &http.Client{Transport: &http.Transport{DisableCompression: true}},
		Log:       slog.New(slog.NewJSONHandler(g.log, nil)),
		AccessLog: g.log,
		// Failover order is random: tests make every endpoint behave the
		// same way, by call count, where order would matter.
		Dispatch: dispatch.Settings{HeaderTimeout: 5 * time.Second},
	}
	if tune != nil {
		tune(&d)
	}
	s := New(d)
	g.srv = httptest.NewServer(s)
	t.Cleanup(g.srv.Close)
	return g
}

func (g *testGateway) post(t *testing.T, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(g.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func (g *testGateway) lastLog(t *testing.T) map[string]any {
	t.Helper()
	var last map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for last == nil && time.Now().Before(deadline) {
		if l := g.log.lines(t); len(l) > 0 {
			last = l[len(l)-1]
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if last == nil {
		t.Fatal("no access-log line")
	}
	return last
}

const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

const sseAnswer = "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n" +
	"data: [DONE]\n\n"

func sseBackend(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "Text/Event-Stream; charset=utf-8")
	_, _ = io.WriteString(w, sseAnswer)
}

func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == nil {
		t.Fatalf("not OpenAI error JSON with a code: %s", b)
	}
	return *e.Error.Code
}

// TestStreamAnswerChecked: a stream answered with something other than
// text/event-stream, or in an encoding the gateway cannot read, is a
// backend failure: the next endpoint is tried, and with none left the
// client gets a 502, never an empty success.
func TestStreamAnswerChecked(t *testing.T) {
	html := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html>login</html>")
	})
	brotli := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "br")
		_, _ = io.WriteString(w, "\x0b\x02\x80garbage")
	})
	tests := []struct {
		name     string
		backends []http.Handler
		status   int
		code     string
	}{
		{"html then sse fails over", []http.Handler{html, http.HandlerFunc(sseBackend)}, 200, ""},
		{"html alone is 502", []http.Handler{html}, 502, "upstream_bad_response"},
		{"brotli alone is 502", []http.Handler{brotli}, 502, "upstream_bad_response"},
		{"media type with parameters and case is a stream", []http.Handler{http.HandlerFunc(sseBackend)}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, tt.backends...)
			resp, b := g.post(t, streamBody)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if tt.code != "" {
				if got := errorCode(t, b); got != tt.code {
					t.Fatalf("code %q, want %q", got, tt.code)
				}
				for _, u := range g.urls {
					if strings.Contains(string(b), strings.TrimPrefix(u, "http://")) {
						t.Fatalf("error names the backend: %s", b)
					}
				}
				return
			}
			if !strings.Contains(string(b), "hello") || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
				t.Fatalf("stream not relayed: %q", b)
			}
		})
	}
}

// TestGzipStreamDecoded: a backend that gzips its SSE reaches the client
// as plain SSE with no Content-Encoding, usage counted.
func TestGzipStreamDecoded(t *testing.T) {
	g := newTestGateway(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		for _, ev := range strings.SplitAfter(sseAnswer, "\n\n") {
			_, _ = io.WriteString(zw, ev)
			_ = zw.Flush()
			w.(http.Flusher).Flush()
		}
		_ = zw.Close()
	}))
	resp, b := g.post(t, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("status %d encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	if string(b) != sseAnswer {
		t.Fatalf("client got %q, want the plain stream", b)
	}
	if l := g.lastLog(t); l["completion_tokens"] != float64(1) {
		t.Fatalf("usage not counted: %v", l)
	}
}

// TestBackendFailuresLogged: what the backend answered, and why an attempt
// failed, is in the access log; the caller is never told a backend URL.
func TestBackendFailuresLogged(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		code     string
		upstream float64
		detail   string
	}{
		{"500", 500, "upstream_error", 500, ""},
		{"401 is the gateway's credential", 401, "upstream_auth_failed", 401, "rejected the gateway's credentials"},
		{"403", 403, "upstream_auth_failed", 403, "rejected the gateway's credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newTestGateway(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, `{"error":{"message":"no"}}`)
			}))
			resp, b := g.post(t, streamBody)
			if got := errorCode(t, b); resp.StatusCode != 502 || got != tt.code {
				t.Fatalf("status %d code %q: %s", resp.StatusCode, got, b)
			}
			if strings.Contains(string(b), "127.0.0.1") {
				t.Fatalf("error names the backend: %s", b)
			}
			l := g.lastLog(t)
			if l["upstream_status"] != tt.upstream {
				t.Fatalf("upstream_status %v, want %v", l["upstream_status"], tt.upstream)
			}
			if d, _ := l["error"].(string); !strings.Contains(d, tt.detail) {
				t.Fatalf("log error %q lacks %q", d, tt.detail)
			}
		})
	}
	t.Run("TLS failure reason", func(t *testing.T) {
		tlsBackend := httptest.NewTLSServer(http.HandlerFunc(sseBackend)) // self-signed
		defer tlsBackend.Close()
		g := gatewayOn(t, nil, tlsBackend.URL) // the default transport: no trust in the test CA
		resp, b := g.post(t, streamBody)
		if got := errorCode(t, b); resp.StatusCode != 502 || got != "upstream_unreachable" {
			t.Fatalf("status %d code %q", resp.StatusCode, got)
		}
		if strings.Contains(string(b), tlsBackend.URL) || strings.Contains(string(b), "x509") {
			t.Fatalf("caller told the backend's details: %s", b)
		}
		if d, _ := g.lastLog(t)["error"].(string); !strings.Contains(d, "x509") && !strings.Contains(d, "certificate") {
			t.Fatalf("log error %q lacks the TLS reason", d)
		}
	})
}

// TestDuplicateKeysRefused: the body-reading rule reaches the caller as a
// 400 naming the key, before any backend is called.
func TestDuplicateKeysRefused(t *testing.T) {
	called := false
	g := newTestGateway(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { called = true; sseBackend(w, r) }))
	for body, param := range map[string]string{
		`{"model":"m","messages":[],"mod\u0065l":"other"}`:         "model",
		`{"model":"m","messages":[],"Model":"other"}`:              "model",
		`{"model":"m","messages":[],"stream":true,"stream":false}`: "stream",
	} {
		resp, b := g.post(t, body)
		var e errorBody
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != 400 || e.Error.Param == nil || *e.Error.Param != param {
			t.Fatalf("%s: status %d %s", body, resp.StatusCode, b)
		}
	}
	if called {
		t.Fatal("a backend was called")
	}
}

// endpointTargets pairs a pool's endpoints with targets, in order.
func endpointTargets(p *route.Pool, targets []*upstream.Target) map[*route.Endpoint]*upstream.Target {
	m := map[*route.Endpoint]*upstream.Target{}
	for i, e := range p.Endpoints {
		m[e] = targets[i]
	}
	return m
}
