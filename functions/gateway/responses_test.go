package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/scripts/stub"
)

// TestResponsesAffinityAcrossReplicas: two gateway processes on one
// redis-server, each pool with two stub endpoints that know only their
// own stored responses. A response created through one replica is found
// through the other (previous_response_id and GET /v1/responses/{id}),
// every time, and never by another tenant; after scale-to-zero a fresh
// replica still finds it.
func TestResponsesAffinityAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	env := map[string]string{"REDIS_URL": rs.URL()}
	a := startGateway(t, options{stubs: 2, stubOpts: stub.Options{Tokens: 3}, limiter: redisLimiter("closed"), env: env})
	b := startGateway(t, options{stubs: 2, limiter: redisLimiter("closed"), env: env, share: a})
	tok, other := a.token("contoso"), a.token("fabrikam")

	call := func(g *gw, method, path, token, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, g.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	status, out := call(a, "POST", "/v1/responses", tok, `{"model":"llama","input":"hi"}`)
	var created struct{ ID string }
	if status != 200 || json.Unmarshal(out, &created) != nil || created.ID == "" {
		t.Fatalf("create: %d %s", status, out)
	}
	for i := 0; i < 6; i++ {
		g := []*gw{a, b}[i%2]
		if status, out := call(g, "POST", "/v1/responses", tok, `{"model":"llama","input":"more","previous_response_id":"`+created.ID+`"}`); status != 200 {
			t.Fatalf("follow-up %d through replica %d: %d %s", i, i%2, status, out)
		}
		if status, out := call(g, "GET", "/v1/responses/"+created.ID, tok, ""); status != 200 {
			t.Fatalf("get %d: %d %s", i, status, out)
		}
	}
	// fabrikam may use llama too, but not contoso's response.
	if status, _ := call(b, "GET", "/v1/responses/"+created.ID, other, ""); status != 404 {
		t.Fatalf("another tenant read the response: %d", status)
	}
	if status, out := call(b, "POST", "/v1/responses", other, `{"model":"llama","input":"x","previous_response_id":"`+created.ID+`"}`); status != 404 {
		t.Fatalf("another tenant continued the response: %d %s", status, out)
	}
	c := startGateway(t, options{stubs: 2, limiter: redisLimiter("closed"), env: env, share: a})
	if status, out := call(c, "GET", "/v1/responses/"+created.ID+"/input_items", tok, ""); status != 200 {
		t.Fatalf("a fresh replica lost the record: %d %s", status, out)
	}
}
