package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
)

// fieldsGateway: one pool of kind for model "m" whose endpoint spec is
// tuned by spec, answered by a recording backend (JSON in the
// operation's shape for a request that does not stream); tenant t1
// refuses unknown members when refuse is set, t2 never.
func fieldsGateway(t *testing.T, kind string, spec func(*upstream.TargetSpec), refuse bool) (*testGateway, *recordingBackend) {
	t.Helper()
	b := &recordingBackend{h: func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/messages") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1}}`)
			return
		}
		sseBackend(w, r)
	}}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	g := gatewayOnKind(t, kind, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, RefuseUnknown: refuse}, {ID: "t2", Models: []string{"m"}}})
		ts := upstream.TargetSpec{Kind: kind, URL: srv.URL}
		if spec != nil {
			spec(&ts)
		}
		tg, err := upstream.NewTarget(ts)
		if err != nil {
			t.Fatal(err)
		}
		d.Targets = endpointTargets(d.Router.Pool("m"), []*upstream.Target{tg})
	}, srv.URL)
	return g, b
}

// TestUnknownFieldsDropped: a top-level member that no field table names
// for the operation and the pool's kind never reaches the backend; the
// answer names it in X-Llmgw-Dropped-Fields and the access log in
// dropped_fields, and every known member arrives as sent. Before: every
// member was forwarded byte for byte, so a field the gateway never heard
// of acted on the shared account.
func TestUnknownFieldsDropped(t *testing.T) {
	t.Parallel()
	const chat = `"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		name, kind, path, body string
		kept, dropped          []string
	}{
		{"an unknown member", "openai", "/v1/chat/completions", `{` + chat + `,"x_future":{"a":1},"temperature":0.5}`,
			[]string{"temperature", "messages"}, []string{"x_future"}},
		{"a case variant of a known member", "openai", "/v1/chat/completions", `{` + chat + `,"Temperature":2,"TOOLS":[]}`,
			nil, []string{"Temperature", "TOOLS"}},
		{"an escaped spelling of a known member passes", "openai", "/v1/chat/completions", `{` + chat + `,"temp\u0065rature":1}`,
			[]string{"temperature"}, nil},
		{"chat's store: stored completions are account state", "openai", "/v1/chat/completions", `{` + chat + `,"store":true,"metadata":{"k":"v"}}`,
			[]string{"metadata"}, []string{"store"}},
		{"vLLM's sampling members pass on vLLM", "vllm", "/v1/chat/completions", `{` + chat + `,"top_k":5,"guided_json":{},"chat_template":"{{ evil }}","vllm_xargs":{"a":1}}`,
			[]string{"top_k", "guided_json"}, []string{"chat_template", "vllm_xargs"}},
		{"vLLM's members are dropped elsewhere", "openai", "/v1/chat/completions", `{` + chat + `,"top_k":5,"cache_salt":"of-another"}`,
			nil, []string{"top_k", "cache_salt"}},
		{"completions", "openai", "/v1/completions", `{"model":"m","stream":true,"prompt":"hi","suffix":"x","messages":[]}`,
			[]string{"suffix", "prompt"}, []string{"messages"}},
		{"the Messages API's account members", "anthropic", "/v1/messages",
			`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"context_management":{},"fallbacks":["claude-opus-9"],"thread":{"type":"create"},"billing_policy":{"bill_to":"user_profile"},"inference_geo":"us","diagnostics":{"previous_message_id":"msg_of_another"}}`,
			[]string{"context_management", "max_tokens"}, []string{"fallbacks", "thread", "billing_policy", "inference_geo", "diagnostics"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, b := fieldsGateway(t, c.kind, nil, false)
			resp, out := g.call(t, "POST", c.path, "t2", c.body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			sent := b.last(t)
			for _, k := range c.kept {
				if _, ok := sent[k]; !ok {
					t.Errorf("known member %q not forwarded: %v", k, sent)
				}
			}
			header := resp.Header.Get(HeaderDroppedFields)
			logged, _ := g.lastLog(t)["dropped_fields"].(string)
			for _, k := range c.dropped {
				if _, ok := sent[k]; ok {
					t.Errorf("unknown member %q reached the backend", k)
				}
				if !strings.Contains(header, k) || !strings.Contains(logged, k) {
					t.Errorf("%q not named: header %q, log %q", k, header, logged)
				}
			}
			if len(c.dropped) == 0 && (header != "" || logged != "") {
				t.Errorf("nothing dropped, yet header %q, log %q", header, logged)
			}
		})
	}
}

// TestUnknownFieldsRefused: where the tenant or the pool says
// unknown_fields: refuse, an unknown member is a 400
// unsupported_parameter naming it, in the operation's error shape, and
// no backend is called; the same body without it passes.
func TestUnknownFieldsRefused(t *testing.T) {
	t.Parallel()
	const body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_future":1}`
	for _, c := range []struct {
		name   string
		tenant string
		spec   func(*upstream.TargetSpec)
	}{
		{"by the tenant", "t1", nil},
		{"by the pool", "t2", func(s *upstream.TargetSpec) { s.RefuseUnknown = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, b := fieldsGateway(t, "openai", c.spec, true)
			resp, out := g.call(t, "POST", "/v1/chat/completions", c.tenant, body)
			if resp.StatusCode != 400 || errorCode(t, out) != "unsupported_parameter" || !strings.Contains(string(out), `"param":"x_future"`) {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			if hits := b.calls(); hits != 0 {
				t.Fatalf("the backend was called %d times", hits)
			}
			if resp, out := g.call(t, "POST", "/v1/chat/completions", c.tenant, strings.Replace(body, `,"x_future":1`, "", 1)); resp.StatusCode != 200 {
				t.Fatalf("control: %d %s", resp.StatusCode, out)
			}
		})
	}
}

// TestOperatorFields: a member the operator names for a pool
// (pools[].fields) is forwarded there as sent.
func TestOperatorFields(t *testing.T) {
	t.Parallel()
	g, b := fieldsGateway(t, "openai", func(s *upstream.TargetSpec) { s.Fields = []string{"x_backend_flag"} }, true)
	resp, out := g.call(t, "POST", "/v1/chat/completions", "t1", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"x_backend_flag":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if v, ok := b.last(t)["x_backend_flag"]; !ok || v != true {
		t.Fatalf("operator field not forwarded: %v", b.last(t))
	}
}

// TestDroppedFieldNamesBounded: the names a caller chooses are echoed
// bounded: at most a few, each clipped, never a header-breaking byte.
func TestDroppedFieldNamesBounded(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	sb.WriteString(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]`)
	for i := range 40 {
		fmt.Fprintf(&sb, `,"x_%d_%s":1`, i, strings.Repeat("k", 500))
	}
	sb.WriteString(`,"caf\u00e9\r\n,":1}`)
	g, b := fieldsGateway(t, "openai", nil, false)
	resp, out := g.call(t, "POST", "/v1/chat/completions", "t2", sb.String())
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	for k := range b.last(t) {
		if strings.HasPrefix(k, "x_") || strings.HasPrefix(k, "caf") {
			t.Fatalf("%q forwarded", k)
		}
	}
	h := resp.Header.Get(HeaderDroppedFields)
	if len(h) > maxEcho+len(truncatedMark) || strings.ContainsAny(h, "\r\n") {
		t.Fatalf("header of %d bytes: %q", len(h), h)
	}
}

// TestServerToolMemberRefusedEndToEnd: inside a server tool the tenant
// may use, a member its row does not name is refused 400
// unsupported_parameter naming it, and no backend is called (dropping it
// could widen the tool: most of its members restrict it); the same tool
// without it is served.
func TestServerToolMemberRefusedEndToEnd(t *testing.T) {
	t.Parallel()
	g, b := recordedGateway(t, "openai", map[string]tenant.Grant{"mcp": {}})
	const body = `{"model":"m","stream":true,"input":"hi","tools":[{"type":"mcp","server_label":"s","server_url":"https://mcp.example","require_approval":"never"%s}]}`
	resp, out := g.call(t, "POST", "/v1/responses", "t1", fmt.Sprintf(body, `,"tunnel_id":"tun_of_another"`))
	if resp.StatusCode != 400 || errorCode(t, out) != "unsupported_parameter" || !strings.Contains(string(out), `"param":"tools[0].tunnel_id"`) {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if hits := b.calls(); hits != 0 {
		t.Fatalf("the backend was called %d times", hits)
	}
	if resp, out := g.call(t, "POST", "/v1/responses", "t1", fmt.Sprintf(body, "")); resp.StatusCode != 200 {
		t.Fatalf("control: %d %s", resp.StatusCode, out)
	}
}
