package request

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

func TestParseBody(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Body
		has  uint8
		err  error
	}{
		{name: "chat", body: `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, want: Body{Model: "gpt-4o"}, has: HasMessages},
		{name: "stream with usage", body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, want: Body{Model: "m", Stream: true, IncludeUsage: true}, has: HasMessages},
		{name: "stream options false", body: `{"stream_options":{"include_usage":false},"model":"m","stream":true}`, want: Body{Model: "m", Stream: true}},
		{name: "escaped model", body: `{"model":"a\u0062c","prompt":"x"}`, want: Body{Model: "abc"}, has: HasPrompt},
		{name: "nested model key ignored", body: `{"messages":[{"model":"evil"}],"model":"good"}`, want: Body{Model: "good"}, has: HasMessages},
		{name: "whitespace", body: " {\n\t\"model\" : \"m\" ,\r\n \"input\" : [1,2] } ", want: Body{Model: "m"}, has: HasInput},
		{name: "stream null", body: `{"model":"m","stream":null,"stream_options":null}`, want: Body{Model: "m"}},
		{name: "not json", body: `{"model":`, err: ErrNotJSON},
		{name: "array", body: `[1]`, err: ErrNotObject},
		{name: "missing model", body: `{"messages":[]}`, err: ErrMissingModel},
		{name: "empty model", body: `{"model":""}`, err: ErrMissingModel},
		{name: "model number", body: `{"model":4}`, err: ErrModelType},
		{name: "stream string", body: `{"model":"m","stream":"yes"}`, err: ErrStreamType},
		{name: "options array", body: `{"model":"m","stream_options":[]}`, err: ErrOptionsType},
		{name: "counts", body: `{"model":"m","n":3,"max_tokens":100,"max_completion_tokens":null,"max_output_tokens":7}`, want: Body{Model: "m", N: 3, Caps: [numCaps]int64{100, 0, 7}}},
		{name: "best_of", body: `{"model":"m","prompt":"x","best_of":4,"n":2}`, want: Body{Model: "m", N: 2, BestOf: 4}, has: HasPrompt},
		{name: "huge cap saturates", body: `{"model":"m","max_tokens":123456789012345678901234567890}`, want: Body{Model: "m", Caps: [numCaps]int64{maxCount}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBody([]byte(tt.body))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if tt.err != nil {
				return
			}
			if got.Model != tt.want.Model || got.Stream != tt.want.Stream || got.IncludeUsage != tt.want.IncludeUsage ||
				got.N != tt.want.N || got.BestOf != tt.want.BestOf || got.Caps != tt.want.Caps {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for _, f := range []uint8{HasMessages, HasPrompt, HasInput} {
				if got.Has(f) != (tt.has&f != 0) {
					t.Fatalf("Has(%d) = %v", f, got.Has(f))
				}
			}
		})
	}
}

// TestParseBodyCounts: n, best_of and the output caps are positive JSON
// integers or null; anything a decoder could read another way is refused.
func TestParseBodyCounts(t *testing.T) {
	tests := []struct {
		body, param string
		belowMin    bool
	}{
		{`{"model":"m","max_tokens":"100"}`, "max_tokens", false},
		{`{"model":"m","max_completion_tokens":10.5}`, "max_completion_tokens", false},
		{`{"model":"m","max_output_tokens":1e3}`, "max_output_tokens", false},
		{`{"model":"m","max_tokens":100.0}`, "max_tokens", false},
		{`{"model":"m","n":true}`, "n", false},
		{`{"model":"m","best_of":[1]}`, "best_of", false},
		{`{"model":"m","max_tokens":0}`, "max_tokens", true},
		{`{"model":"m","n":-1}`, "n", true},
		{`{"model":"m","max_tokens":-0}`, "max_tokens", true},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			_, err := ParseBody([]byte(tt.body))
			var ie *IntError
			if !errors.As(err, &ie) || ie.Param != tt.param || ie.BelowMin != tt.belowMin {
				t.Fatalf("err = %v, want an IntError for %s (below min %v)", err, tt.param, tt.belowMin)
			}
		})
	}
}

// TestRewriteCap: the output cap replaces every cap field above it (or
// null), adds the wire format's field after the model when the body has
// none, and leaves smaller caps and everything else as sent.
func TestRewriteCap(t *testing.T) {
	tests := []struct {
		name string
		body string
		c    Changes
		want string
	}{
		{name: "insert after model", body: `{"model":"m","messages":[]}`, c: Changes{OutputCap: 50, CapField: MaxCompletionTokens},
			want: `{"model":"m","max_completion_tokens":50,"messages":[]}`},
		{name: "insert max_tokens, model renamed", body: `{"messages":[],"model":"m"}`, c: Changes{Model: "served", OutputCap: 7, CapField: MaxTokens},
			want: `{"messages":[],"model":"served","max_tokens":7}`},
		{name: "insert max_output_tokens with usage injected", body: `{"model":"m","stream":true}`, c: Changes{InjectUsage: true, OutputCap: 16, CapField: MaxOutputTokens},
			want: `{"model":"m","max_output_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`},
		// vLLM: the usage on every chunk beside include_usage, in each
		// place include_usage is injected; not when the client asked
		// include_usage itself.
		{name: "running usage: no stream_options", body: `{"model":"m","stream":true}`, c: Changes{InjectUsage: true, RunningUsage: true},
			want: `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
		{name: "running usage: stream_options null", body: `{"model":"m","stream":true,"stream_options":null}`, c: Changes{InjectUsage: true, RunningUsage: true},
			want: `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
		{name: "running usage: an object without include_usage", body: `{"model":"m","stream":true,"stream_options":{"x":1}}`, c: Changes{InjectUsage: true, RunningUsage: true},
			want: `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true,"x":1}}`},
		{name: "running usage: include_usage false", body: `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, c: Changes{InjectUsage: true, RunningUsage: true},
			want: `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
		{name: "running usage: the client's include_usage", body: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, c: Changes{InjectUsage: true, RunningUsage: true},
			want: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{name: "replace larger, and write the field the backend reads", body: `{"model":"m","max_tokens": 4096 ,"messages":[]}`, c: Changes{OutputCap: 100, CapField: MaxCompletionTokens},
			want: `{"model":"m","max_completion_tokens":100,"max_tokens": 100 ,"messages":[]}`},
		{name: "a smaller cap in a field the backend ignores is written where it reads", body: `{"model":"m","max_completion_tokens":1,"messages":[]}`, c: Changes{OutputCap: 1, CapField: MaxTokens},
			want: `{"model":"m","max_tokens":1,"max_completion_tokens":1,"messages":[]}`},
		{name: "replace null", body: `{"model":"m","max_completion_tokens":null}`, c: Changes{OutputCap: 100, CapField: MaxCompletionTokens},
			want: `{"model":"m","max_completion_tokens":100}`},
		{name: "keep smaller", body: `{"model":"m","max_completion_tokens":10}`, c: Changes{OutputCap: 100, CapField: MaxCompletionTokens},
			want: `{"model":"m","max_completion_tokens":10}`},
		{name: "each field on its own", body: `{"max_tokens":500,"model":"m","max_completion_tokens":20,"max_output_tokens":null}`, c: Changes{Model: "x", OutputCap: 100, CapField: MaxTokens},
			want: `{"max_tokens":100,"model":"x","max_completion_tokens":20,"max_output_tokens":100}`},
		{name: "no cap", body: `{"model":"m","max_tokens":500}`, c: Changes{CapField: MaxTokens},
			want: `{"model":"m","max_tokens":500}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseBody([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b.RewriteWith(nil, []byte(tt.body), tt.c)); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestRewrite(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		model  string
		inject bool
		want   string
	}{
		{name: "unchanged", body: `{"model":"m","messages":[]}`, want: `{"model":"m","messages":[]}`},
		{name: "rename", body: `{"model":"m", "messages":[]}`, model: "served/Model-1", want: `{"model":"served/Model-1", "messages":[]}`},
		{name: "inject appends", body: `{"model":"m","stream":true}`, inject: true, want: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{name: "inject into options", body: `{"model":"m","stream":true,"stream_options":{"x":1}}`, inject: true, want: `{"model":"m","stream":true,"stream_options":{"include_usage":true,"x":1}}`},
		{name: "inject into empty options", body: `{"model":"m","stream_options":{ }}`, inject: true, want: `{"model":"m","stream_options":{"include_usage":true }}`},
		{name: "inject flips false", body: `{"stream_options":{"include_usage":false},"model":"m"}`, model: "n", inject: true, want: `{"stream_options":{"include_usage":true},"model":"n"}`},
		{name: "already true", body: `{"model":"m","stream_options":{"include_usage":true}}`, inject: true, want: `{"model":"m","stream_options":{"include_usage":true}}`},
		{name: "rename before inject, trailing space", body: "{\"model\":\"m\"}\n", model: "x", inject: true, want: "{\"model\":\"x\",\"stream_options\":{\"include_usage\":true}}\n"},
		{name: "options null", body: `{"model":"m","stream_options":null}`, inject: true, want: `{"model":"m","stream_options":{"include_usage":true}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseBody([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			got := string(b.Rewrite(nil, []byte(tt.body), tt.model, tt.inject))
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// FuzzRewrite checks that a rewrite of any accepted body is valid JSON that
// differs from the original only in model, include_usage and the output
// caps.
func FuzzRewrite(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi \"x\" }"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":false,"y":[1,{"z":"}"}]}}`,
		` { "model" : "a\\b" , "stream_options" : { } } `,
		`{"stream_options":{},"model":"m"}`,
		`{"model":"m","max_tokens":300,"max_output_tokens":null,"stream_options":{}}`,
		`{"max_completion_tokens":5,"model":"m"}`,
		`{"model":"m","user":"u","metadata":{"user_id":"a\u0062"},"safety_identifier":"s","cache_salt":"c"}`,
	} {
		f.Add(s, "renamed", true, int64(0), uint8(0), false)
		f.Add(s, "", true, int64(40), uint8(2), true)
	}
	f.Fuzz(func(t *testing.T, body, model string, inject bool, outCap int64, field uint8, keyed bool) {
		b, err := ParseBody([]byte(body))
		if err != nil || !utf8.ValidString(model) { // model names come from validated config
			return
		}
		if outCap < 0 || outCap > maxCount {
			outCap = 0
		}
		cf := CapField(field % uint8(numCaps))
		ch := Changes{Model: model, InjectUsage: inject, OutputCap: outCap, CapField: cf}
		if keyed {
			ch.Tenant, ch.SaltCache = "t", true
		}
		out := b.RewriteWith(nil, []byte(body), ch)
		var before, after map[string]any
		if err := json.Unmarshal([]byte(body), &before); err != nil {
			t.Fatalf("accepted invalid JSON: %v", err)
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("rewrite produced invalid JSON %q: %v", out, err)
		}
		if model != "" {
			before["model"] = model
		}
		if inject {
			opts, _ := before["stream_options"].(map[string]any)
			if opts == nil {
				opts = map[string]any{}
			}
			opts["include_usage"] = true
			before["stream_options"] = opts
		}
		if outCap > 0 {
			for f, name := range capNames {
				if v, ok := before[name]; ok {
					if n, _ := v.(float64); v == nil || b.Caps[f] > outCap || n > float64(outCap) {
						before[name] = float64(outCap)
					}
				}
			}
			if b.caps[cf].end == 0 { // the field the backend reads is always written
				before[capNames[cf]] = float64(outCap)
			}
		}
		if keyed {
			for _, k := range []string{"user", "safety_identifier"} {
				if v, ok := before[k].(string); ok {
					before[k] = "t:" + v
				}
			}
			if md, ok := before["metadata"].(map[string]any); ok {
				if v, ok := md["user_id"].(string); ok {
					md["user_id"] = "t:" + v
				}
			}
			before["cache_salt"] = string(CacheSalt(nil, "t"))
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("rewrite changed more than model/include_usage/caps/ids:\nin  %s\nout %s", body, out)
		}
	})
}

func BenchmarkParseRewrite(b *testing.B) {
	body := []byte(`{"model":"gpt-4o","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant that answers briefly."},{"role":"user","content":"` + string(make([]byte, 0)) + `Tell me about token buckets and how they refill over time, in detail please."}],"temperature":0.7}`)
	dst := make([]byte, 0, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		p, err := ParseBody(body)
		if err != nil {
			b.Fatal(err)
		}
		dst = p.Rewrite(dst[:0], body, "gpt-4o-prod", true)
	}
}

// TestParseThinking: thinking.budget_tokens is read once, like every
// cap: a duplicate, an escaped or case-variant spelling, or a count that
// is not a positive integer is refused.
func TestParseThinking(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		body   string
		budget int64
		err    bool
	}{
		{`{"model":"m","thinking":{"type":"enabled","budget_tokens":2048}}`, 2048, false},
		{`{"model":"m","thinking":{"type":"disabled"}}`, 0, false},
		{`{"model":"m","thinking":null}`, 0, false},
		{`{"model":"m","thinking":"on"}`, 0, true},
		{`{"model":"m","thinking":{"budget_tokens":1024,"budget_tokens":9999}}`, 0, true},
		{`{"model":"m","thinking":{"budget_tokens":1024,"budget\u005ftokens":9999}}`, 0, true},
		{`{"model":"m","thinking":{"Budget_Tokens":9999}}`, 0, true},
		{`{"model":"m","thinking":{"budget_tokens":"1024"}}`, 0, true},
		{`{"model":"m","thinking":{"budget_tokens":1024},"thinking":{"type":"disabled"}}`, 0, true},
	} {
		b, err := ParseBody([]byte(tt.body))
		var ke *KeyError
		var ie *IntError
		if (err != nil) != tt.err || b.ThinkingBudget != tt.budget && !tt.err {
			t.Errorf("%s: budget %d, err %v", tt.body, b.ThinkingBudget, err)
		}
		if err != nil && !errors.As(err, &ke) && !errors.As(err, &ie) && !errors.Is(err, ErrThinkingType) {
			t.Errorf("%s: unexpected error %v", tt.body, err)
		}
	}
}

// TestParseServiceTier: service_tier is read unescaped; a non-string is
// refused, and so is a second spelling of the key (the tier is billed).
func TestParseServiceTier(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
		err              bool
	}{
		{"absent", `{"model":"m"}`, "", false},
		{"null", `{"model":"m","service_tier":null}`, "", false},
		{"flex", `{"model":"m","service_tier":"flex"}`, "flex", false},
		{"escaped", `{"model":"m","service_tier":"\u0070riority"}`, "priority", false},
		{"number", `{"model":"m","service_tier":1}`, "", true},
		{"twice", `{"model":"m","service_tier":"default","service_tier":"priority"}`, "", true},
		{"escaped key twice", `{"model":"m","service_tier":"default","service\u005ftier":"priority"}`, "", true},
		{"case variant", `{"model":"m","Service_Tier":"priority"}`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ParseBody([]byte(tc.body))
			if (err != nil) != tc.err || (err == nil && b.ServiceTier != tc.want) {
				t.Fatalf("ParseBody = %q, %v; want %q, error %v", b.ServiceTier, err, tc.want, tc.err)
			}
		})
	}
}

// TestRewriteServiceTier: the tier written where the body leaves it to
// the backend (absent, null, "auto" in any spelling), a named one kept,
// beside the other edits at the model's end.
func TestRewriteServiceTier(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"absent", `{"model":"m","input":"hi"}`, `{"model":"m","service_tier":"default","input":"hi"}`},
		{"null", `{"service_tier":null,"model":"m"}`, `{"service_tier":"default","model":"m"}`},
		{"auto", `{"model":"m","service_tier" : "auto"}`, `{"model":"m","service_tier" : "default"}`},
		{"auto escaped", `{"model":"m","service_tier":"\u0061uto"}`, `{"model":"m","service_tier":"default"}`},
		{"named kept", `{"model":"m","service_tier":"flex"}`, `{"model":"m","service_tier":"flex"}`},
		{"with max_tool_calls", `{"model":"m","tools":[]}`, `{"model":"m","max_tool_calls":2,"service_tier":"default","tools":[]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := ParseBody([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			ch := Changes{ServiceTier: "default"}
			if c.name == "with max_tool_calls" {
				ch.MaxToolCalls = 2
			}
			if got := string(b.RewriteWith(nil, []byte(c.body), ch)); got != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
