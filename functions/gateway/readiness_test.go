package main

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/shared/server"
)

// probeStatus is the status GET path answers.
func probeStatus(t *testing.T, g *gw, path string) int {
	t.Helper()
	resp, err := http.Get(g.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestReadinessWaitsForKeys: with the issuer down since the start /healthz
// (liveness) is 200 but /readyz is 503 not_ready (OpenAI's shape,
// Retry-After), and a token is 503 auth_unavailable; once the keys are in
// /readyz is 200. Before, there was no /readyz and /healthz said
// 200 while every request got 503.
func TestReadinessWaitsForKeys(t *testing.T) {
	t.Parallel()
	down := &atomic.Bool{}
	down.Store(true)
	g := startGateway(t, options{issuerDown: down})
	if st := probeStatus(t, g, "/healthz"); st != http.StatusOK {
		t.Errorf("/healthz with the keys never fetched: %d, want 200 (liveness)", st)
	}
	resp, err := http.Get(g.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("/readyz 503 without Retry-After")
	}
	openAIError(t, resp, http.StatusServiceUnavailable, "not_ready")
	// Container Apps' readiness probe asks /healthz with the header (the
	// bicep's probe; the placeholder image serves only /healthz).
	req, _ := http.NewRequest(http.MethodGet, g.URL+"/healthz", nil)
	req.Header.Set(server.ReadinessProbeHeader, "readiness")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	openAIError(t, resp, http.StatusServiceUnavailable, "not_ready")
	resp = g.post("/v1/chat/completions", g.token("contoso"), `{"model":"llama","messages":[]}`)
	if resp.Header.Get("Retry-After") == "" {
		t.Error("auth_unavailable without Retry-After")
	}
	openAIError(t, resp, http.StatusServiceUnavailable, "auth_unavailable")
	down.Store(false)
	eventually(t, "/readyz 200 once the issuer is up", func() bool { return probeStatus(t, g, "/readyz") == http.StatusOK })
	req, _ = http.NewRequest(http.MethodGet, g.URL+"/healthz", nil)
	req.Header.Set(server.ReadinessProbeHeader, "readiness")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz readiness once the keys are in: %d, want 200", resp.StatusCode)
	}
}

// TestRotationDuringIssuerOutageIs503: a token signed with a key the
// issuer rotated in while it is down is 503 auth_unavailable with
// Retry-After (clients retry), not 401 invalid_token (they do not); once
// the issuer is back it is served, long before unknown_kid_interval.
// Before the issuer-outage retry it was 401 until unknown_kid_interval
// after the recovery.
func TestRotationDuringIssuerOutageIs503(t *testing.T) {
	t.Parallel()
	down := &atomic.Bool{}
	g := startGateway(t, options{issuerDown: down})
	const body = `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`
	resp := g.post("/v1/chat/completions", g.token("contoso"), body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("before the outage: %d", resp.StatusCode)
	}
	down.Store(true)
	if err := g.Issuer.Rotate(); err != nil {
		t.Fatal(err)
	}
	tok := g.token("contoso") // signed with the new key
	for range 2 {
		resp = g.post("/v1/chat/completions", tok, body)
		if resp.Header.Get("Retry-After") == "" {
			t.Error("auth_unavailable without Retry-After")
		}
		openAIError(t, resp, http.StatusServiceUnavailable, "auth_unavailable")
	}
	down.Store(false)
	eventually(t, "the rotated key served after the recovery", func() bool {
		resp := g.post("/v1/chat/completions", tok, body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Fatalf("401 after the recovery: the rotated key was not fetched")
		}
		return resp.StatusCode == http.StatusOK
	})
}
