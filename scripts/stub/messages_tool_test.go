package stub

import (
	"encoding/json"
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
		{"a name inside a longer one is no mention", claudeTools, `{"role":"user","content":[` + reminder + `,{"type":"text","text":"Make a TaskCreated event"}]}`, "Agent"},
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
