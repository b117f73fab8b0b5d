package request

import (
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"
)

// TestStateRules: every operation has its stored-state row, so a new
// operation cannot start without one.
func TestStateRules(t *testing.T) {
	for _, op := range Operations() {
		if operations[op].state&stateDeclared == 0 {
			t.Errorf("%s has no stored-state row", op)
		}
	}
}

// TestStoredState is the table of item shapes from the OpenAI and
// Anthropic API references: which name backend state without
// carrying it (refused, with the param) and which carry themselves (the
// Agents SDK's replayed history, Anthropic's content blocks). Before, only
// an explicit "type":"item_reference" was refused: every other refused row
// here reached the backend.
func TestStoredState(t *testing.T) {
	tests := []struct {
		name  string
		op    Operation
		body  string
		param string // "" = passes
	}{
		// Responses input items: references.
		{"item_reference", Responses, `{"input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0]"},
		{"item_reference escaped", Responses, `{"input":[{"type":"item_refer\u0065nce","id":"msg_1"}]}`, "input[0]"},
		{"id only (ItemReference, type optional)", Responses, `{"input":[{"id":"msg_1"}]}`, "input[0]"},
		{"id, type null", Responses, `{"input":[{"type":null,"id":"msg_1"}]}`, "input[0]"},
		{"id, escaped key", Responses, `{"input":[{"\u0069d":"msg_1"}]}`, "input[0]"},
		{"message by id", Responses, `{"input":[{"type":"message","id":"msg_1","role":"assistant"}]}`, "input[0]"},
		{"message by id, content null", Responses, `{"input":[{"type":"message","id":"msg_1","role":"assistant","content":null}]}`, "input[0]"},
		{"reasoning without encrypted_content", Responses, `{"input":[{"type":"reasoning","id":"rs_1","summary":[]}]}`, "input[0]"},
		{"compaction by id", Responses, `{"input":[{"type":"compaction","id":"cmp_1"}]}`, "input[0]"},
		{"compaction by id, with another member", Responses, `{"input":[{"type":"compaction","id":"cmp_1","created_by":"x"}]}`, "input[0]"},
		{"compaction by id, compacting", ResponsesCompact, `{"input":[{"role":"user","content":"hi"},{"type":"compaction","id":"cmp_1"}]}`, "input[1]"},
		{"reasoning with summary text only", Responses, `{"input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"x"}]}]}`, "input[0]"},
		{"function_call by id", Responses, `{"input":[{"type":"function_call","id":"fc_1","call_id":"c","name":"f"}]}`, "input[0]"},
		{"unknown type, id and status only", Responses, `{"input":[{"type":"shell_call","id":"sh_1","status":"completed"}]}`, "input[0]"},
		// Items outside the old type table, or carried by an empty value:
		// each passed by its id before.
		{"file_search_call without results", Responses, `{"input":[{"type":"file_search_call","id":"fs_1","status":"completed","queries":["q"]}]}`, "input[0]"},
		{"file_search_call, results empty", Responses, `{"input":[{"type":"file_search_call","id":"fs_1","status":"completed","queries":["q"],"results":[]}]}`, "input[0]"},
		{"mcp_call without output", Responses, `{"input":[{"type":"mcp_call","id":"mcp_1","server_label":"s","name":"f","arguments":"{}"}]}`, "input[0]"},
		{"code_interpreter_call with a container_id", Responses, `{"input":[{"type":"code_interpreter_call","id":"ci_1","status":"completed","container_id":"cntr_of_another"}]}`, "input[0]"},
		{"reasoning, encrypted_content empty", Responses, `{"input":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":""}]}`, "input[0]"},
		{"message, content {}", Responses, `{"input":[{"type":"message","id":"msg_1","role":"assistant","content":{}}]}`, "input[0]"},
		{"content twice, empty last", Responses, `{"input":[{"type":"message","id":"msg_1","role":"user","content":"hi","content":""}]}`, "input[0]"},
		{"type outside the table", Responses, `{"input":[{"type":"future_call","id":"fc_1","result":"x"}]}`, "input[0]"},
		{"compaction_trigger by id", Responses, `{"input":[{"type":"compaction_trigger","id":"ct_1"}]}`, "input[0]"},
		{"type outside the table, third item", Responses, `{"input":[{"role":"user","content":"hi"},{"role":"user","content":"hi"},{"type":"mcp_list_tools","id":"ml_1","server_label":"s"}]}`, "input[2]"},
		{"second item", Responses, `{"input":[{"role":"user","content":"hi"},{"id":"msg_1"}]}`, "input[1]"},
		{"stored prompt", Responses, `{"prompt":{"id":"pmpt_1","version":"2"}}`, "prompt.id"},
		{"stored prompt, escaped key", Responses, `{"pr\u006fmpt":{"id":"pmpt_1"}}`, "prompt.id"},
		{"vLLM request_id on responses", Responses, `{"input":"hi","request_id":"resp_of_another"}`, "request_id"},
		{"vLLM request_id on chat", ChatCompletions, `{"messages":[],"request_id":"x"}`, "request_id"},
		{"request_id twice, null first", Responses, `{"request_id":null,"request_id":"resp_1"}`, "request_id"},

		{"type twice, reference first", Responses, `{"input":[{"type":"item_reference","type":"message","id":"msg_1","role":"user","content":"hi"}]}`, "input[0]"},
		{"id twice, null last", Responses, `{"input":[{"id":"msg_1","id":null,"role":"user","content":"hi","content":null}]}`, "input[0]"},
		{"content twice, null last", Responses, `{"input":[{"type":"message","id":"msg_1","role":"user","content":"hi","content":null}]}`, "input[0]"},

		// Responses input items: carried, as the Agents SDK replays them.
		{"easy message", Responses, `{"input":[{"role":"user","content":"hi"}]}`, ""},
		{"message with id and content", Responses, `{"input":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hi","annotations":[]}]}]}`, ""},
		{"reasoning with encrypted_content", Responses, `{"input":[{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}]}`, ""},
		{"compaction with encrypted_content", Responses, `{"input":[{"type":"compaction","id":"cmp_1","encrypted_content":"gAAA"},{"type":"compaction_trigger"}]}`, ""},
		{"function_call with arguments", Responses, `{"input":[{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"}]}`, ""},
		{"function_call_output", Responses, `{"input":[{"type":"function_call_output","call_id":"c","output":"42"}]}`, ""},
		{"computer_call_output with id", Responses, `{"input":[{"type":"computer_call_output","id":"cuo_1","call_id":"c","output":{"type":"computer_screenshot","image_url":"data:,"}}]}`, ""},
		{"web_search_call with action", Responses, `{"input":[{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}}]}`, ""},
		{"unknown type with a payload", Responses, `{"input":[{"type":"shell_call","id":"sh_1","action":{"commands":["ls"]}}]}`, ""},
		{"file_search_call with results", Responses, `{"input":[{"type":"file_search_call","id":"fs_1","status":"completed","queries":["q"],"results":[{"file_id":"f","text":"t"}]}]}`, ""},
		{"mcp_call with output", Responses, `{"input":[{"type":"mcp_call","id":"mcp_1","server_label":"s","name":"f","arguments":"{}","output":"42"}]}`, ""},
		{"mcp_call with error", Responses, `{"input":[{"type":"mcp_call","id":"mcp_1","server_label":"s","name":"f","arguments":"{}","error":"boom"}]}`, ""},
		{"code_interpreter_call with code and outputs", Responses, `{"input":[{"type":"code_interpreter_call","id":"ci_1","status":"completed","container_id":"cntr_1","code":"1+1","outputs":[{"type":"logs","logs":"2"}]}]}`, ""},
		{"computer_call with actions", Responses, `{"input":[{"type":"computer_call","id":"cu_1","call_id":"c","status":"completed","pending_safety_checks":[],"actions":[{"type":"screenshot"}]}]}`, ""},
		{"type outside the table, no id", Responses, `{"input":[{"type":"compaction_trigger"}]}`, ""},
		{"string input", Responses, `{"input":"msg_1"}`, ""},
		{"prompt null", Responses, `{"input":"hi","prompt":null}`, ""},
		{"request_id null", Responses, `{"input":"hi","request_id":null}`, ""},
		{"id inside content is not an item", Responses, `{"input":[{"role":"user","content":[{"type":"input_text","text":"hi","id":"x"}]}]}`, ""},
		{"legacy completions prompt", Completions, `{"prompt":{"id":"not a template"}}`, ""},

		// Anthropic's Messages API: content blocks carry themselves.
		{"tool_use", Messages, `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]}]}`, ""},
		{"server_tool_use", Messages, `{"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}}]}]}`, ""},
		{"thinking with signature", Messages, `{"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]}]}`, ""},
		{"redacted_thinking", Messages, `{"messages":[{"role":"assistant","content":[{"type":"redacted_thinking","data":"d"}]}]}`, ""},
		{"tool_result", Messages, `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"}]}]}`, ""},
		{"messages request_id", Messages, `{"messages":[],"request_id":"x"}`, "request_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseBody([]byte(tt.body)); err != nil && err != ErrMissingModel {
				t.Fatalf("not a body the parser takes: %v", err)
			}
			got := StoredState([]byte(tt.body), tt.op)
			switch {
			case tt.param == "" && got != nil:
				t.Fatalf("refused (%s: %s), want it to pass", got.Param, got.Message)
			case tt.param != "" && got == nil:
				t.Fatalf("passed, want it refused with param %s", tt.param)
			case got != nil && (got.Param != tt.param || got.Message == ""):
				t.Fatalf("param %q message %q, want param %q", got.Param, got.Message, tt.param)
			}
		})
	}
}

func BenchmarkStoredState(b *testing.B) {
	body := []byte(`{"model":"m","input":[{"role":"user","content":"hi"},{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"hi"}]},{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}]}`)
	b.ReportAllocs()
	for range b.N {
		if StoredState(body, Responses) != nil {
			b.Fatal("refused")
		}
	}
}

// TestItemContentMatchesSDK checks the stored-state allow-list against
// its source, the openai-go SDK's input item union: every variant's type
// has a row (a new item type fails here until the row says how it is
// carried), every member a row names is a field of that variant, and
// every member the SDK requires is in the row or only names or describes
// the item (its ids, name, status; a reasoning item's summary, which is
// not what the model reads back).
func TestItemContentMatchesSDK(t *testing.T) {
	// The variants whose type is not an SDK constant: their type as the
	// API reference spells it.
	typeOf := map[string]string{"OfMessage": "message", "OfInputMessage": "message", "OfComputerCall": "computer_call", "OfItemReference": "item_reference"}
	describes := map[string]bool{"id": true, "type": true, "status": true, "role": true, "call_id": true, "name": true,
		"server_label": true, "pending_safety_checks": true, "container_id": true, "approval_request_id": true, "summary": true, "fingerprint": true}
	union := reflect.TypeFor[responses.ResponseInputItemUnionParam]()
	seen := map[string]bool{"": true} // the row of an item without a type
	for i := range union.NumField() {
		variant := union.Field(i)
		if !strings.HasPrefix(variant.Name, "Of") {
			continue
		}
		st := variant.Type.Elem()
		fields, required := map[string]bool{}, []string{}
		typ := typeOf[variant.Name]
		for j := range st.NumField() {
			f := st.Field(j)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = true
			if f.Tag.Get("api") == "required" {
				required = append(required, name)
			}
			if d := f.Tag.Get("default"); name == "type" && d != "" {
				typ = d
			}
		}
		if typ == "" {
			t.Errorf("%s: the SDK gives no type constant; add its type to typeOf", variant.Name)
			continue
		}
		seen[typ] = true
		members, ok := itemContent[typ]
		if !ok {
			t.Errorf("input item type %q (%s) has no itemContent row: say which members carry it", typ, st.Name())
			continue
		}
		listed := map[string]bool{}
		for _, m := range members {
			for alt := range strings.SplitSeq(m, "|") {
				listed[alt] = true
				if !fields[alt] {
					t.Errorf("%q: %q is not a member of %s", typ, alt, st.Name())
				}
			}
		}
		for _, r := range required {
			if !listed[r] && !describes[r] && len(members) > 0 {
				t.Errorf("%q: the SDK requires %q, which the row neither lists nor counts as describing the item", typ, r)
			}
		}
	}
	for typ := range itemContent {
		if !seen[typ] {
			t.Errorf("itemContent row %q is no input item type of the SDK", typ)
		}
	}
}
