package server

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/request"
)

// TestAbuseIDsKeyedPerTenant: the ids a vendor attributes abuse to (user,
// safety_identifier, Anthropic's metadata.user_id) live in the one
// account's namespace; each is sent as "{tenant}:{id}", so tenant t2
// sending t1's end user's id speaks as its own. Before: forwarded as
// sent, so t2 could get t1's end user flagged or speak under its
// standing.
func TestAbuseIDsKeyedPerTenant(t *testing.T) {
	t.Parallel()
	g, b := recordedGateway(t, "openai", nil)
	resp, out := g.call(t, "POST", "/v1/chat/completions", "t2",
		`{"model":"m","stream":true,"user":"alice","safety_identifier":"al\u0069ce","metadata":{"user_id":"alice"},"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	m := b.last(t)
	if m["user"] != "t2:alice" || m["safety_identifier"] != "t2:alice" || m["metadata"].(map[string]any)["user_id"] != "t2:alice" {
		t.Fatalf("ids not keyed per tenant: %v", m)
	}
	for _, body := range []string{
		`{"model":"m","user":"a","us\u0065r":"b","messages":[]}`, // two readings
		`{"model":"m","safety_identifier":7,"messages":[]}`,      // a type a backend may coerce
	} {
		if resp, out := g.call(t, "POST", "/v1/chat/completions", "t2", body); resp.StatusCode != 400 {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, out)
		}
	}
}

// TestVLLMCacheSaltPerTenant: on a vLLM pool the gateway writes each
// tenant's cache_salt, whatever the client sent, so no tenant shares
// (and times) another's cached prefixes. Before: the body had none, or
// the client's own, which could be another tenant's.
func TestVLLMCacheSaltPerTenant(t *testing.T) {
	t.Parallel()
	g, b := recordedGateway(t, "vllm", nil)
	salt := func(tenant string) string { return string(request.CacheSalt(nil, tenant)) }
	for _, c := range []struct{ tenant, body string }{
		{"t1", streamBody},
		{"t2", strings.Replace(streamBody, `{`, `{"cache_salt":"`+salt("t1")+`",`, 1)},
	} {
		if resp, out := g.call(t, "POST", "/v1/chat/completions", c.tenant, c.body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		if got := b.last(t)["cache_salt"]; got != salt(c.tenant) {
			t.Fatalf("%s: cache_salt %v, want %s", c.tenant, got, salt(c.tenant))
		}
	}
	// A kind that does not read it gets none added.
	g, b = recordedGateway(t, "openai", nil)
	if resp, out := g.call(t, "POST", "/v1/chat/completions", "t1", streamBody); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if _, ok := b.last(t)["cache_salt"]; ok {
		t.Fatal("cache_salt added on an openai pool")
	}
}
