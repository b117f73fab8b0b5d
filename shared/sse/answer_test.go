package sse

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAnswerScanner(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 100<<10)
	tests := []struct {
		name   string
		in     string
		want   Usage
		ok     bool
		id     string
		object string
	}{
		{"chat answer", `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`, Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7}, true, "chatcmpl-1", "chat.completion"},
		{"responses object with an echoed schema before usage", `{"id":"resp_1","object":"response","tools":[{"type":"function","parameters":{"usage":{"input_tokens":0,"output_tokens":0}}}],"output":[{"content":[{"text":"` + big + `"}]}],"usage":{"input_tokens":4000,"output_tokens":5017,"total_tokens":9017}}`, Usage{PromptTokens: 4000, CompletionTokens: 5017, TotalTokens: 9017, Calls: ToolCalls{Counted: true}}, true, "resp_1", "response"},
		{"responses object with hosted tool calls", hostedCallsAnswer, Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12, Calls: hostedCalls}, true, "resp_2", "response"},
		{"no usage", `{"id":"x","data":[{"usage":{"prompt_tokens":1}}]}`, Usage{}, false, "x", ""},
		{"usage null last", `{"usage":{"prompt_tokens":1},"usage":null}`, Usage{}, false, "", ""},
		{"scalars around", ` { "object" : "response" , "id" : "r" , "n" : 12 , "usage" : { "prompt_tokens" : 3 } } `, Usage{PromptTokens: 3}, true, "r", "response"},
		{"not an object", `[{"usage":{"prompt_tokens":1}}]`, Usage{}, false, "", ""},
		{"escaped id is not read", `{"id":"r\u0031"}`, Usage{}, false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, step := range []int{1, 7, 4096, len(tt.in)} {
				var s AnswerScanner
				for i := 0; i < len(tt.in); i += step {
					s.Write([]byte(tt.in[i:min(i+step, len(tt.in))]))
				}
				u, ok := s.Usage()
				id, obj := s.ID()
				if u != tt.want || ok != tt.ok || string(id) != tt.id || string(obj) != tt.object {
					t.Errorf("step %d: Usage() = %+v, %v; ID() = %q, %q; want %+v, %v, %q, %q", step, u, ok, id, obj, tt.want, tt.ok, tt.id, tt.object)
				}
				if complete := s.Complete(); complete != (tt.name != "not an object") {
					t.Errorf("step %d: Complete() = %v", step, complete)
				}
			}
		})
	}
}

// hostedCallsAnswer is a Responses object whose output lists hosted
// tool calls: three web searches (one type spelled with an escape, one
// item whose earlier "type" a later one replaces), a file search, an MCP
// call, and items that are no calls (a message whose text names one, a
// function call, a reasoning item, an item typed twice ending in a
// message).
const hostedCallsAnswer = `{"id":"resp_2","object":"response","output":[` +
	`{"id":"ws_1","type":"web_search_call","status":"completed","action":{"type":"search","query":"q"}},` +
	`{"type":"web\u005fsearch_call","id":"ws_2"},` +
	`{"type":"message","id":"ws_3","type":"web_search_call"},` +
	`{"type":"file_search_call","queries":["a"],"results":[{"type":"web_search_call"}]},` +
	`{ "type" : "mcp_call" , "arguments" : "{\"type\":\"web_search_call\"}" },` +
	`{"type":"message","content":[{"type":"output_text","text":"\"type\":\"web_search_call\""}]},` +
	`{"type":"function_call","name":"f"},{"type":"reasoning","summary":[]},` +
	`{"type":"web_search_call","type":"message"}],` +
	`"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12}}`

// hostedCalls is what hostedCallsAnswer's output counts.
var hostedCalls = ToolCalls{N: [NumHostedTools]int64{WebSearchCall: 3, FileSearchCall: 1, MCPCall: 1}, Counted: true}

// TestReadUsageCountsCalls: a response.completed event's response, read
// by the stream's usage scan, counts the same calls as the JSON answer.
func TestReadUsageCountsCalls(t *testing.T) {
	t.Parallel()
	ev := `{"type":"response.completed","response":` + hostedCallsAnswer + `}`
	u, _, ok := ReadUsage([]byte(ev), InResponse)
	if !ok || u.Calls != hostedCalls || u.PromptTokens != 10 {
		t.Fatalf("ReadUsage = %+v, %v; want calls %+v", u, ok, hostedCalls)
	}
	// A chat chunk's usage counts nothing.
	if u, _, ok := ReadUsage([]byte(`{"choices":[],"usage":{"prompt_tokens":1}}`), TopLevel); !ok || u.Calls.Counted {
		t.Fatalf("chat usage: %+v, %v", u, ok)
	}
}

func TestAnswerScannerIncomplete(t *testing.T) {
	t.Parallel()
	var s AnswerScanner
	s.Write([]byte(`{"id":"resp_1","usage":{"prompt_tokens":1}`))
	if s.Complete() {
		t.Error("Complete() before the closing brace")
	}
	if id, _ := s.ID(); string(id) != "resp_1" {
		t.Errorf("ID() from the head = %q, want resp_1", id)
	}
}

func TestAnswerScannerAllocs(t *testing.T) {
	in := []byte(`{"id":"resp_1","object":"response","usage":{"input_tokens":4000,"output_tokens":5017,"total_tokens":9017}}`)
	s := new(AnswerScanner) // pooled with the relay's buffer in the server
	if n := testing.AllocsPerRun(100, func() {
		s.Reset()
		s.Write(in)
		s.Usage()
	}); n != 0 {
		t.Errorf("AnswerScanner allocates %v times per answer", n)
	}
}

// FuzzAnswerScanner: for every valid JSON answer, fed in any split, the
// streaming reading equals ReadUsage's (itself checked against
// encoding/json by FuzzParseUsage), and the id equals encoding/json's.
func FuzzAnswerScanner(f *testing.F) {
	for _, s := range []string{`{"id":"r","usage":{"prompt_tokens":1}}`, `{"tools":[{"usage":{"input_tokens":0}}],"usage":{"input_tokens":9}}`, `{"usage":null}`, `{"id":1,"usage":{"total_tokens":2}}`} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		var s AnswerScanner
		n := int(step) + 1
		for i := 0; i < len(data); i += n {
			s.Write(data[i:min(i+n, len(data))])
		}
		if !json.Valid(data) {
			return
		}
		wu, _, wok := ReadUsage(data, TopLevel)
		u, ok := s.Usage()
		if ok != wok || (ok && u != wu) {
			// A usage object over maxCaptured is the one difference allowed.
			if !(wok && !ok && s.kept[keptUsage].over) {
				t.Fatalf("AnswerScanner(%q).Usage() = %+v, %v; ReadUsage says %+v, %v", data, u, ok, wu, wok)
			}
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(data, &top) == nil {
			var wid string
			json.Unmarshal(top["id"], &wid)
			id, _ := s.ID()
			if id != nil && string(id) != wid {
				t.Fatalf("AnswerScanner(%q).ID() = %q; encoding/json says %q", data, id, wid)
			}
			if !s.Complete() {
				t.Fatalf("AnswerScanner(%q): not Complete", data)
			}
		}
	})
}
