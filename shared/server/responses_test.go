package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/scripts/stub"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/tenant"
)

// tokenIsTenant takes "Bearer <tenant>" as that tenant's token.
type tokenIsTenant struct{}

func (tokenIsTenant) Verify(_ context.Context, authorization string) (auth.Principal, error) {
	t, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || t == "" {
		return auth.Principal{}, errors.New("no token")
	}
	return auth.Principal{Tenant: t, Subject: "s"}, nil
}

// responsesGateway serves model "m" from n stub endpoints speaking the
// Responses API; tenants t1 and t2 may both use it.
func responsesGateway(t *testing.T, n int) (*testGateway, []*stub.Server) {
	t.Helper()
	var stubs []*stub.Server
	var hs []http.Handler
	for i := 0; i < n; i++ {
		s := stub.New(stub.Options{Tokens: 5})
		t.Cleanup(s.Close)
		stubs = append(stubs, s)
		hs = append(hs, s)
	}
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}, {ID: "t2", Models: []string{"m"}}})
	}, hs...)
	return g, stubs
}

func (g *testGateway) call(t *testing.T, method, path, tenant, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, g.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestResponsesJSONAndStream(t *testing.T) {
	g, stubs := responsesGateway(t, 1)
	resp, b := g.call(t, "POST", "/v1/responses", "t1", `{"model":"m","input":"hello"}`)
	var r struct {
		ID, Object string
		Usage      struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); resp.StatusCode != 200 || err != nil || r.Object != "response" || !strings.HasPrefix(r.ID, "resp_") {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	l := g.lastLog(t)
	if l["prompt_tokens"] != float64(r.Usage.InputTokens) || l["completion_tokens"] != float64(r.Usage.OutputTokens) || r.Usage.OutputTokens == 0 {
		t.Fatalf("usage %+v, log %v", r.Usage, l)
	}

	resp, b = g.call(t, "POST", "/v1/responses", "t1", `{"model":"m","input":"hello","stream":true}`)
	out := string(b)
	if resp.StatusCode != 200 || !strings.HasPrefix(out, "event: response.created\n") || !strings.Contains(out, "event: response.completed\n") ||
		strings.Contains(out, `data: {"error"`) || strings.Contains(out, "[DONE]") {
		t.Fatalf("status %d stream %q", resp.StatusCode, out)
	}
	if l := g.lastLog(t); l["outcome"] != "ok" || l["completion_tokens"] != float64(5) || l["events"].(float64) < 5 {
		t.Fatalf("log %v", l)
	}
	for _, req := range stubs[0].Requests() {
		if strings.Contains(string(req.Body), "stream_options") {
			t.Fatalf("stream_options injected into a Responses request: %s", req.Body)
		}
	}
}

// TestResponsesAffinity: follow-ups reach the endpoint that holds the
// response, every time, and no other tenant can name it.
func TestResponsesAffinity(t *testing.T) {
	g, _ := responsesGateway(t, 2)
	_, b := g.call(t, "POST", "/v1/responses", "t1", `{"model":"m","input":"hello"}`)
	var first struct{ ID string }
	if err := json.Unmarshal(b, &first); err != nil || first.ID == "" {
		t.Fatalf("create: %s", b)
	}
	// Each stub knows only its own ids: a follow-up sent elsewhere is the
	// backend's 404.
	for i := 0; i < 8; i++ {
		resp, b := g.call(t, "POST", "/v1/responses", "t1", `{"model":"m","input":"more","previous_response_id":"`+first.ID+`"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("follow-up %d: %d %s", i, resp.StatusCode, b)
		}
	}
	for _, c := range []struct {
		method, path, tenant string
		status               int
	}{
		{"GET", "/v1/responses/" + first.ID, "t1", 200},
		{"GET", "/v1/responses/" + first.ID + "/input_items", "t1", 200},
		{"GET", "/v1/responses/" + first.ID, "t2", 404},
		{"POST", "/v1/responses/" + first.ID + "/cancel", "t2", 404},
		{"DELETE", "/v1/responses/" + first.ID, "t2", 404},
		{"GET", "/v1/responses/resp_unknown", "t1", 404},
		{"PUT", "/v1/responses/" + first.ID, "t1", 405},
		{"DELETE", "/v1/responses/" + first.ID, "t1", 200},
		{"GET", "/v1/responses/" + first.ID, "t1", 404},
	} {
		resp, b := g.call(t, c.method, c.path, c.tenant, "")
		if resp.StatusCode != c.status {
			t.Fatalf("%s %s as %s: %d, want %d: %s", c.method, c.path, c.tenant, resp.StatusCode, c.status, b)
		}
	}
	resp, b := g.call(t, "POST", "/v1/responses", "t2", `{"model":"m","input":"x","previous_response_id":"`+first.ID+`"}`)
	if resp.StatusCode != 404 || errorCode(t, b) != "previous_response_not_found" {
		t.Fatalf("another tenant's previous_response_id: %d %s", resp.StatusCode, b)
	}
}

func TestResponsesWebSocketRefused(t *testing.T) {
	g, _ := responsesGateway(t, 1)
	req, _ := http.NewRequest("GET", g.srv.URL+"/v1/responses", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// RFC 9110 §15.5.22: a 426 names the protocol to use.
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Upgrade") != "HTTP/1.1" {
		t.Fatalf("status %d, Upgrade %q", resp.StatusCode, resp.Header.Get("Upgrade"))
	}
}
