package request

import (
	"errors"
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
// API's sampling members, which the SDK no longer types; safeguards,
// which Claude Code sends with its auto mode's beta).
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
			[]string{"temperature", "top_k", "top_p", "safeguards"}},
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

// TestServerToolMembersMatchSDK checks the server tools' rows against
// the SDKs' tool unions: every member of a server tool's SDK type is in
// its row or withheld, and every member a row names is the SDK's.
func TestServerToolMembersMatchSDK(t *testing.T) {
	withheldInTools := map[string]bool{"tunnel_id": true}
	// The Responses variants whose type is a union of strings: their
	// type as the row spells it.
	typeOf := map[string]string{"OfWebSearch": "web_search", "OfWebSearchPreview": "web_search_preview"}
	sdk := map[string]map[string]bool{} // row → members the SDK has
	check := func(rows map[string][]string, row string, members []string) {
		if _, ok := rows[row]; !ok {
			return // a caller's own tool, or a type the tool table refuses
		}
		if sdk[row] == nil {
			sdk[row] = map[string]bool{}
		}
		for _, m := range members {
			sdk[row][m] = true
			if !slices.Contains(rows[row], m) && !withheldInTools[m] {
				t.Errorf("server tool %q: the SDK has %q, which the row neither forwards nor withholds", row, m)
			}
		}
	}
	variants := func(u reflect.Type, each func(name, typ string, members []string)) {
		for i := range u.NumField() {
			v := u.Field(i)
			if !strings.HasPrefix(v.Name, "Of") {
				continue
			}
			st := v.Type.Elem()
			typ := typeOf[v.Name]
			for j := range st.NumField() {
				if name, _, _ := strings.Cut(st.Field(j).Tag.Get("json"), ","); name == "type" && st.Field(j).Tag.Get("default") != "" {
					typ = st.Field(j).Tag.Get("default")
				}
			}
			each(v.Name, typ, sdkFields(st))
		}
	}
	variants(reflect.TypeFor[responses.ToolUnionParam](), func(_, typ string, members []string) {
		check(responsesToolMembers, typ, members)
	})
	for _, u := range []reflect.Type{reflect.TypeFor[anthropic.ToolUnionParam](), reflect.TypeFor[anthropic.BetaToolUnionParam]()} {
		variants(u, func(_, typ string, members []string) {
			check(messagesToolMembers, string(messagesFamily([]byte(typ))), members)
		})
	}
	for _, rows := range []map[string][]string{responsesToolMembers, messagesToolMembers} {
		for row, members := range rows {
			for _, m := range members {
				if sdk[row] != nil && !sdk[row][m] {
					t.Errorf("server tool %q: the row forwards %q, which no SDK tool type has", row, m)
				}
			}
			if sdk[row] == nil && !strings.HasPrefix(row, "web_search_") && row != "web_search_preview" {
				t.Errorf("server tool %q: no SDK tool type has it", row)
			}
		}
	}
}

// TestServerToolMemberRefused: a member a server tool's row does not
// name is refused, named under its tool; the caller's own tools pass
// whatever they hold.
func TestServerToolMemberRefused(t *testing.T) {
	for _, c := range []struct {
		op         Operation
		body, want string
	}{
		{Responses, `{"model":"m","tools":[{"type":"function","name":"f","x_anything":1},{"type":"mcp","server_label":"s","server_url":"https://x","tunnel_id":"tun_of_another"}]}`, "tools[1].tunnel_id"},
		{Responses, `{"model":"m","tools":[{"type":"web_search","filters":{"allowed_domains":["a.example"]},"x_widen":true}]}`, "tools[0].x_widen"},
		{Messages, `{"model":"m","tools":[{"name":"f","input_schema":{},"x":1},{"type":"web_fetch_20250910","name":"web_fetch","max_uses":1,"x_unlimited":true}]}`, "tools[1].x_unlimited"},
		{Messages, `{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1,"allowed_domains":["a.example"]}]}`, ""},
	} {
		_, err := FeaturesOf([]byte(c.body), c.op)
		var me *MemberError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.want != "" && (!errors.As(err, &me) || me.Param != c.want):
			t.Errorf("%s: %v, want a refusal of %s", c.body, err, c.want)
		}
	}
}
