package request

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// sdkFields is the JSON member names of an SDK request type.
func sdkFields(ty reflect.Type) []string {
	var names []string
	for i := range ty.NumField() {
		name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// TestFieldsMatchSDK checks each operation's field table against the
// official SDK request types it was taken from: every member the SDK
// sends is forwarded or withheld (a new SDK version that adds a field
// fails here until the table says forward, drop or feature), and every
// member the table forwards is the SDK's, or one the reference has that
// the SDK sets otherwise (stream, set by the method called; the Messages
// API's sampling members, which the SDK no longer types).
func TestFieldsMatchSDK(t *testing.T) {
	bySDKMethod := []string{"stream"}
	for _, c := range []struct {
		op        Operation
		sdk       []reflect.Type
		reference []string
	}{
		{ChatCompletions, []reflect.Type{reflect.TypeFor[openai.ChatCompletionNewParams]()}, nil},
		{Completions, []reflect.Type{reflect.TypeFor[openai.CompletionNewParams]()}, nil},
		{Embeddings, []reflect.Type{reflect.TypeFor[openai.EmbeddingNewParams]()}, nil},
		{Responses, []reflect.Type{reflect.TypeFor[responses.ResponseNewParams]()}, nil},
		{ResponsesCompact, []reflect.Type{reflect.TypeFor[responses.ResponseCompactParams]()}, nil},
		{ResponsesInputTokens, []reflect.Type{reflect.TypeFor[responses.InputTokenCountParams]()}, nil},
		{Messages, []reflect.Type{reflect.TypeFor[anthropic.MessageNewParams](), reflect.TypeFor[anthropic.BetaMessageNewParams]()},
			[]string{"temperature", "top_k", "top_p"}},
		{CountTokens, []reflect.Type{reflect.TypeFor[anthropic.MessageCountTokensParams](), reflect.TypeFor[anthropic.BetaMessageCountTokensParams]()}, nil},
	} {
		var sdk []string
		for _, ty := range c.sdk {
			sdk = append(sdk, sdkFields(ty)...)
		}
		for _, f := range sdk {
			if !slices.Contains(c.op.Fields(), f) && !slices.Contains(c.op.Withheld(), f) {
				t.Errorf("%s: the SDK sends %q, which the table neither forwards nor withholds", c.op, f)
			}
			if slices.Contains(c.op.Fields(), f) && slices.Contains(c.op.Withheld(), f) {
				t.Errorf("%s: %q is both forwarded and withheld", c.op, f)
			}
		}
		for _, f := range c.op.Fields() {
			if !slices.Contains(sdk, f) && !slices.Contains(bySDKMethod, f) && !slices.Contains(c.reference, f) {
				t.Errorf("%s: the table forwards %q, which no SDK request type has", c.op, f)
			}
		}
		for _, f := range c.op.Withheld() {
			if !slices.Contains(sdk, f) {
				t.Errorf("%s: withholds %q, which no SDK request type has", c.op, f)
			}
		}
	}
}

// TestUnknownAndDropFields: the scan reads keys as a decoder does
// (escapes undone; case, spelling and length exact) and the drop keeps
// every other member byte for byte, in order.
func TestUnknownAndDropFields(t *testing.T) {
	known := func(name []byte) bool { return ChatCompletions.Forwards(name) }
	for _, c := range []struct {
		name, body, want string
		n                int
	}{
		{"all known", `{"model":"m","messages":[]}`, `{"model":"m","messages":[]}`, 0},
		{"escaped known", `{"model":"m","m\u0065ssages":[]}`, `{"model":"m","m\u0065ssages":[]}`, 0},
		{"one unknown in the middle", `{"model":"m", "x":{"y":[1,2]} ,"messages":[]}`, `{"model":"m","messages":[]}`, 1},
		{"case variant", `{"Model":"m","model":"m"}`, `{"model":"m"}`, 1},
		{"unknown first and last", `{"a":1,"model":"m","b":"}"}`, `{"model":"m"}`, 2},
		{"duplicate unknown", `{"x":1,"x":2,"model":"m"}`, `{"model":"m"}`, 2},
		{"nothing left", `{"x":1}`, `{}`, 1},
		{"a key longer than any field", `{"` + strings.Repeat("m", 40) + `":1,"model":"m"}`, `{"model":"m"}`, 1},
		{"nested unknown members stay", `{"model":"m","messages":[{"x":1}]}`, `{"model":"m","messages":[{"x":1}]}`, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := UnknownFields([]byte(c.body), known)
			if u.N != c.n {
				t.Fatalf("unknown %d, want %d", u.N, c.n)
			}
			got, dropped := DropFields(nil, []byte(c.body), known)
			if string(got) != c.want || len(dropped) != c.n {
				t.Fatalf("dropped %q: %s, want %s", dropped, got, c.want)
			}
		})
	}
}

// TestUnknownFieldsAllocatesNothing: the scan of a body whose members
// are all known costs no allocation (the request path runs it on every
// body).
func TestUnknownFieldsAllocatesNothing(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"temperature":1,"messages":[{"role":"user","content":"hi"}],"tools":[]}`)
	known := func(name []byte) bool { return ChatCompletions.Forwards(name) }
	if n := testing.AllocsPerRun(100, func() { _ = UnknownFields(body, known) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
