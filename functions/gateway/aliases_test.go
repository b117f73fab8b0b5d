package main

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// TestModelAliases: a model alias end to end. A request for the alias is
// routed to its target's pool and reaches the backend under the target's
// backend name; /v1/models lists it for the tenants allowed the target,
// and not for the others, who get 404 for it (Codex asks for gpt-6.2-sol
// when no model is set).
func TestModelAliases(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{extra: "aliases: {gpt-6.2-sol: llama}\n"})

	resp := g.post("/v1/chat/completions", g.token("fabrikam"), `{"model":"gpt-6.2-sol","messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("alias: %d %s", resp.StatusCode, b)
	}
	reqs := g.Stubs[0].Requests()
	var body struct{ Model string }
	if len(reqs) == 0 || json.Unmarshal(reqs[len(reqs)-1].Body, &body) != nil || body.Model != "meta/Llama-3.1-8B" {
		t.Fatalf("the backend read model %q, want the target's backend name", body.Model)
	}
	if l := g.accessLog(resp.Header.Get("X-Request-Id")); l["model"] != "gpt-6.2-sol" || l["pool"] != "pool-a" {
		t.Errorf("access log model %v pool %v", l["model"], l["pool"])
	}

	list := func(tenant string) map[string]bool {
		req, _ := http.NewRequest(http.MethodGet, g.URL+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+g.token(tenant))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l struct{ Data []struct{ ID string } }
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != 200 {
			t.Fatalf("/v1/models: %d %v", resp.StatusCode, err)
		}
		ids := map[string]bool{}
		for _, m := range l.Data {
			ids[m.ID] = true
		}
		return ids
	}
	if ids := list("fabrikam"); !ids["gpt-6.2-sol"] || !ids["llama"] {
		t.Errorf("fabrikam's /v1/models %v lacks the alias", ids)
	}
	// A tenant not allowed the target is not allowed the alias.
	g2 := startGateway(t, options{extra: "aliases: {gpt-6.2-sol: gpt-4o}\n"})
	req, _ := http.NewRequest(http.MethodGet, g2.URL+"/v1/models/gpt-6.2-sol", nil)
	req.Header.Set("Authorization", "Bearer "+g2.token("fabrikam"))
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	openAIError(t, r2, 404, "model_not_found")
	resp = g2.post("/v1/chat/completions", g2.token("fabrikam"), `{"model":"gpt-6.2-sol","messages":[]}`)
	openAIError(t, resp, 404, "model_not_found")
}
