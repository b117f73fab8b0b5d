package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/scripts/stub"
)

// identityEndpoint speaks Container Apps' managed-identity protocol
// (IDENTITY_ENDPOINT + X-IDENTITY-HEADER, api-version 2019-08-01).
type identityEndpoint struct {
	requests atomic.Int64
	failing  atomic.Bool
	delay    time.Duration
}

func (i *identityEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i.requests.Add(1)
	if r.Header.Get("X-IDENTITY-HEADER") != "identity-secret" {
		http.Error(w, "missing identity header", http.StatusBadRequest)
		return
	}
	time.Sleep(i.delay)
	if i.failing.Load() {
		http.Error(w, `{"error":"unavailable"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	exp := time.Now().Add(time.Hour).Unix()
	fmt.Fprintf(w, `{"access_token":"entra-token-%d","expires_on":"%d","resource":%q,"token_type":"Bearer"}`,
		i.requests.Load(), exp, r.URL.Query().Get("resource"))
}

// TestEntraKeyless: an azure-openai endpoint with auth: entra gets its bearer
// from the real azidentity managed-identity client against a loopback
// identity endpoint: fetched once for many requests, never the caller's
// token, never an api-key; an identity outage on a cold gateway is a 502
// naming the credential. It also logs what the token fetch costs the first
// request at cold start.
func TestEntraKeyless(t *testing.T) {
	ids := &identityEndpoint{delay: 20 * time.Millisecond}
	idSrv := httptest.NewServer(ids)
	t.Cleanup(idSrv.Close)
	t.Setenv("IDENTITY_ENDPOINT", idSrv.URL)
	t.Setenv("IDENTITY_HEADER", "identity-secret")

	pool := func(clientID string) string {
		return fmt.Sprintf(`  - name: azure-entra
    kind: azure-openai
    models: {gpt-4o-entra: gpt-4o-prod}
    endpoints:
      - url: %%q
        auth: entra
        entra: {credential: managed-identity, client_id: %q, timeout: 2s}
`, clientID)
	}
	tenants := "  - {id: entra-tenant, models: [gpt-4o-entra], requests: 1000, interval: 1h}\n"
	body := `{"model":"gpt-4o-entra","stream":true,"messages":[{"role":"user","content":"hi"}]}`

	t.Run("token fetched once, sent as bearer", func(t *testing.T) {
		g := startGatewayWithPool(t, pool("entra-e2e-"+strconv.FormatInt(time.Now().UnixNano(), 36)), tenants)
		tok := g.token("entra-tenant")
		var wg sync.WaitGroup
		first := time.Now()
		resp := g.post("/v1/chat/completions", tok, body, stub.TTFTHeader, "0s", stub.IntervalHeader, "0s")
		firstCost := time.Since(first)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("first request: %d %s", resp.StatusCode, b)
		}
		resp.Body.Close()
		warm := time.Now()
		resp = g.post("/v1/chat/completions", tok, body, stub.TTFTHeader, "0s", stub.IntervalHeader, "0s")
		resp.Body.Close()
		t.Logf("cold start: first request %v (token fetched in the background from start, identity endpoint delay %v); warm request %v",
			firstCost, ids.delay, time.Since(warm))
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := g.post("/v1/chat/completions", tok, body)
				r.Body.Close()
				if r.StatusCode != 200 {
					t.Errorf("status %d", r.StatusCode)
				}
			}()
		}
		wg.Wait()
		if n := ids.requests.Load(); n != 1 {
			t.Fatalf("identity endpoint asked %d times for 22 requests, want 1", n)
		}
		last := g.Stubs[0].LastRequest()
		if got := last.Header.Get("Authorization"); !strings.HasPrefix(got, "Bearer entra-token-") {
			t.Fatalf("backend Authorization %q, want the Entra token", got)
		}
		if last.Header.Get("Api-Key") != "" || last.Path != "/openai/deployments/gpt-4o-prod/chat/completions" {
			t.Fatalf("backend got api-key %q path %s", last.Header.Get("Api-Key"), last.Path)
		}
	})

	t.Run("identity endpoint down: 502, the credential named in the log only", func(t *testing.T) {
		ids.failing.Store(true)
		defer ids.failing.Store(false)
		g := startGatewayWithPool(t, pool("entra-down-"+strconv.FormatInt(time.Now().UnixNano(), 36)), tenants)
		resp := g.post("/v1/chat/completions", g.token("entra-tenant"), body)
		id := resp.Header.Get("X-Request-Id")
		e := openAIError(t, resp, http.StatusBadGateway, "upstream_credential_error")
		msg, _ := e["message"].(string)
		if strings.Contains(msg, "entra-token-") || strings.Contains(msg, "http") {
			t.Fatalf("message must name no token and no endpoint: %q", msg)
		}
		if d, _ := g.accessLog(id)["error"].(string); !strings.Contains(d, "managed-identity") || strings.Contains(d, "entra-token-") {
			t.Fatalf("access log must name the credential and no token: %q", d)
		}
	})
}

// startGatewayWithPool starts a gateway whose config has one more pool (the
// pool YAML's %q takes the first stub's URL) and more tenant rows.
func startGatewayWithPool(t *testing.T, poolYAML, tenants string) *gw {
	t.Helper()
	// Start the stubs first so the extra pool can point at one.
	base := startGateway(t, options{openStubs: true})
	return startGateway(t, options{share: base, tenants: tenants, extra: fmt.Sprintf(poolYAML, base.stubURLs[0])})
}

// TestEntraRedisLimiter: the limiter logs in to Redis as the identity's
// object id with its Entra token as the password (Azure Cache for Redis'
// keyless mode), against a real redis-server whose ACL only accepts that
// token; with policy closed, a failed login would be a 503.
func TestEntraRedisLimiter(t *testing.T) {
	ids := &identityEndpoint{}
	idSrv := httptest.NewServer(ids)
	t.Cleanup(idSrv.Close)
	t.Setenv("IDENTITY_ENDPOINT", idSrv.URL)
	t.Setenv("IDENTITY_HEADER", "identity-secret")

	rs := redistest.Start(t)
	const objectID = "11111111-2222-3333-4444-555555555555"
	// The identity endpoint's first token is entra-token-1.
	rs.Do("ACL", "SETUSER", objectID, "on", ">entra-token-1", "~*", "&*", "+@all")
	rs.Do("ACL", "SETUSER", "default", "off")

	limiter := fmt.Sprintf(`limiter:
  store: redis
  redis_url_env: REDIS_URL
  failure_policy: closed
  timeout: 2s
  redis_entra: {credential: managed-identity, client_id: %q, username: %q}
`, "redis-e2e-"+strconv.FormatInt(time.Now().UnixNano(), 36), objectID)
	g := startGateway(t, options{limiter: limiter, env: map[string]string{"REDIS_URL": rs.URL()}})
	resp := g.post("/v1/chat/completions", g.token("contoso"), chatBody)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("limiter with an Entra login: %d %s", resp.StatusCode, b)
	}
	if ids.requests.Load() != 1 {
		t.Fatalf("identity endpoint asked %d times, want 1", ids.requests.Load())
	}
	if strings.Contains(g.logs.String(), "entra-token-") {
		t.Fatal("a token reached the log")
	}
}
