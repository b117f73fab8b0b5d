package request

import "testing"

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
