package stub

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestToolToCall: the tool a Messages answer calls, for plain requests and
// for Claude Code's, whose last user message names its tools in system
// reminders before the user's words and whose tool list ends with a
// deferred placeholder.
func TestToolToCall(t *testing.T) {
	t.Parallel()
	claudeTools := `[{"name":"Agent","input_schema":{"required":["description","prompt"]}},{"name":"Bash","input_schema":{"required":["command"]}},{"name":"TaskCreate","input_schema":{}},{"name":"DeferredToolPlaceholder","defer_loading":true,"input_schema":{}}]`
	reminder := `{"type":"text","text":"<system-reminder>Available agent types for the Agent tool; TaskCreate, Bash</system-reminder>"}`
	for _, tt := range []struct {
		name, tools, last, want string
	}{
		{"no tools", `[]`, `{"role":"user","content":"Use Bash"}`, ""},
		{"first tool by default", `[{"name":"f"},{"name":"g"}]`, `{"role":"user","content":"Weather?"}`, "f"},
		{"named in a string", `[{"name":"f"},{"name":"g"}]`, `{"role":"user","content":"call g, please"}`, "g"},
		{"tool_result answered in text", `[{"name":"f"}]`, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"f"}]}`, ""},
		{"the user's words after the reminders", claudeTools, `{"role":"user","content":[` + reminder + `,{"type":"text","text":"Use the Bash tool to run echo"}]}`, "Bash"},
		{"a name inside a longer one is no mention", claudeTools, `{"role":"user","content":[` + reminder + `,{"type":"text","text":"Make a TaskCreated event"}]}`, "Bash"},
		// The fallback once called Agent, whose subagents
		// called Agent again (about 270 requests in 180 s).
		{"an agent tool is never the default", claudeTools, `{"role":"user","content":"Say hello."}`, "Bash"},
		{"reminders after the user's words", claudeTools, `{"role":"user","content":[{"type":"text","text":"Use the Bash tool"},` + reminder + `]}`, "Bash"},
		{"a task notification (reminders only) is answered in text", claudeTools, `{"role":"user","content":[` + reminder + `]}`, ""},
		{"an agent tool named is called", claudeTools, `{"role":"user","content":"Use the Agent tool to look around."}`, "Agent"},
		{"a subagent's conversation is answered in text", claudeTools, `{"role":"user","content":[` + reminder + `,{"type":"text","text":"stub"}]}`, ""},
		// Claude Code 2.1 sends its environment and agent list as role
		// "system" messages after the user's words and after a tool's
		// result: read as the user's, they named Agent, which the stub
		// then called.
		{"system messages after the user's words", claudeTools, `{"role":"user","content":[` + reminder + `,{"type":"text","text":"Use the TaskCreate tool"}]},{"role":"system","content":[{"type":"text","text":"Available agent types for the Agent tool"}]}`, "TaskCreate"},
		{"a system message after a tool's result", claudeTools, `{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"stub"}]},{"role":"system","content":"Available agent types for the Agent tool"}`, ""},
		{"structured output is text", `[{"name":"f"}]`, `{"role":"user","content":"Weather?"}],"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}},"x":[0`, ""},
		{"deferred tools are never the default", `[{"name":"d","defer_loading":true},{"name":"f"}]`, `{"role":"user","content":"hi"}`, "f"},
		{"only deferred tools: text", `[{"name":"d","defer_loading":true}]`, `{"role":"user","content":"hi"}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var req messagesRequest
			if err := json.Unmarshal([]byte(`{"model":"m","max_tokens":9,"tools":`+tt.tools+`,"messages":[`+tt.last+`]}`), &req); err != nil {
				t.Fatal(err)
			}
			got := ""
			if tool := toolToCall(req); tool != nil {
				got = tool.Name
			}
			if got != tt.want {
				t.Errorf("toolToCall = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMessagesAgentAnswers: Claude Code's Edit is called with a real
// change (old_string and new_string differ; Claude Code refuses an edit
// that changes nothing), and structured output (output_config.format or
// the beta's output_format, a json_schema) is answered with JSON that
// satisfies the schema.
func TestMessagesAgentAnswers(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	edit := `{"model":"m","max_tokens":100,"tools":[{"name":"Edit","input_schema":{"type":"object","properties":{"file_path":{"type":"string"},"old_string":{"type":"string"},"new_string":{"type":"string"}},"required":["file_path","old_string","new_string"]}}],"messages":[{"role":"user","content":"Use the Edit tool."}]}`
	status, b := do(t, ts, "POST", "/v1/messages", edit)
	var res struct {
		Content []struct {
			Type  string
			Text  string
			Input map[string]string
		}
	}
	if err := json.Unmarshal(b, &res); status != 200 || err != nil || len(res.Content) != 1 || res.Content[0].Type != "tool_use" {
		t.Fatalf("%d %s", status, b)
	}
	if in := res.Content[0].Input; in["old_string"] == in["new_string"] || in["new_string"] != StubEditText {
		t.Fatalf("Edit input %v changes nothing", in)
	}
	for _, format := range []string{`"output_config":{"format":{"type":"json_schema","schema":%s}}`, `"output_format":{"type":"json_schema","schema":%s}`} {
		schema := `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":2}},"required":["city","days"]}`
		body := `{"model":"m","max_tokens":100,` + fmt.Sprintf(format, schema) + `,"messages":[{"role":"user","content":"Paris, three days"}]}`
		status, b := do(t, ts, "POST", "/v1/messages", body)
		res.Content = nil
		if err := json.Unmarshal(b, &res); status != 200 || err != nil || len(res.Content) != 1 || res.Content[0].Type != "text" {
			t.Fatalf("%d %s", status, b)
		}
		var v struct {
			City string
			Days int
		}
		if err := json.Unmarshal([]byte(res.Content[0].Text), &v); err != nil || v.City == "" || v.Days < 2 {
			t.Fatalf("structured output %q: %v", res.Content[0].Text, err)
		}
	}
}
