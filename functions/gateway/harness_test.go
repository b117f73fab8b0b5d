package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/scripts/stub"
)

const (
	testAudience = "llm-gateway"
	backendKey   = "backend-secret-key"
)

// gw is a gateway started in-process by run, with its stub backends and dev
// issuer on loopback.
type gw struct {
	t        testing.TB
	URL      string
	Issuer   *devissuer.Issuer
	Stubs    []*stub.Server
	stubURLs []string
	stubSrvs []*httptest.Server // the stubs' servers, to cut their connections
	logs     *syncbuf.Buffer
	// cfgPath and env are the config file and environment the gateway
	// runs with, so another host (lambda_test.go) can run the same.
	cfgPath string
	env     map[string]string

	// Stop cancels run's context, as SIGTERM would; Exited is closed once
	// run has returned (RunErr is then its result).
	Stop   context.CancelFunc
	Exited chan struct{}
	RunErr error
}

// options shape a test gateway.
type options struct {
	stubs       int          // number of stub backends in the "pool-a" pool (default 1)
	stubOpts    stub.Options // for every stub; TTFT/Interval default to fast
	requests    uint64       // contoso's bucket (default 1000)
	extra       string       // YAML appended to the config
	deadURL     bool         // add an endpoint nobody listens on, first by weight
	upstreamCfg string       // the upstream: block
	interval    string       // contoso's bucket window (default 1h)
	env         map[string]string
	limiter     string // the limiter: block (default memory)
	share       *gw    // reuse this gateway's issuer and stubs: a second replica
	openStubs   bool   // stubs accept any credential (for Entra tokens)
	tenants     string // YAML rows appended to tenants:
	authExtra   string // YAML lines appended to the auth: block
	// demo runs the gateway on scripts/dev/demo.yaml, `make run`'s
	// config, with its addresses moved to this test's stub, issuer and
	// a free port; the other config options are not used then.
	demo bool
	// issuerDown, when set, makes the dev issuer answer 503 while it
	// holds true (an issuer outage).
	issuerDown *atomic.Bool
	// quietLogs drops the gateway's output once it listens: a benchmark's
	// log is not kept, so its growth is not counted as the gateway's.
	quietLogs bool
	// stubProcess, when set, is a stub binary (scripts/cmd/stub): the
	// stubs run as its child processes (startStubProcess), so a
	// benchmark does not count their allocations as the gateway's. The
	// stubs' recorded requests (gw.Stubs) are then not available.
	stubProcess string
}

// demoConfig is scripts/dev/demo.yaml with the stub, issuer and listen
// addresses of `make run` replaced by a test's.
func demoConfig(t testing.TB, issuerURL, stubURL string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "dev", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("http://127.0.0.1:9100", stubURL, "http://localhost:9100", stubURL,
		"http://127.0.0.1:9200", issuerURL, "listen: 127.0.0.1:8080", "listen: 127.0.0.1:0").Replace(string(b))
}

func startGateway(t testing.TB, o options) *gw {
	t.Helper()
	if o.stubs == 0 {
		o.stubs = 1
	}
	if o.requests == 0 {
		o.requests = 1000
	}
	if o.interval == "" {
		o.interval = "1h"
	}
	if o.stubOpts.TTFT == 0 {
		o.stubOpts.TTFT = time.Millisecond
	}
	if o.stubOpts.Interval == 0 {
		o.stubOpts.Interval = time.Millisecond
	}
	if o.stubOpts.Tokens == 0 {
		o.stubOpts.Tokens = 8
	}
	if !o.openStubs {
		o.stubOpts.APIKey = backendKey
	}
	g := &gw{t: t, logs: &syncbuf.Buffer{}}

	if o.share != nil {
		g.Issuer, g.Stubs, g.stubURLs, g.stubSrvs = o.share.Issuer, o.share.Stubs, o.share.stubURLs, o.share.stubSrvs
	} else {
		iss, err := devissuer.New(devissuer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h := iss.Handler()
		if down := o.issuerDown; down != nil {
			up := h
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if down.Load() {
					http.Error(w, "down", http.StatusServiceUnavailable)
					return
				}
				up.ServeHTTP(w, r)
			})
		}
		issSrv := httptest.NewServer(h)
		t.Cleanup(issSrv.Close)
		iss.SetIssuer(issSrv.URL)
		g.Issuer = iss
	}

	var endpoints strings.Builder
	if o.deadURL {
		dead := httptest.NewServer(http.NotFoundHandler())
		deadURL := dead.URL
		dead.Close()
		fmt.Fprintf(&endpoints, "      - {url: %q, weight: 1000, api_key_env: BACKEND_KEY}\n", deadURL)
	}
	for i := 0; i < o.stubs && o.share == nil; i++ {
		so := o.stubOpts
		so.Name = fmt.Sprintf("stub-%d", i)
		if o.stubProcess != "" {
			g.stubURLs = append(g.stubURLs, startStubProcess(t, o.stubProcess, so))
			continue
		}
		s := stub.New(so)
		srv := httptest.NewServer(s)
		t.Cleanup(func() { s.Close(); srv.Close() })
		g.Stubs = append(g.Stubs, s)
		g.stubURLs = append(g.stubURLs, srv.URL)
		g.stubSrvs = append(g.stubSrvs, srv)
	}
	for _, u := range g.stubURLs {
		fmt.Fprintf(&endpoints, "      - {url: %q, weight: 1, api_key_env: BACKEND_KEY}\n", u)
	}
	upstreamCfg := o.upstreamCfg
	if upstreamCfg == "" {
		upstreamCfg = "upstream: {max_attempts: 3, header_timeout: 5s, default_cooldown: 1m}\n"
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
shutdown_grace: 5s
auth:
  issuer: %s
  audiences: [%s, other-aud]
%stenants:
  - {id: contoso, models: [gpt-4o, llama, gpt-4o-mini], requests: %d, interval: %s}
  - {id: fabrikam, models: [llama], requests: 1000, interval: 1h}
%s%s
%s
pools:
  - name: pool-a
    kind: vllm
    models: {llama: meta/Llama-3.1-8B, gpt-4o-mini: ""}
    forward_headers: [X-Stub-Fault, X-Stub-TTFT, X-Stub-Interval, X-Stub-Tokens]
    endpoints:
%s  - name: azure
    kind: azure-openai
    models: {gpt-4o: gpt-4o-prod}
    forward_headers: [X-Stub-Fault, X-Stub-TTFT, X-Stub-Interval, X-Stub-Tokens]
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY, api_version: "2024-10-21"}
%s`, g.Issuer.IssuerURL(), testAudience, o.authExtra, o.requests, o.interval, o.tenants, upstreamCfg, o.limiter, endpoints.String(), g.stubURLs[0], o.extra)
	if o.demo {
		cfg = demoConfig(t, g.Issuer.IssuerURL(), g.stubURLs[0])
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"BACKEND_KEY": backendKey, "DEMO_BACKEND_KEY": backendKey, "DEMO_KEYS_SECRET": demoKeysSecret}
	for k, v := range o.env {
		env[k] = v
	}
	g.cfgPath, g.env = path, env
	ctx, cancel := context.WithCancel(context.Background())
	g.Stop, g.Exited = cancel, make(chan struct{})
	out := &quieting{w: g.logs}
	go func() {
		defer close(g.Exited)
		g.RunErr = run(ctx, []string{"gateway", "-config", path}, func(k string) string { return env[k] }, out, out)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.Exited:
			if g.RunErr != nil {
				t.Errorf("run: %v", g.RunErr)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("gateway did not stop")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for g.URL == "" {
		select {
		case <-g.Exited:
			t.Fatalf("gateway exited: %v\n%s", g.RunErr, g.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway never listened:\n%s", g.logs.String())
		}
		for _, l := range g.logs.Lines() {
			var m struct{ Msg, Addr string }
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "gateway listening" {
				g.URL = m.Addr
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	out.quiet.Store(o.quietLogs)
	return g
}

// token mints a valid token for tenant.
func (g *gw) token(tenant string) string {
	g.t.Helper()
	tok, err := g.Issuer.Mint(devissuer.Claims{Tenant: tenant, Subject: "user-1", Audience: []string{testAudience}})
	if err != nil {
		g.t.Fatal(err)
	}
	return tok
}

// post sends a request with a bearer token (none when token is "").
func (g *gw) post(path, token, body string, hdr ...string) *http.Response {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.URL+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp
}

// accessLog returns the access-log lines with the given request id.
func (g *gw) accessLog(id string) map[string]any {
	g.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range g.logs.Lines() {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["request_id"] == id {
				return m
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.t.Fatalf("no access-log line for %s:\n%s", id, g.logs.String())
	return nil
}

// openAIError decodes and checks OpenAI's error shape.
func openAIError(t *testing.T, resp *http.Response, status int, code string) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("content-type %q", ct)
	}
	var e struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error == nil {
		t.Fatalf("not OpenAI error JSON: %s", b)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[k]; !ok {
			t.Fatalf("error JSON lacks %q: %s", k, b)
		}
	}
	if msg, _ := e.Error["message"].(string); msg == "" {
		t.Fatalf("empty message: %s", b)
	}
	if code != "" && e.Error["code"] != code {
		t.Fatalf("code %v, want %s: %s", e.Error["code"], code, b)
	}
	return e.Error
}

// sseEvents splits an SSE body into its events' data payloads.
func sseData(body []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

// stepEvent releases the stub's next event (step mode) and returns the
// event the reader then gets, or "error: …" when the read fails. It fails
// the test when the stub does not ask for the event, or when the event does
// not arrive within d: with the stub held, only a relay that flushes per
// event can deliver it.
func stepEvent(t *testing.T, step chan<- struct{}, r *bufio.Reader, k int, d time.Duration) string {
	t.Helper()
	select {
	case step <- struct{}{}:
	case <-time.After(d):
		t.Fatalf("stub never asked for event %d", k)
	}
	got := make(chan string, 1)
	go func() {
		ev, err := readEvent(r)
		if err != nil {
			ev = "error: " + err.Error()
		}
		got <- ev
	}()
	select {
	case ev := <-got:
		return ev
	case <-time.After(d):
		t.Fatalf("event %d not delivered before the stub may emit event %d: something buffers", k, k+1)
		return ""
	}
}

// quieting writes to w until quiet is set, then discards.
type quieting struct {
	w     io.Writer
	quiet atomic.Bool
}

func (q *quieting) Write(p []byte) (int, error) {
	if q.quiet.Load() {
		return len(p), nil
	}
	return q.w.Write(p)
}
