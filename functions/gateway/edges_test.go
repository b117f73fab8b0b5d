package main

// Tests for the edges: what the gateway answers, what it relays, and what
// anyone can hold.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
	"github.com/llmgw/gateway/scripts/testtool"
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

// TestAddedMsNeverNegative: with a backend that holds its first token for
// 30 ms after its headers, every stream's added_ms is at least 0 and at
// most its duration. Before, it was the client's headers minus
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

// leakyBackend answers like OpenAI, with the headers a real backend adds
// about the gateway's account and network, and, on /redirect/ and for a
// stored response's GET, a 302 to an internal URL with a signature.
func leakyBackend(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := w.Header()
		for k, v := range leakedHeaders {
			h.Set(k, v)
		}
		if strings.HasPrefix(r.URL.Path, "/redirect/") || r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/responses/") {
			h.Set("Location", "https://internal.example/blob?sig=secret-signature")
			w.WriteHeader(http.StatusFound)
			return
		}
		if strings.Contains(string(b), `"stream":true`) {
			h.Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
			return
		}
		h.Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/responses") {
			_, _ = io.WriteString(w, `{"id":"resp_leak1","object":"response","status":"completed","output":[]}`)
			return
		}
		_, _ = io.WriteString(w, completionJSON)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// leakedHeaders are the backend headers that once reached every tenant.
var leakedHeaders = map[string]string{
	"Openai-Organization": "org-gateway", "Openai-Project": "proj-gateway", "Apim-Request-Id": "apim-1",
	"X-Ms-Region": "East US", "Server": "internal-proxy/1.0", "Set-Cookie": "affinity=node-7",
	"X-Ratelimit-Limit-Tokens": "2000000", "Openai-Processing-Ms": "12", "X-Backend-Node": "node-7",
}

// TestBackendHeadersAllowList: a client gets the backend's Content-Type and
// OpenAI-Processing-Ms, and the gateway's own headers; nothing else the
// backend sent. Before the allow-list everything but hop-by-hop and six
// x-ratelimit-* names reached the client.
func TestBackendHeadersAllowList(t *testing.T) {
	t.Parallel()
	backend := leakyBackend(t)
	g := startGateway(t, options{
		tenants: "  - {id: recco, models: [gpt-rec], requests: 100, interval: 1h}\n",
		extra: fmt.Sprintf(`  - name: direct
    kind: openai
    models: {gpt-rec: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
`, backend.URL),
	})
	for _, stream := range []bool{false, true} {
		resp := g.post("/v1/chat/completions", g.token("recco"), fmt.Sprintf(`{"model":"gpt-rec","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %t: status %d", stream, resp.StatusCode)
		}
		allowed := map[string]bool{"Content-Type": true, "Openai-Processing-Ms": true, "X-Request-Id": true,
			"X-Ratelimit-Limit-Requests": true, "X-Ratelimit-Remaining-Requests": true, "X-Ratelimit-Reset-Requests": true,
			"Content-Length": true, "Date": true, "Cache-Control": true, "X-Accel-Buffering": true}
		for k := range resp.Header {
			if !allowed[k] {
				t.Errorf("stream %t: %s: %q reached the client", stream, k, resp.Header.Get(k))
			}
		}
		if resp.Header.Get("Openai-Processing-Ms") != "12" || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("stream %t: allowed headers missing: %v", stream, resp.Header)
		}
	}
}

// TestBackendRedirectIsAFailure: a backend's 3xx is never relayed: the
// next endpoint serves, else 502 upstream_bad_response; no Location
// reaches the caller or the log. Before, the 302 and its Location
// reached the client, logged outcome ok.
func TestBackendRedirectIsAFailure(t *testing.T) {
	t.Parallel()
	backend := leakyBackend(t)
	redirect := backend.URL + "/redirect/v1"
	good := backend.URL + "/v1"
	g := startGateway(t, options{
		tenants: "  - {id: recco, models: [gpt-only, gpt-fail], requests: 100, interval: 1h}\n",
		extra: fmt.Sprintf(`  - name: only-redirect
    kind: openai
    models: {gpt-only: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
  - name: redirect-then-good
    kind: openai
    models: {gpt-fail: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY, weight: 1000000}
      - {url: %q, api_key_env: BACKEND_KEY, weight: 1}
`, redirect, redirect, good),
	})
	noClient := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(model string, stream bool) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions",
			strings.NewReader(fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"hi"}]}`, model, stream)))
		req.Header.Set("Authorization", "Bearer "+g.token("recco"))
		resp, err := noClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, stream := range []bool{false, true} {
		resp := post("gpt-only", stream)
		if loc := resp.Header.Get("Location"); loc != "" {
			t.Errorf("stream %t: Location %q reached the client", stream, loc)
		}
		e := openAIError(t, resp, http.StatusBadGateway, "upstream_bad_response")
		if msg := e["message"].(string); !strings.Contains(msg, "302") || strings.Contains(msg, "internal.example") {
			t.Errorf("stream %t: message %q: want the status named and no URL", stream, msg)
		}
		log := g.accessLog(resp.Header.Get("X-Request-Id"))
		if log["outcome"] != "upstream_bad_response" || strings.Contains(fmt.Sprint(log), "secret-signature") {
			t.Errorf("stream %t: access log %v", stream, log)
		}

		resp = post("gpt-fail", stream)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Location") != "" {
			t.Fatalf("stream %t: with a second endpoint: status %d Location %q: %s", stream, resp.StatusCode, resp.Header.Get("Location"), b)
		}
		// The first request meets the redirect (weight 10⁶ to 1) and fails
		// over; the redirect benched its endpoint, so the second goes
		// straight to the good one.
		want := 2.0
		if stream {
			want = 1
		}
		if log := g.accessLog(resp.Header.Get("X-Request-Id")); log["attempts"] != want {
			t.Errorf("stream %t: attempts %v, want %v", stream, log["attempts"], want)
		}
	}
}

// Lingering bounds under test: short, so that the tests are quick.
const (
	lingerTime    = 2 * time.Second
	lingerTimeout = time.Second
)

// startLingerGateway is a gateway with short lingering bounds and a
// 64 KiB body cap; extra is appended to the top of its config.
func startLingerGateway(t *testing.T, extra string) *gw {
	t.Helper()
	return startGateway(t, options{tenants: fmt.Sprintf("max_body_bytes: 65536\nlingering_time: %s\nlingering_timeout: %s\n%s",
		lingerTime, lingerTimeout, extra)})
}

// TestEarlyAnswerReachesGoClient: Go's client posting a body far over
// max_body_bytes, with a valid token or none, reads the 413 or 401 every
// time. Before, the gateway closed while the client was still
// sending, and the client got "broken pipe" or "connection reset" instead.
func TestEarlyAnswerReachesGoClient(t *testing.T) {
	t.Parallel()
	g := startLingerGateway(t, "")
	tok := g.token("contoso")
	big := `{"model":"llama","messages":[{"role":"user","content":"` + strings.Repeat("x", 4<<20) + `"}]}`
	tests := []struct {
		name, token string
		chunked     bool
		status      int
		code        string
	}{
		{"too large, with a token", tok, false, http.StatusRequestEntityTooLarge, "request_too_large"},
		{"too large, chunked", tok, true, http.StatusRequestEntityTooLarge, "request_too_large"},
		{"no token", "", false, http.StatusUnauthorized, "invalid_token"},
		{"bad token, chunked", "not-a-jwt", true, http.StatusUnauthorized, "invalid_token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 4 {
				var body io.Reader = strings.NewReader(big)
				if tt.chunked {
					body = struct{ io.Reader }{body} // no length: sent chunked
				}
				req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", body)
				req.Header.Set("Content-Type", "application/json")
				if tt.token != "" {
					req.Header.Set("Authorization", "Bearer "+tt.token)
				}
				// A fresh connection each try, as a new client would open.
				c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("try %d: %v", i, err)
				}
				openAIError(t, resp, tt.status, tt.code)
			}
		})
	}
}

// TestLingerIsBounded: a raw client that keeps sending after the early
// answer reads the whole answer, and the gateway still ends the connection
// within lingering_time (a client that sends slowly for ever), or after
// lingering_max_bytes (one that sends fast), with a token or without.
func TestLingerIsBounded(t *testing.T) {
	t.Parallel()
	g := startLingerGateway(t, "lingering_max_bytes: 1048576\n")
	tok := g.token("contoso")
	tests := []struct {
		name, auth string
		pace       time.Duration // between 4 KiB writes
		after      time.Duration // the gateway reads on at least this long (it lingers)
		within     time.Duration // and ends the connection within this
		status     int
	}{
		// 200 KB/s: lingering_max_bytes (1 MiB) is not reached within
		// lingering_time, and no gap reaches lingering_timeout.
		{"slow sender, token", "Bearer " + tok, 20 * time.Millisecond, lingerTime / 2, lingerTime + 3*time.Second, http.StatusRequestEntityTooLarge},
		{"slow sender, no token", "", 20 * time.Millisecond, lingerTime / 2, lingerTime + 3*time.Second, http.StatusUnauthorized},
		// At full speed the bound is the size: 1 MiB.
		{"fast sender, token", "Bearer " + tok, 0, 0, lingerTime + 3*time.Second, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := g.rawConn(t)
			req := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n"
			if tt.auth != "" {
				req += "Authorization: " + tt.auth + "\r\n"
			}
			if _, err := io.WriteString(c, req+"\r\n"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			cut := make(chan time.Duration, 1)
			go func() {
				chunk := []byte(strings.Repeat("x", 4<<10))
				for {
					if _, err := c.Write(chunk); err != nil {
						cut <- time.Since(start)
						return
					}
					if tt.pace > 0 {
						time.Sleep(tt.pace)
					}
				}
			}()
			_ = c.SetReadDeadline(start.Add(tt.within + 5*time.Second))
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer while sending: %v", err)
			}
			if !resp.Close {
				t.Errorf("answer without Connection: close")
			}
			openAIError(t, resp, tt.status, "")
			select {
			case d := <-cut:
				if d > tt.within || d < tt.after {
					t.Fatalf("the gateway ended the connection after %s, want after %s and within %s", d.Round(time.Millisecond), tt.after, tt.within)
				}
			case <-time.After(tt.within + 5*time.Second):
				t.Fatalf("the gateway still reads a body it refused after %s", tt.within+5*time.Second)
			}
		})
	}
}

// TestMaxConnections: with max_connections busy connections open (streams
// in flight) a new connection is answered 503 too_many_connections
// (OpenAI's shape, Retry-After, Connection: close) and logged, and no
// stream is cut; once one closes, a new one is served. Before, there was
// no cap; idle connections give way instead
// (TestIdleConnectionsGiveWay).
func TestMaxConnections(t *testing.T) {
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	t.Parallel()
	const max = 6
	g := startGateway(t, options{extra: fmt.Sprintf("max_connections: %d\n", max)})
	tok := g.token("contoso")
	var held []*http.Response
	for range max {
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(streamBody))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Stub-Interval", "100ms")
		req.Header.Set("X-Stub-Tokens", "20")
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream within the cap: %v %v", err, resp)
		}
		held = append(held, resp) // busy
	}
	over := g.rawConn(t)
	_, _ = io.WriteString(over, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
	_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(over), nil)
	if err != nil {
		t.Fatalf("over the cap: no answer: %v", err)
	}
	if resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Errorf("over the cap: Retry-After %q, close %t", resp.Header.Get("Retry-After"), resp.Close)
	}
	e := openAIError(t, resp, http.StatusServiceUnavailable, "too_many_connections")
	if !strings.Contains(e["message"].(string), "max_connections") {
		t.Errorf("message %q does not name max_connections", e["message"])
	}
	eventually(t, "the refusal's log line", func() bool {
		return strings.Contains(g.logs.String(), `"msg":"connection refused: max_connections reached"`)
	})
	for i, resp := range held {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if data := sseData(body); err != nil || len(data) == 0 || data[len(data)-1] != "[DONE]" {
			t.Errorf("stream %d cut at the cap: %v %q", i, err, data)
		}
	}
	// They left; a new connection is served.
	eventually(t, "a connection served after the streams ended", func() bool {
		resp, err := http.Get(g.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestTenantConcurrencyCap: a tenant holding max_concurrent_requests
// requests gets 429 too_many_concurrent_requests (OpenAI's shape,
// Retry-After) for one more, while another tenant is served. Before,
// there was no cap.
func TestTenantConcurrencyCap(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{extra: "max_concurrent_requests: 2\n"})
	tok := g.token("contoso")
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := g.post("/v1/chat/completions", tok, streamBody, stub.TTFTHeader, "6s")
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	defer wg.Wait()
	eventually(t, "two streams held at the backend", func() bool { return g.Stubs[0].Stats().ActiveStreams == 2 })
	refused := g.post("/v1/chat/completions", tok, chatBody)
	if refused.Header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	e := openAIError(t, refused, http.StatusTooManyRequests, "too_many_concurrent_requests")
	if msg := e["message"].(string); !strings.Contains(msg, `"contoso"`) || !strings.Contains(msg, "limit 2") {
		t.Errorf("message %q does not name the tenant and its limit", msg)
	}
	// The neighbour is served meanwhile.
	resp := g.post("/v1/chat/completions", g.token("fabrikam"), chatBody)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the neighbour got %d", resp.StatusCode)
	}
}

// TestSDKNodeEarlyAnswers: the official npm openai client posting a 3 MB
// prompt (over the default 1 MiB max_body_bytes), with a valid token or a
// bad one, gets the 413 or 401 APIError on each of three tries. Before,
// it got APIConnectionError ("Connection error") after uploading
// the prompt three times.
func TestSDKNodeEarlyAnswers(t *testing.T) {
	t.Parallel()
	node, dir := nodeSDK(t)
	g := startGateway(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "edges.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "GATEWAY_URL="+g.URL+"/v1", "TOKEN="+g.token("contoso"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "pass 2") {
		t.Fatalf("node --test did not pass both tests:\n%s", out)
	}
}

// nodeSDK finds node and scripts/sdktest with its openai package; a test
// that lacks them fails in CI and skips elsewhere (testtool.Missing).
func nodeSDK(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testtool.Missing(t, "node not found on PATH: install Node.js 20+ and run `make test` (it runs `npm ci --prefix scripts/sdktest`)")
	}
	dir, err = filepath.Abs(filepath.Join("..", "..", "scripts", "sdktest"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		testtool.Missing(t, "scripts/sdktest/node_modules/openai missing: run `make test` (or `npm ci --prefix scripts/sdktest`): %v", err)
	}
	return node, dir
}

// TestStoredResponseRedirect: a backend that answers a stored response's
// GET with a 302 gives the caller 502 upstream_bad_response and no
// Location. Before, the 302 and its Location were relayed.
func TestStoredResponseRedirect(t *testing.T) {
	t.Parallel()
	backend := leakyBackend(t)
	g := startGateway(t, options{
		tenants: "  - {id: recco, models: [gpt-rec], requests: 100, interval: 1h}\n",
		extra: fmt.Sprintf(`  - name: direct
    kind: openai
    models: {gpt-rec: ""}
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
`, backend.URL+"/v1"),
	})
	tok := g.token("recco")
	resp := g.post("/v1/responses", tok, `{"model":"gpt-rec","input":"hi"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	req, _ := http.NewRequest(http.MethodGet, g.URL+"/v1/responses/resp_leak1", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		t.Errorf("Location %q reached the client", loc)
	}
	openAIError(t, resp, http.StatusBadGateway, "upstream_bad_response")
}
