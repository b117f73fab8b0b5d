package sse

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestParseUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		want      Usage
		usageOnly bool
		ok        bool
	}{
		{name: "usage null", in: chunkContent},
		{name: "usage-only chunk", in: chunkUsage, want: Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}, usageOnly: true, ok: true},
		{name: "azure prompt filter chunk", in: chunkAzure},
		{name: "vllm continuous usage", in: chunkVLLM, want: Usage{PromptTokens: 10, CompletionTokens: 3, TotalTokens: 13}, ok: true},
		{name: "DONE", in: chunkDone},
		{name: "comment", in: ": ping\n\n"},
		{name: "whitespace around colon and braces", in: `data: {"choices" : [ ] , "usage" : { "prompt_tokens" : 1 , "completion_tokens" :2,"total_tokens": 3 } }` + "\n\n", want: Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, usageOnly: true, ok: true},
		{name: "responses completed", in: "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":12,\"input_tokens_details\":{\"cached_tokens\":2},\"output_tokens\":8,\"output_tokens_details\":{\"reasoning_tokens\":3},\"total_tokens\":20}}}\n\n", want: Usage{PromptTokens: 12, CompletionTokens: 8, TotalTokens: 20, CachedTokens: 2, ReasoningTokens: 3}, ok: true},
		{name: "nested details read", in: `data: {"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":9,"audio_tokens":[1,{"x":"}"}]},"prompt_tokens":5,"completion_tokens":6,"total_tokens":11,"completion_tokens_details":{"reasoning_tokens":7}}}` + "\n\n", want: Usage{PromptTokens: 5, CompletionTokens: 6, TotalTokens: 11, CachedTokens: 9, ReasoningTokens: 7}, usageOnly: true, ok: true},
		{name: "usage before choices", in: `data: {"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2},"choices":[]}` + "\n\n", want: Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}, usageOnly: true, ok: true},
		{name: "no choices key", in: `data: {"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}` + "\n\n", want: Usage{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}, ok: true},
		{name: "usage word in content is not a key", in: `data: {"choices":[{"delta":{"content":"usage"}}],"usage":null}` + "\n\n"},
		{name: "escaped quoted usage in content", in: `data: {"choices":[{"delta":{"content":"\"usage\":{\"prompt_tokens\":1}"}}],"usage":null}` + "\n\n"},
		{name: "null usage then object elsewhere", in: `data: {"x":{"usage":null},"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":0,"total_tokens":2}}` + "\n\n", want: Usage{PromptTokens: 2, CompletionTokens: 0, TotalTokens: 2}, usageOnly: true, ok: true},
		{name: "float count is not ok", in: `data: {"usage":{"prompt_tokens":1.5}}` + "\n\n"},
		{name: "overflow is not ok", in: `data: {"usage":{"prompt_tokens":99999999999999999999}}` + "\n\n"},
		{name: "truncated object is not ok", in: `data: {"usage":{"prompt_tokens":1,`},
		{name: "empty usage object", in: `data: {"choices":[],"usage":{}}` + "\n\n", usageOnly: true, ok: true},
		{name: "choices with whitespace but not empty", in: `data: {"choices":[ {} ],"usage":{"total_tokens":1}}` + "\n\n", want: Usage{TotalTokens: 1}, ok: true},
		{name: "CRLF event", in: "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\r\n\r\n", want: Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}, usageOnly: true, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, only, ok := ParseUsage([]byte(tt.in))
			if u != tt.want || only != tt.usageOnly || ok != tt.ok {
				t.Errorf("ParseUsage(%q) = %+v, %v, %v; want %+v, %v, %v", tt.in, u, only, ok, tt.want, tt.usageOnly, tt.ok)
			}
		})
	}
}

func TestParseUsageAllocs(t *testing.T) {
	for _, s := range []string{chunkContent, chunkUsage} {
		ev := []byte(s)
		if n := testing.AllocsPerRun(100, func() { ParseUsage(ev) }); n != 0 {
			t.Errorf("ParseUsage allocates %v times per call", n)
		}
	}
}

// jsonUsage is the oracle: what encoding/json says about one JSON chunk.
// decided is false when the oracle cannot judge the input fairly (invalid
// JSON, escapes, duplicate or non-integer keys that the byte scanner is
// documented not to handle).
func jsonUsage(data []byte) (u Usage, usageOnly, ok, decided bool) {
	if bytes.ContainsAny(data, "\\\r\n") || bytes.Count(data, keyUsage) > 1 || bytes.Count(data, keyChoices) > 1 {
		return Usage{}, false, false, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return Usage{}, false, false, false
	}
	raw, has := top["usage"]
	if !has {
		// The one "usage" literal, if any, is nested or a string value; the
		// scanner does not tell levels apart.
		return Usage{}, false, false, !bytes.Contains(data, keyUsage)
	}
	if len(raw) == 0 || raw[0] != '{' {
		return Usage{}, false, false, true
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return Usage{}, false, false, false
	}
	for key, dst := range map[string]*int64{"prompt_tokens": &u.PromptTokens, "completion_tokens": &u.CompletionTokens, "total_tokens": &u.TotalTokens} {
		if v, has := fields[key]; has {
			if json.Unmarshal(v, dst) != nil || bytes.ContainsAny(v, ".eE") {
				return Usage{}, false, false, false
			}
		}
	}
	if _, has := top["choices"]; !has && bytes.Contains(data, keyChoices) {
		return Usage{}, false, false, false // a nested "choices"; not told apart either
	}
	var choices []json.RawMessage
	if c, has := top["choices"]; has && json.Unmarshal(c, &choices) == nil && choices != nil && len(choices) == 0 {
		usageOnly = true
	}
	return u, usageOnly, true, true
}

func FuzzParseUsage(f *testing.F) {
	for _, s := range []string{chunkContent, chunkUsage, chunkAzure, chunkVLLM, chunkDone, `{"usage":{"prompt_tokens":-1,"total_tokens":0}}`, `{"usage":{"a":[{"b":"}"}],"total_tokens":2},"choices":[]}`, `{"usage":{"prompt_tokens":1,"prompt_tokens":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		u, only, ok := ParseUsage(data) // must not panic on anything
		if !ok && (u != Usage{} || only) {
			t.Fatalf("not ok but returned %+v, %v", u, only)
		}
		wu, wonly, wok, decided := jsonUsage(data)
		if !decided {
			return
		}
		// As an SSE event, the JSON is one data line.
		ev := append(append([]byte("data: "), data...), "\n\n"...)
		u, only, ok = ParseUsage(ev)
		if u != wu || only != wonly || ok != wok {
			t.Fatalf("ParseUsage(%q) = %+v, %v, %v; encoding/json says %+v, %v, %v", ev, u, only, ok, wu, wonly, wok)
		}
	})
}

func BenchmarkParseUsage(b *testing.B) {
	cases := []struct{ name, ev string }{
		{"usage null", chunkContent},
		{"usage-only chunk", chunkUsage},
		{"vllm continuous usage", chunkVLLM},
	}
	for _, c := range cases {
		ev := []byte(c.ev)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev)))
			for b.Loop() {
				ParseUsage(ev)
			}
		})
	}
}
