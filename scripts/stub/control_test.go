package stub

import (
	"encoding/json"
	"strconv"
	"testing"
)

// TestControlPrompts: the agents' compaction and summary prompts, as
// Claude Code 2.1 and Codex 0.171 send them (their first words), are
// answered in text on every API, though the request offers tools and the
// prompt names one (Claude Code's lists Bash among the tools not to
// call); the same conversation with a plain user turn is answered with a
// call, so the test sees the difference the prompt makes.
func TestControlPrompts(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	const (
		claudeCompact = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\n- Do NOT use Read, Bash, Grep, Glob, Edit, Write, or ANY other tool.\n\nYour task is to create a detailed summary of the conversation so far"
		codexCompact  = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task."
		codexResume   = "Another language model started to solve this problem and produced a summary of its thinking process. Here is the summary produced by the other language model:\n tok tok"
		plain         = "Use the Bash tool to run `echo stub`."
	)
	reminder := `{"type":"text","text":"<system-reminder>Bash, Read</system-reminder>"}`
	messages := func(text string) string {
		return `{"model":"m","max_tokens":100,"tools":[{"name":"Bash","input_schema":{"type":"object"}}],"messages":[` +
			`{"role":"user","content":"hi"},{"role":"assistant","content":"tok"},{"role":"user","content":[` + reminder + `,{"type":"text","text":` + strconv.Quote(text) + `}]}]}`
	}
	responses := func(text string) string {
		return `{"model":"m","tools":[{"type":"function","name":"exec_command","parameters":{"type":"object"}}],"input":[` +
			`{"type":"message","role":"user","content":[{"type":"input_text","text":` + strconv.Quote(text) + `}]}]}`
	}
	chat := func(text string) string {
		return `{"model":"m","tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":` + strconv.Quote(text) + `}]}`
	}
	for _, tt := range []struct {
		name, path string
		body       func(string) string
		prompts    []string
		// answer is the type of the answer's first block or item, and
		// whether it is a call.
		answer func(t *testing.T, b []byte) (call bool)
	}{
		{"Claude Code's /compact", "/v1/messages", messages, []string{claudeCompact}, func(t *testing.T, b []byte) bool {
			var r struct{ Content []struct{ Type string } }
			if json.Unmarshal(b, &r) != nil || len(r.Content) != 1 {
				t.Fatalf("%s", b)
			}
			return r.Content[0].Type == "tool_use"
		}},
		{"Codex's local compaction", "/v1/responses", responses, []string{codexCompact, codexResume}, func(t *testing.T, b []byte) bool {
			var r struct{ Output []struct{ Type string } }
			if json.Unmarshal(b, &r) != nil || len(r.Output) != 1 {
				t.Fatalf("%s", b)
			}
			return r.Output[0].Type == "function_call"
		}},
		{"a summary asked for on chat", "/v1/chat/completions", chat, []string{codexCompact}, func(t *testing.T, b []byte) bool {
			var r struct {
				Choices []struct {
					FinishReason string `json:"finish_reason"`
				}
			}
			if json.Unmarshal(b, &r) != nil || len(r.Choices) != 1 {
				t.Fatalf("%s", b)
			}
			return r.Choices[0].FinishReason == "tool_calls"
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if status, b := do(t, ts, "POST", tt.path, tt.body(plain)); status != 200 || !tt.answer(t, b) {
				t.Fatalf("a plain turn: %d %s, want a call", status, b)
			}
			for _, p := range tt.prompts {
				if status, b := do(t, ts, "POST", tt.path, tt.body(p)); status != 200 || tt.answer(t, b) {
					t.Errorf("%.40q: %d %s, want text", p, status, b)
				}
			}
		})
	}
}
