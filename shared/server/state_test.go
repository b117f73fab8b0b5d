package server

// The backend account's state is owned or refused. A record never changes
// tenant (a lying backend, a client-chosen request_id), and a body that
// names stored state without carrying it never reaches a backend.

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/stores/redisaffinity"
	"github.com/llmgw/gateway/shared/tenant"
)

// lyingBackend answers every Responses call with one fixed response id,
// whoever asks: a backend that echoes, caches or lies.
type lyingBackend struct{ calls atomic.Int64 }

func (b *lyingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.calls.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"resp_fixed","object":"response","output":[],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}`)
}

// TestOwnershipTakeoverRedis: tenant t1 creates resp_fixed; the backend
// then answers tenant t2 with the same id. On the Redis store t2's answer
// is relayed marked unrecorded and the id stays t1's: t2's GET is 404
// without a backend call, t1's is 200. (Before: the plain SET handed the
// record to t2, whose GET was answered, and t1 got 404.)
func TestOwnershipTakeoverRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b := &lyingBackend{}
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}, {ID: "t2", Models: []string{"m"}}})
		d.Affinity = redisaffinity.New(c, "takeover:", nil)
	}, b)
	if resp, body := g.call(t, "POST", "/v1/responses", "t1", `{"model":"m","input":"hi"}`); resp.StatusCode != 200 || resp.Header.Get(HeaderUnrecorded) != "" {
		t.Fatalf("t1's create: %d %s (unrecorded %q)", resp.StatusCode, body, resp.Header.Get(HeaderUnrecorded))
	}
	resp, _ := g.call(t, "POST", "/v1/responses", "t2", `{"model":"m","input":"hi"}`)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderUnrecorded) != "resp_fixed" {
		t.Fatalf("t2's create answered with t1's id: %d, %s %q, want 200 marked unrecorded", resp.StatusCode, HeaderUnrecorded, resp.Header.Get(HeaderUnrecorded))
	}
	if !strings.Contains(g.lastLog(t)["error"].(string), "response_id_taken") {
		t.Fatalf("the access log does not say the id was taken: %v", g.lastLog(t))
	}
	before := b.calls.Load()
	if resp, body := g.call(t, "GET", "/v1/responses/resp_fixed", "t2", ""); resp.StatusCode != 404 || b.calls.Load() != before {
		t.Fatalf("t2 read t1's response: %d %s (backend calls %d → %d)", resp.StatusCode, body, before, b.calls.Load())
	}
	if resp, body := g.call(t, "DELETE", "/v1/responses/resp_fixed", "t2", ""); resp.StatusCode != 404 || b.calls.Load() != before {
		t.Fatalf("t2 deleted t1's response: %d %s", resp.StatusCode, body)
	}
	if resp, body := g.call(t, "GET", "/v1/responses/resp_fixed", "t1", ""); resp.StatusCode != 200 {
		t.Fatalf("the owner lost its response: %d %s", resp.StatusCode, body)
	}
}

// TestVLLMRequestIDRefused: on a vLLM pool, request_id names the id vLLM
// stores the response under, so tenant t2 naming t1's response id would
// overwrite it in the backend. It is refused, 400 with param request_id,
// on every operation, before any backend call. (Before: forwarded.)
func TestVLLMRequestIDRefused(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","output":[]}`)
	}))
	t.Cleanup(backend.Close)
	g := gatewayOnKind(t, "vllm", func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}, {ID: "t2", Models: []string{"m"}}})
	}, backend.URL)
	for _, c := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"m","input":"hi","request_id":"resp_of_t1"}`},
		{"/v1/responses", `{"model":"m","input":"hi","request_\u0069d":"resp_of_t1"}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"request_id":"chatcmpl-of-t1"}`},
	} {
		resp, body := g.call(t, "POST", c.path, "t2", c.body)
		if resp.StatusCode != 400 || errorCode(t, body) != "stored_state_not_supported" || !strings.Contains(string(body), `"param":"request_id"`) {
			t.Errorf("%s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the backend was called %d times", n)
	}
}

// TestStoredItemShapes: the item shapes of request.TestStoredState that
// name stored state are refused through the server, 400 with the item's
// param and no backend call; a history replayed with its content passes.
func TestStoredItemShapes(t *testing.T) {
	t.Parallel()
	b := &responsesBackend{}
	g := ownershipGateway(t, b, nil)
	for _, c := range []struct{ body, param string }{
		{`{"model":"m","input":[{"id":"msg_of_another_tenant"}]}`, "input[0]"},
		{`{"model":"m","input":[{"type":null,"id":"msg_1"}]}`, "input[0]"},
		{`{"model":"m","input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[]}]}`, "input[1]"},
		{`{"model":"m","prompt":{"id":"pmpt_of_another_tenant"},"input":"hi"}`, "prompt.id"},
	} {
		resp, body := g.call(t, "POST", "/v1/responses", "t2", c.body)
		if resp.StatusCode != 400 || errorCode(t, body) != "stored_state_not_supported" || !strings.Contains(string(body), `"param":"`+c.param+`"`) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, body)
		}
	}
	if n := b.count(); n != 0 {
		t.Fatalf("the backend was called %d times", n)
	}
	history := `{"model":"m","input":[{"role":"user","content":"hi"},` +
		`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"},` +
		`{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello","annotations":[]}]},` +
		`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"42"}]}`
	if resp, body := g.call(t, "POST", "/v1/responses", "t2", history); resp.StatusCode != 200 || b.count() != 1 {
		t.Fatalf("a replayed history: %d %s", resp.StatusCode, body)
	}
}
