package main

// What of a backend's answer reaches the caller: its headers by
// allow-list, never its redirects or their Location.

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

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
		// Each request meets the redirect (weight 10⁶ to 1) and fails
		// over: one request's failure does not bench the endpoint for
		// everyone (five in a row across requests do).
		want := 2.0
		if log := g.accessLog(resp.Header.Get("X-Request-Id")); log["attempts"] != want {
			t.Errorf("stream %t: attempts %v, want %v", stream, log["attempts"], want)
		}
	}
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
