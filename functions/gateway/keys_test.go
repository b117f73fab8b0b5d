package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/otelcoltest"
	"github.com/llmgw/gateway/internal/testing/redistest"
)

// keysSecret is the digests' secret of the tests' gateways.
const keysSecret = "0123456789abcdef0123456789abcdef-test"

// keysOn is the options of a gateway with gateway keys in a Redis store
// on rs, whose cache believes the store for bound.
func keysOn(rs *redistest.Server, bound string) options {
	return options{
		limiter: redisLimiter("closed"),
		env:     map[string]string{"REDIS_URL": rs.URL(), "KEY_SECRET": keysSecret},
		extra:   "api_keys: {secret_env: KEY_SECRET, cache_ttl: " + bound + "}\n",
	}
}

// keysCmd runs "gateway keys <args>" on g's config and environment and
// returns its standard output; the audit lines go to audit.
func keysCmd(t *testing.T, g *gw, audit io.Writer, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	argv := append([]string{"gateway", "keys", args[0], "-config", g.cfgPath}, args[1:]...)
	if err := run(context.Background(), argv, func(k string) string { return g.env[k] }, &out, io.MultiWriter(&errOut, audit)); err != nil {
		t.Fatalf("gateway keys %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// newAPIKey makes a store key with the CLI and returns it.
func newAPIKey(t *testing.T, g *gw, audit io.Writer, args ...string) string {
	t.Helper()
	key, _, _ := strings.Cut(keysCmd(t, g, audit, append([]string{"create"}, args...)...), "\n")
	if !strings.HasPrefix(key, "llmgw-") {
		t.Fatalf("create printed %q", key)
	}
	return key
}

// TestKeyTwoReplicas: two replicas on one Redis: a key revoked on one is
// refused by both within the cache's bound; an expired key is a 401 that
// tells the client not to retry.
func TestKeyTwoReplicas(t *testing.T) {
	rs := redistest.Start(t)
	a := startGateway(t, keysOn(rs, "500ms"))
	bo := keysOn(rs, "500ms")
	bo.share = a
	b := startGateway(t, bo)
	key := newAPIKey(t, a, io.Discard, "-tenant", "contoso")
	for _, g := range []*gw{a, b} {
		resp := g.post("/v1/chat/completions", key, chatBody)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("before revocation: %d", resp.StatusCode)
		}
	}
	keysCmd(t, b, io.Discard, "revoke", "-id", key[6:14])
	revoked := time.Now()
	for _, g := range []*gw{a, b} {
		eventually(t, "the revocation reaches the replica", func() bool {
			resp := g.post("/v1/chat/completions", key, chatBody)
			resp.Body.Close()
			return resp.StatusCode == http.StatusUnauthorized
		})
	}
	if d := time.Since(revoked); d > 2*time.Second {
		t.Fatalf("revocation took %s, bound 500ms", d)
	}

	short := newAPIKey(t, a, io.Discard, "-tenant", "contoso", "-ttl", "1s")
	time.Sleep(1100 * time.Millisecond)
	resp := b.post("/v1/chat/completions", short, chatBody)
	openAIError(t, resp, http.StatusUnauthorized, "invalid_token")
	if resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("expired key: x-should-retry %q", resp.Header.Get("X-Should-Retry"))
	}
}

// TestKeyOtherTenant: a key of a tenant the gateway's table lacks (the
// same store and secret, another tenant's isolated endpoint) is refused,
// never served.
func TestKeyOtherTenant(t *testing.T) {
	rs := redistest.Start(t)
	claude, _ := startClaude(t, keysOn(rs, "5s"))
	plain := startGateway(t, keysOn(rs, "5s"))
	key := newAPIKey(t, claude, io.Discard, "-tenant", "anthro")
	resp := plain.post("/v1/chat/completions", key, chatBody)
	openAIError(t, resp, http.StatusForbidden, "tenant_not_allowed")
}

// TestKeyNotInTelemetry: a request made with a gateway key leaves no
// trace of the key in what the gateway exports over OTLP (spans and
// metric points, attributes and resource), nor its secret in the access
// log: telemetry carries no credential, the log names the key by its
// public id only.
func TestKeyNotInTelemetry(t *testing.T) {
	t.Parallel()
	col := otelcoltest.Start(t)
	rs := redistest.Start(t)
	o := keysOn(rs, "5s")
	for k, v := range otelEnv(col) {
		o.env[k] = v
	}
	g := startGateway(t, o)
	key := newAPIKey(t, g, io.Discard, "-tenant", "contoso")
	id, secret := key[len("llmgw-"):len("llmgw-")+8], key[len("llmgw-")+9:]
	for _, body := range []string{chatBody, `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`} {
		resp := g.post("/v1/chat/completions", key, body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d", resp.StatusCode)
		}
	}
	resp := g.post("/v1/chat/completions", key[:len(key)-4]+"zzzz", chatBody) // a wrong secret
	resp.Body.Close()
	g.Stop()
	<-g.Exited
	points, spans, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) == 0 || len(points) == 0 {
		t.Fatalf("the collector got %d spans and %d points", len(spans), len(points))
	}
	leaks := func(where string, attrs map[string]string) {
		for k, v := range attrs {
			if strings.Contains(v, secret) || strings.Contains(v, secret[:12]) || strings.Contains(v, key) {
				t.Errorf("%s attribute %s = %q holds the key", where, k, v)
			}
		}
	}
	for _, s := range spans {
		leaks("span "+s.Name, s.Attrs)
	}
	for _, p := range points {
		leaks("metric "+p.Metric, p.Attrs)
		leaks("resource of "+p.Metric, p.Resource)
	}
	logs := g.logs.String()
	if strings.Contains(logs, secret[:12]) {
		t.Fatal("the gateway's log holds the key's secret")
	}
	if !strings.Contains(logs, `"subject":"key:`+id+`"`) {
		t.Fatalf("the access log does not name the key by its public id key:%s", id)
	}
}
