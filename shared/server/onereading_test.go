package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/tenant"
)

// TestOneReadingOfBilledFields: a field the gateway bills or recognises a
// tool by is read once, wherever it reads it: sent twice (or first in an
// escaped spelling) it is refused 400 invalid_request_error
// duplicate_parameter, param naming it, as a duplicate model is, before
// any backend call. (Before: "max_uses":1000,"max_uses":1 reserved one
// use and was forwarded with both keys, for the backend's parser to pick
// either; max_tool_calls the same; a second tool type was refused as
// unsupported_tool, not as the duplicate it is.) The control, the same
// body without the duplicate, is forwarded as sent.
func TestOneReadingOfBilledFields(t *testing.T) {
	t.Parallel()
	const (
		search = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search",%s}]}`
		tools  = `{"model":"m","input":"hi",%s,"tools":[{"type":"web_search"}]}`
	)
	for _, c := range []struct {
		name, api, dup, once, param string
	}{
		{"max_uses twice", "messages", `"max_uses":1000,"max_uses":1`, `"max_uses":1`, "tools[0].max_uses"},
		{"max_uses escaped first", "messages", `"max_\u0075ses":1000,"max_uses":1`, `"max_uses":1`, "tools[0].max_uses"},
		{"max_tool_calls twice", "responses", `"max_tool_calls":1000,"max_tool_calls":1`, `"max_tool_calls":1`, "max_tool_calls"},
		{"max_tool_calls escaped first", "responses", `"max_tool_c\u0061lls":1000,"max_tool_calls":1`, `"max_tool_calls":1`, "max_tool_calls"},
		// Held before this change too; here so a scan that stops reading
		// them once fails.
		{"service_tier twice", "responses", `"service_tier":"default","service_tier":"priority"`, `"service_tier":"default"`, "service_tier"},
		{"max_output_tokens escaped first", "responses", `"max_output_t\u006fkens":100000,"max_output_tokens":16`, `"max_output_tokens":16`, "max_output_tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var g *testGateway
			var calls func() (int, string)
			path, format := "/v1/responses", tools
			if c.api == "messages" {
				rb := &recordingBackend{h: (&messagesBackend{}).ServeHTTP}
				g, _ = featuresGateway(t, rb, "anthropic")
				calls = func() (int, string) {
					rb.mu.Lock()
					defer rb.mu.Unlock()
					return rb.hits, string(rb.body)
				}
				path, format = "/v1/messages", search
			} else {
				rb := &responsesBackend{}
				g = searchGateway(t, rb)
				calls = func() (int, string) {
					rb.mu.Lock()
					defer rb.mu.Unlock()
					if len(rb.calls) == 0 {
						return 0, ""
					}
					return len(rb.calls), rb.calls[len(rb.calls)-1]
				}
			}
			resp, body := oneReadingCall(t, g, path, strings.Replace(format, "%s", c.dup, 1))
			// Anthropic's error JSON has neither code nor param: its
			// message names the param.
			named := `"param":"` + c.param + `"`
			if c.api == "messages" {
				named = `'` + c.param + `' appears more than once`
			}
			if resp.StatusCode != 400 || !strings.Contains(string(body), `"type":"invalid_request_error"`) || !strings.Contains(string(body), named) ||
				c.api != "messages" && errorCode(t, body) != "duplicate_parameter" {
				t.Fatalf("%d %s, want 400 duplicate_parameter naming %s", resp.StatusCode, body, c.param)
			}
			if n, sent := calls(); n != 0 {
				t.Fatalf("forwarded: %s", sent)
			}
			once := strings.Replace(format, "%s", c.once, 1)
			if resp, body := oneReadingCall(t, g, path, once); resp.StatusCode != 200 {
				t.Fatalf("read once: %d %s", resp.StatusCode, body)
			}
			if n, sent := calls(); n != 1 || !strings.Contains(sent, c.once) {
				t.Fatalf("read once: %d calls, forwarded %s", n, sent)
			}
		})
	}
}

// TestOneReadingOfToolType: a tool's type sent twice is refused as the
// duplicate it is (400 duplicate_parameter, param tools[0].type), not as a
// tool the gateway does not know; the tool with one type passes.
func TestOneReadingOfToolType(t *testing.T) {
	t.Parallel()
	b := &responsesBackend{}
	g := searchGateway(t, b)
	resp, body := oneReadingCall(t, g, "/v1/responses", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","typ\u0065":"web_search"}]}`)
	if resp.StatusCode != 400 || errorCode(t, body) != "duplicate_parameter" || !strings.Contains(string(body), `"param":"tools[0].type"`) {
		t.Fatalf("%d %s, want 400 duplicate_parameter naming tools[0].type", resp.StatusCode, body)
	}
	if b.count() != 0 {
		t.Fatalf("forwarded: %v", b.calls)
	}
	if resp, body := oneReadingCall(t, g, "/v1/responses", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}]}`); resp.StatusCode != 200 || b.count() != 1 {
		t.Fatalf("one type: %d %s", resp.StatusCode, body)
	}
}

// searchGateway: an OpenAI pool for model "m" whose tenant t1 may use web
// search, priced at 100 tokens a use.
func searchGateway(t *testing.T, b *responsesBackend) *testGateway {
	t.Helper()
	return newTestGatewayWith(t, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {CostPerUse: 100, DefaultUses: 3}}}})
	}, b)
}

// oneReadingCall sends body to path as tenant t1 (with the Messages API's
// version header, which other paths ignore).
func oneReadingCall(t *testing.T, g *testGateway, path, body string) (*http.Response, []byte) {
	t.Helper()
	if path == "/v1/messages" {
		return messagesCall(t, g, "t1", body, "")
	}
	return g.call(t, "POST", path, "t1", body)
}
