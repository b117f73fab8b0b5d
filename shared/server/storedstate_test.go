package server

import (
	"strings"
	"testing"
)

// TestStoredItemsByAllowList: an input item with an id passes only when
// its type is in the gateway's table and it carries that type's content;
// any other item naming an id is refused 400 stored_state_not_supported,
// param input[N], before any backend call. (Before: a file_search_call
// without results, an mcp_call without output, a code_interpreter_call
// with only its container_id and a reasoning item with an empty
// encrypted_content were forwarded, for the backend to fill from the
// account every tenant shares.) Each control, the same item with its
// content, is forwarded as sent.
func TestStoredItemsByAllowList(t *testing.T) {
	t.Parallel()
	const hi = `{"role":"user","content":"hi"}`
	for _, c := range []struct{ name, refused, carried string }{
		{"file_search_call without results",
			`{"type":"file_search_call","id":"fs_of_another","status":"completed","queries":["salaries"]}`,
			`{"type":"file_search_call","id":"fs_1","status":"completed","queries":["salaries"],"results":[{"filename":"a.txt","text":"t"}]}`},
		{"mcp_call without output",
			`{"type":"mcp_call","id":"mcp_of_another","server_label":"crm","name":"lookup","arguments":"{}"}`,
			`{"type":"mcp_call","id":"mcp_1","server_label":"crm","name":"lookup","arguments":"{}","output":"42"}`},
		{"code_interpreter_call with a container_id",
			`{"type":"code_interpreter_call","id":"ci_of_another","status":"completed","container_id":"cntr_of_another"}`,
			`{"type":"code_interpreter_call","id":"ci_1","status":"completed","container_id":"cntr_1","code":"print(2)","outputs":[{"type":"logs","logs":"2"}]}`},
		{"reasoning with an empty encrypted_content",
			`{"type":"reasoning","id":"rs_of_another","summary":[],"encrypted_content":""}`,
			`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA"}`},
		{"a type outside the table",
			`{"type":"future_call","id":"fc_of_another","status":"completed","result":"x"}`,
			`{"type":"future_call","status":"completed","result":"x"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := &responsesBackend{}
			g := ownershipGateway(t, b, nil)
			resp, body := g.call(t, "POST", "/v1/responses", "t2", `{"model":"m","input":[`+hi+`,`+hi+`,`+c.refused+`]}`)
			if resp.StatusCode != 400 || errorCode(t, body) != "stored_state_not_supported" || !strings.Contains(string(body), `"param":"input[2]"`) {
				t.Fatalf("%d %s, want 400 stored_state_not_supported naming input[2]", resp.StatusCode, body)
			}
			if b.count() != 0 {
				t.Fatalf("forwarded: %v", b.calls)
			}
			sent := `{"model":"m","input":[` + hi + `,` + c.carried + `]}`
			if resp, body := g.call(t, "POST", "/v1/responses", "t2", sent); resp.StatusCode != 200 {
				t.Fatalf("the item with its content: %d %s", resp.StatusCode, body)
			}
			if b.count() != 1 || !strings.HasSuffix(b.calls[0], sent) {
				t.Fatalf("the item with its content was not forwarded as sent: %v", b.calls)
			}
		})
	}
}
