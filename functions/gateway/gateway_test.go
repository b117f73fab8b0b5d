package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/scripts/stub"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
)

const chatBody = `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`
const streamBody = `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestHealthz(t *testing.T) {
	g := startGateway(t, options{})
	resp, err := http.Get(g.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz %d", resp.StatusCode)
	}
}

func TestBadTokens(t *testing.T) {
	g := startGateway(t, options{})
	iss := g.Issuer
	mint := func(c devissuer.Claims) string {
		if c.Tenant == "" {
			c.Tenant = "contoso"
		}
		if c.Audience == nil {
			c.Audience = []string{testAudience}
		}
		tok, err := iss.Mint(c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	good := mint(devissuer.Claims{})
	parts := strings.Split(good, ".")
	other := strings.Split(mint(devissuer.Claims{Tenant: "fabrikam"}), ".")
	tests := []struct {
		name   string
		header string
	}{
		{"no header", ""},
		{"wrong scheme", "Basic " + good},
		{"garbage", "Bearer not-a-jwt"},
		{"expired", "Bearer " + mint(devissuer.Claims{ExpiresAt: time.Now().Add(-time.Hour)})},
		{"not yet valid", "Bearer " + mint(devissuer.Claims{NotBefore: time.Now().Add(time.Hour)})},
		{"issued in the future", "Bearer " + mint(devissuer.Claims{IssuedAt: time.Now().Add(time.Hour)})},
		{"wrong iss", "Bearer " + mint(devissuer.Claims{Issuer: "https://evil.example"})},
		{"wrong aud", "Bearer " + mint(devissuer.Claims{Audience: []string{"someone-else"}})},
		{"alg none", "Bearer " + mint(devissuer.Claims{Alg: "none"})},
		{"HS256 with the public key", "Bearer " + mint(devissuer.Claims{Alg: "HS256"})},
		{"unknown kid", "Bearer " + mint(devissuer.Claims{Kid: "forged-kid"})},
		{"tampered payload", "Bearer " + parts[0] + "." + other[1] + "." + parts[2]},
		{"missing exp", "Bearer " + mint(devissuer.Claims{NoExp: true})},
		{"missing tenant", "Bearer " + mint(devissuer.Claims{TenantClaim: "other"})},
		{"oversize", "Bearer " + strings.Repeat("a", 9000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := g.Stubs[0].Stats().Requests
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(chatBody))
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer error="invalid_token"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
			openAIError(t, resp, http.StatusUnauthorized, "invalid_token")
			if after := g.Stubs[0].Stats().Requests; after != before {
				t.Fatalf("upstream called on a bad token")
			}
		})
	}
	t.Run("good token passes", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", good, chatBody)
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("good token: %d %s", resp.StatusCode, b)
		}
	})
	t.Run("ES256 passes", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", mint(devissuer.Claims{Alg: "ES256"}), chatBody)
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("ES256 token: %d", resp.StatusCode)
		}
	})
	t.Run("no token in the log", func(t *testing.T) {
		if strings.Contains(g.logs.String(), parts[2]) || strings.Contains(g.logs.String(), backendKey) {
			t.Fatal("a token or key reached the log")
		}
	})
}

// TestKeyRotation: a token signed with a key the issuer added after start
// is accepted without a restart (one unknown-kid refresh).
func TestKeyRotation(t *testing.T) {
	g := startGateway(t, options{})
	resp := g.post("/v1/chat/completions", g.token("contoso"), chatBody)
	resp.Body.Close()
	if err := g.Issuer.Rotate(); err != nil {
		t.Fatal(err)
	}
	resp = g.post("/v1/chat/completions", g.token("contoso"), chatBody)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("token signed with the rotated key: %d", resp.StatusCode)
	}
}

func TestUnknownKIDFloodIsBounded(t *testing.T) {
	g := startGateway(t, options{})
	// Warm the key cache with one good request.
	resp := g.post("/v1/chat/completions", g.token("contoso"), chatBody)
	resp.Body.Close()
	before := g.Issuer.JWKSRequests()
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			tok, _ := g.Issuer.Mint(devissuer.Claims{Tenant: "contoso", Audience: []string{testAudience}, Kid: "forged-" + string(rune('a'+i%26)) + time.Now().String()})
			r := g.post("/v1/chat/completions", tok, chatBody)
			r.Body.Close()
			if r.StatusCode != http.StatusUnauthorized {
				t.Errorf("forged kid: %d", r.StatusCode)
			}
		}(i)
	}
	wg.Wait()
	if extra := g.Issuer.JWKSRequests() - before; extra > 1 {
		t.Fatalf("100 forged kids caused %d JWKS fetches, want at most 1", extra)
	}
}

func TestTenantAndModel(t *testing.T) {
	g := startGateway(t, options{})
	tests := []struct {
		name, tenant, body string
		status             int
		code               string
	}{
		{"unknown tenant", "northwind", chatBody, http.StatusForbidden, "tenant_not_allowed"},
		{"model not allowed for tenant", "fabrikam", `{"model":"gpt-4o","messages":[]}`, http.StatusNotFound, "model_not_found"},
		{"unknown model", "contoso", `{"model":"gpt-9","messages":[]}`, http.StatusNotFound, "model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := g.Stubs[0].Stats().Requests
			openAIError(t, g.post("/v1/chat/completions", g.token(tt.tenant), tt.body), tt.status, tt.code)
			if g.Stubs[0].Stats().Requests != before {
				t.Fatal("upstream called")
			}
		})
	}
}

func TestRequestErrors(t *testing.T) {
	g := startGateway(t, options{})
	tok := g.token("contoso")
	tests := []struct {
		name, method, path, body string
		status                   int
		code, param              string
	}{
		{"malformed json", "POST", "/v1/chat/completions", `{"model":`, 400, "invalid_json", ""},
		{"empty body", "POST", "/v1/chat/completions", ``, 400, "invalid_json", ""},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "missing_required_parameter", "model"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"llama"}`, 400, "missing_required_parameter", "messages"},
		{"missing prompt", "POST", "/v1/completions", `{"model":"llama"}`, 400, "missing_required_parameter", "prompt"},
		{"missing input", "POST", "/v1/embeddings", `{"model":"llama"}`, 400, "missing_required_parameter", "input"},
		{"stream not bool", "POST", "/v1/chat/completions", `{"model":"llama","stream":"yes","messages":[]}`, 400, "invalid_type", "stream"},
		{"unknown path", "POST", "/v1/nope", `{}`, 404, "unknown_url", ""},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "method_not_allowed", ""},
		{"too large", "POST", "/v1/chat/completions", `{"model":"llama","messages":[],"x":"` + strings.Repeat("a", 1<<20) + `"}`, 413, "request_too_large", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, g.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			e := openAIError(t, resp, tt.status, tt.code)
			if tt.param != "" && e["param"] != tt.param {
				t.Fatalf("param %v, want %s", e["param"], tt.param)
			}
			if tt.status == 405 && resp.Header.Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
}

func TestLimiterAdmitsExactlyN(t *testing.T) {
	const n = 5
	g := startGateway(t, options{requests: n})
	tok := g.token("contoso")
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 3*n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := g.post("/v1/chat/completions", tok, chatBody)
			defer resp.Body.Close()
			for _, h := range []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"} {
				if resp.Header.Get(h) == "" {
					t.Errorf("%d response lacks %s", resp.StatusCode, h)
				}
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				// 5 an hour: the next in 12 minutes, too far to wait.
				if resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-Should-Retry") != "false" {
					t.Errorf("429 with Retry-After %q, X-Should-Retry %q", resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"))
				}
				openAIError(t, resp, 429, "rate_limit_exceeded")
			}
			mu.Lock()
			statuses[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[200] != n || statuses[429] != 2*n {
		t.Fatalf("statuses %v, want %d×200 and %d×429", statuses, n, 2*n)
	}
}

func TestModelsList(t *testing.T) {
	g := startGateway(t, options{})
	req, _ := http.NewRequest("GET", g.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+g.token("fabrikam"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "llama" || list.Data[0].Object != "model" {
		t.Fatalf("models %+v", list)
	}
}

func TestRewriteAndCredentials(t *testing.T) {
	g := startGateway(t, options{})
	tok := g.token("contoso")
	t.Run("vllm renames the model, keeps the body, salts its cache per tenant", func(t *testing.T) {
		body := `{"model":"llama","messages":[{"role":"user","content":"hi"}],"temperature":0.25,  "seed":7}`
		resp := g.post("/v1/chat/completions", tok, body, "Cookie", "session=secret", "X-Custom", "yes")
		resp.Body.Close()
		last := g.Stubs[0].LastRequest()
		// Every other byte as sent; the tenant's own cache_salt after the
		// model, so that its prefixes are cached apart from other tenants'.
		want := `{"model":"meta/Llama-3.1-8B","cache_salt":"` + string(request.CacheSalt(nil, "contoso")) +
			`","messages":[{"role":"user","content":"hi"}],"temperature":0.25,  "seed":7}`
		if string(last.Body) != want {
			t.Fatalf("backend got %s\nwant        %s", last.Body, want)
		}
		if last.Path != "/v1/chat/completions" || last.Auth != stub.AuthBearer {
			t.Fatalf("path %s auth %s", last.Path, last.Auth)
		}
		if got := last.Header.Get("Authorization"); got != "Bearer "+backendKey {
			t.Fatalf("backend Authorization %q: the caller's token must never be forwarded", got)
		}
		if last.Header.Get("Cookie") != "" || last.Header.Get("X-Custom") != "" {
			t.Fatalf("headers: %v", last.Header)
		}
	})
	t.Run("azure deployment path and api-key", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", tok, `{"model":"gpt-4o","messages":[]}`)
		resp.Body.Close()
		last := g.Stubs[0].LastRequest()
		if last.Path != "/openai/deployments/gpt-4o-prod/chat/completions" || last.RawQuery != "api-version=2024-10-21" {
			t.Fatalf("azure path %s?%s", last.Path, last.RawQuery)
		}
		if last.Auth != stub.AuthAPIKey || last.Header.Get("Authorization") != "" {
			t.Fatalf("azure auth %s, Authorization %q", last.Auth, last.Header.Get("Authorization"))
		}
	})
	t.Run("non-stream relayed byte for byte with backend model", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", tok, chatBody)
		defer resp.Body.Close()
		var c struct {
			Model string
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
			t.Fatal(err)
		}
		if c.Model != "meta/Llama-3.1-8B" || c.Usage.CompletionTokens != 8 {
			t.Fatalf("got %+v", c)
		}
		log := g.accessLog(resp.Header.Get("X-Request-Id"))
		if log["completion_tokens"] != float64(8) || log["tenant"] != "contoso" || log["pool"] != "pool-a" {
			t.Fatalf("access log %v", log)
		}
	})
}

func TestStreamUsage(t *testing.T) {
	g := startGateway(t, options{})
	tok := g.token("contoso")
	t.Run("injected and stripped", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", tok, streamBody)
		defer resp.Body.Close()
		for h, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
		b, _ := io.ReadAll(resp.Body)
		data := sseData(b)
		if len(data) == 0 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("stream did not end with [DONE]: %q", b)
		}
		if strings.Contains(string(b), `"usage":{`) || strings.Contains(string(b), `"choices":[]`) {
			t.Fatalf("client got usage it did not ask for: %s", b)
		}
		var sent struct {
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		_ = json.Unmarshal(g.Stubs[0].LastRequest().Body, &sent)
		if !sent.StreamOptions.IncludeUsage {
			t.Fatalf("gateway did not ask the backend for usage: %s", g.Stubs[0].LastRequest().Body)
		}
		log := g.accessLog(resp.Header.Get("X-Request-Id"))
		if log["completion_tokens"] != float64(8) {
			t.Fatalf("usage not counted: %v", log)
		}
	})
	t.Run("client asked: untouched", func(t *testing.T) {
		resp := g.post("/v1/chat/completions", tok, `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		data := sseData(b)
		if len(data) < 2 || !strings.Contains(data[len(data)-2], `"usage":{"prompt_tokens"`) {
			t.Fatalf("usage chunk missing: %s", b)
		}
	})
}

// TestFlushPerEvent proves per-event delivery by order: with the stub in
// step mode it cannot emit event k+1 until the test releases it, so the
// client can only hold event k if the gateway flushed it on its own. A
// gateway that buffers deadlocks here and fails at the generous timeout.
func TestFlushPerEvent(t *testing.T) {
	step := make(chan struct{})
	g := startGateway(t, options{stubOpts: stub.Options{Step: step, Tokens: 5}})
	// include_usage: the usage chunk is then relayed, so every event the
	// stub emits is one the client must receive.
	resp := g.post("/v1/chat/completions", g.token("contoso"),
		`{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for k := 1; ; k++ {
		ev := stepEvent(t, step, r, k, 10*time.Second)
		if emitted := g.Stubs[0].Emitted(); emitted > int64(k) {
			t.Fatalf("stub emitted %d events while the client holds %d", emitted, k)
		}
		if strings.HasPrefix(ev, "error: ") {
			if k > 1 && strings.Contains(ev, "EOF") {
				break
			}
			t.Fatalf("event %d: %s", k, ev)
		}
		if strings.Contains(ev, "[DONE]") {
			break
		}
	}
}

// readEvent reads one SSE event (up to a blank line), skipping the stripped
// usage chunk's absence: it returns the event's text.
func readEvent(r *bufio.Reader) (string, error) {
	var ev strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev.String(), err
		}
		if line == "\n" {
			if ev.Len() > 0 {
				return ev.String(), nil
			}
			continue
		}
		ev.WriteString(line)
	}
}

func TestFailoverBeforeFirstByte(t *testing.T) {
	tests := []struct {
		name  string
		fault stub.Fault
		dead  bool
	}{
		{name: "connect refused", dead: true},
		{name: "500", fault: stub.Fault{Status: 500}},
		{name: "429 with Retry-After", fault: stub.Fault{Status: 429, RetryAfter: time.Hour}},
		{name: "connection reset", fault: stub.Fault{Close: true}},
		{name: "header timeout", fault: stub.Fault{Hang: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := startGateway(t, options{stubs: 2, deadURL: tt.dead,
				upstreamCfg: "upstream: {max_attempts: 3, header_timeout: 500ms, default_cooldown: 1h, max_cooldown: 1h}\n"})
			bad := g.Stubs[0]
			bad.SetFault(tt.fault)
			tok := g.token("contoso")
			const requests = 12
			for i := 0; i < requests; i++ {
				resp := g.post("/v1/chat/completions", tok, streamBody)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
				}
			}
			if tt.dead {
				return
			}
			// A backend's Retry-After cools the endpoint at its first
			// answer; any other failure may be its request's own, so only
			// route.DefaultFailAfter of them in a row eject it.
			most := int64(route.DefaultFailAfter)
			if tt.fault.RetryAfter > 0 {
				most = 1
			}
			if n := bad.Stats().Requests; n > most {
				t.Fatalf("faulty endpoint got %d requests, want at most %d; cooldown or ejection not honoured", n, most)
			}
			if g.Stubs[1].Stats().Completed != requests {
				t.Fatalf("healthy endpoint completed %d", g.Stubs[1].Stats().Completed)
			}
		})
	}
	t.Run("all endpoints fail: gateway error", func(t *testing.T) {
		g := startGateway(t, options{stubs: 2})
		g.Stubs[0].SetFault(stub.Fault{Status: 503})
		g.Stubs[1].SetFault(stub.Fault{Status: 503})
		resp := g.post("/v1/chat/completions", g.token("contoso"), chatBody)
		openAIError(t, resp, http.StatusBadGateway, "upstream_error")
		log := g.accessLog(resp.Header.Get("X-Request-Id"))
		if log["attempts"] != float64(2) {
			t.Fatalf("attempts %v", log["attempts"])
		}
	})
}

func TestMidStreamFailure(t *testing.T) {
	tests := []struct {
		name  string
		fault stub.Fault
		extra string
	}{
		{name: "drop", fault: stub.Fault{DropAfter: 3}},
		{name: "stall", fault: stub.Fault{StallAfter: 3}, extra: "upstream: {stream_idle_timeout: 300ms}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := options{stubs: 2}
			if tt.extra != "" {
				o.upstreamCfg = tt.extra
			}
			g := startGateway(t, o)
			g.Stubs[0].SetFault(tt.fault)
			g.Stubs[1].SetFault(tt.fault)
			resp := g.post("/v1/chat/completions", g.token("contoso"), streamBody)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("stream did not end cleanly: %v", err)
			}
			data := sseData(b)
			if len(data) != 4 {
				t.Fatalf("want 3 events + 1 error event, got %d: %s", len(data), b)
			}
			if strings.Contains(string(b), "[DONE]") {
				t.Fatal("fake [DONE] after a failure")
			}
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal([]byte(data[3]), &e); err != nil || e.Error.Message == "" {
				t.Fatalf("last event is not an OpenAI error: %s", data[3])
			}
			total := g.Stubs[0].Stats().Requests + g.Stubs[1].Stats().Requests
			if total != 1 {
				t.Fatalf("retried after the first byte: %d backend requests", total)
			}
		})
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 1000, Interval: 10 * time.Millisecond}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Authorization", "Bearer "+g.token("contoso"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	eventually(t, "the stub to see the stream cancelled", func() bool { return g.Stubs[0].Stats().Canceled == 1 })
	if g.Stubs[0].Stats().ActiveStreams != 0 {
		t.Fatal("upstream stream still active")
	}
}

func TestBadConfigStopsBeforeListening(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/bad.yaml"
	if err := writeFile(path, "listen: 127.0.0.1:0\nauth: {issuer: nope}\npools: []\n"); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	err := run(context.Background(), []string{"gateway", "-config", path}, func(string) string { return "" }, &out, &out)
	var p config.Problems
	if !errors.As(err, &p) {
		t.Fatalf("want config problems, got %v", err)
	}
	for _, f := range []string{"auth.issuer", "auth.audiences", "pools", "tenants"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("problem list lacks %s: %v", f, err)
		}
	}
	if strings.Contains(out.String(), "listening") {
		t.Fatal("listened with a bad config")
	}
}

// TestNonStreamingTimeoutIsNotRetried: a non-streaming answer slower than
// response_timeout is a 504 after one attempt (the backend may still be
// working, and paying); a streaming request past header_timeout fails over.
func TestNonStreamingTimeoutIsNotRetried(t *testing.T) {
	g := startGateway(t, options{stubs: 2, stubOpts: stub.Options{NonStreamDelay: 3 * time.Second},
		upstreamCfg: "upstream: {max_attempts: 3, header_timeout: 5s, response_timeout: 300ms, default_cooldown: 1m}\n"})
	resp := g.post("/v1/chat/completions", g.token("contoso"), chatBody)
	openAIError(t, resp, http.StatusGatewayTimeout, "upstream_timeout")
	if n := g.Stubs[0].Stats().Requests + g.Stubs[1].Stats().Requests; n != 1 {
		t.Fatalf("%d backend requests for one non-streaming timeout, want 1", n)
	}
}
