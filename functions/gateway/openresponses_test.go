package main

// Open Responses (an open specification of the Responses API, published
// as an OpenAPI document in the openresponses/openresponses repository)
// has a compliance suite, but it is a script in that repository run with
// bun, not a package on npm, so `make test` cannot install it. This file
// checks what that suite checks, written down here from the
// specification (openapi version 2026-04-24): the same kinds of request
// (a plain text answer, streamed, with a system prompt, a function tool
// called whole and streamed, an image input, a conversation), sent to the
// stub directly and through the gateway on the demo config, each answer
// held against the schema's required members and their JSON types, every
// stream event against its type's, plus the suite's own checks (an
// output, status completed, a function_call item and its argument
// events). It also checks that the gateway's answers have the stub's
// shape exactly (the same members at every depth, the same events in the
// same order): the relay adds and drops nothing.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/llmgw/gateway/scripts/stub"
)

// jsonKind is a set of JSON types a member may have.
type jsonKind uint8

const (
	jString jsonKind = 1 << iota
	jInteger
	jNumber // any number, an integer too
	jBool
	jArray
	jObject
	jNull
)

// orSchema is an object schema: every member listed is required (the
// specification's "required"), with its kinds; obj describes an object
// member (or an array's items when the member is an array), and byType
// a union of objects told apart by their "type" member.
type orSchema struct {
	members []orMember
	byType  map[string]*orSchema
}

type orMember struct {
	name  string
	kinds jsonKind
	obj   *orSchema // the member's object, or its array's items
}

func (s *orSchema) check(path string, v any, errs *[]string) {
	if s.byType != nil {
		m, _ := v.(map[string]any)
		typ, _ := m["type"].(string)
		sub, ok := s.byType[typ]
		if !ok {
			*errs = append(*errs, fmt.Sprintf("%s: type %q is not one the schema has", path, typ))
			return
		}
		sub.check(path, v, errs)
		return
	}
	m, ok := v.(map[string]any)
	if !ok {
		*errs = append(*errs, fmt.Sprintf("%s: not an object", path))
		return
	}
	for _, mem := range s.members {
		p := path + "." + mem.name
		val, ok := m[mem.name]
		if !ok {
			*errs = append(*errs, p+": required, missing")
			continue
		}
		if !kindOf(val, mem.kinds) {
			*errs = append(*errs, fmt.Sprintf("%s: %s is not of the schema's type", p, trim(val)))
			continue
		}
		switch x := val.(type) {
		case map[string]any:
			if mem.obj != nil {
				mem.obj.check(p, x, errs)
			}
		case []any:
			if mem.obj != nil {
				for i, it := range x {
					mem.obj.check(fmt.Sprintf("%s[%d]", p, i), it, errs)
				}
			}
		}
	}
}

func kindOf(v any, k jsonKind) bool {
	switch x := v.(type) {
	case nil:
		return k&jNull != 0
	case string:
		return k&jString != 0
	case bool:
		return k&jBool != 0
	case []any:
		return k&jArray != 0
	case map[string]any:
		return k&jObject != 0
	case json.Number:
		if k&jNumber != 0 {
			return true
		}
		return k&jInteger != 0 && !strings.ContainsAny(string(x), ".eE")
	}
	return false
}

func trim(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		b = append(b[:80], "…"...)
	}
	return string(b)
}

// The specification's schemas, as far as these requests reach.
var (
	orUsage = &orSchema{members: []orMember{
		{"input_tokens", jInteger, nil}, {"output_tokens", jInteger, nil}, {"total_tokens", jInteger, nil},
		{"input_tokens_details", jObject, &orSchema{members: []orMember{{"cached_tokens", jInteger, nil}}}},
		{"output_tokens_details", jObject, &orSchema{members: []orMember{{"reasoning_tokens", jInteger, nil}}}},
	}}
	orOutputText = &orSchema{members: []orMember{{"type", jString, nil}, {"text", jString, nil}, {"annotations", jArray, nil}}}
	orPart       = &orSchema{byType: map[string]*orSchema{"output_text": orOutputText,
		"input_text": {members: []orMember{{"type", jString, nil}, {"text", jString, nil}}}}}
	orItem = &orSchema{byType: map[string]*orSchema{
		"message": {members: []orMember{{"type", jString, nil}, {"id", jString, nil}, {"status", jString, nil},
			{"role", jString, nil}, {"content", jArray, orPart}}},
		"function_call": {members: []orMember{{"type", jString, nil}, {"id", jString, nil}, {"call_id", jString, nil},
			{"name", jString, nil}, {"arguments", jString, nil}, {"status", jString, nil}}},
		"compaction": {members: []orMember{{"type", jString, nil}, {"id", jString, nil}, {"encrypted_content", jString, nil}}},
	}}
	orTool = &orSchema{byType: map[string]*orSchema{
		"function": {members: []orMember{{"type", jString, nil}, {"name", jString, nil}, {"description", jString | jNull, nil},
			{"parameters", jObject | jNull, nil}, {"strict", jBool | jNull, nil}}},
	}}
	orResponse = &orSchema{members: []orMember{
		{"id", jString, nil}, {"object", jString, nil}, {"created_at", jInteger, nil}, {"completed_at", jInteger | jNull, nil},
		{"status", jString, nil}, {"incomplete_details", jObject | jNull, &orSchema{members: []orMember{{"reason", jString, nil}}}},
		{"model", jString, nil}, {"previous_response_id", jString | jNull, nil}, {"instructions", jString | jArray | jNull, nil},
		{"output", jArray, orItem}, {"error", jObject | jNull, &orSchema{members: []orMember{{"code", jString, nil}, {"message", jString, nil}}}},
		{"tools", jArray, orTool}, {"tool_choice", jString | jObject, nil}, {"truncation", jString, nil},
		{"parallel_tool_calls", jBool, nil},
		{"text", jObject, &orSchema{members: []orMember{{"format", jObject, &orSchema{members: []orMember{{"type", jString, nil}}}}}}},
		{"top_p", jNumber, nil}, {"presence_penalty", jNumber, nil}, {"frequency_penalty", jNumber, nil},
		{"top_logprobs", jInteger, nil}, {"temperature", jNumber, nil},
		{"reasoning", jObject | jNull, &orSchema{members: []orMember{{"effort", jString | jNull, nil}, {"summary", jString | jNull, nil}}}},
		{"usage", jObject | jNull, orUsage}, {"max_output_tokens", jInteger | jNull, nil}, {"max_tool_calls", jInteger | jNull, nil},
		{"store", jBool, nil}, {"background", jBool, nil}, {"service_tier", jString, nil}, {"metadata", jObject, nil},
		{"safety_identifier", jString | jNull, nil}, {"prompt_cache_key", jString | jNull, nil},
	}}
	// CompactResource: what POST /responses/compact answers.
	orCompact = &orSchema{members: []orMember{{"id", jString, nil}, {"object", jString, nil}, {"output", jArray, orItem},
		{"created_at", jInteger, nil}, {"usage", jObject, orUsage}}}
	orEvent = func() *orSchema {
		head := []orMember{{"type", jString, nil}, {"sequence_number", jInteger, nil}}
		with := func(more ...orMember) *orSchema {
			return &orSchema{members: append(append([]orMember{}, head...), more...)}
		}
		lifecycle := with(orMember{"response", jObject, orResponse})
		item := with(orMember{"output_index", jInteger, nil}, orMember{"item", jObject | jNull, orItem})
		at := []orMember{{"item_id", jString, nil}, {"output_index", jInteger, nil}}
		content := append(append([]orMember{}, at...), orMember{"content_index", jInteger, nil})
		return &orSchema{byType: map[string]*orSchema{
			"response.created": lifecycle, "response.queued": lifecycle, "response.in_progress": lifecycle,
			"response.completed": lifecycle, "response.failed": lifecycle, "response.incomplete": lifecycle,
			"response.output_item.added": item, "response.output_item.done": item,
			"response.content_part.added":            with(append(content, orMember{"part", jObject, orPart})...),
			"response.content_part.done":             with(append(content, orMember{"part", jObject, orPart})...),
			"response.output_text.delta":             with(append(content, orMember{"delta", jString, nil})...),
			"response.output_text.done":              with(append(content, orMember{"text", jString, nil})...),
			"response.function_call_arguments.delta": with(append(at, orMember{"delta", jString, nil})...),
			"response.function_call_arguments.done":  with(append(at, orMember{"arguments", jString, nil})...),
		}}
	}()
)

// A 1x1 PNG, for the image input.
const onePixelPNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="

// orCase is one request of the suite's kinds: its input (and tools) and
// what the answer must show besides the schema.
type orCase struct {
	name, input, tools string
	extra              string // more members of the body
	stream, call       bool
}

var orCases = []orCase{
	{name: "text", input: `[{"type":"message","role":"user","content":"Say hello in three words."}]`},
	{name: "text streamed", input: `[{"type":"message","role":"user","content":"Count to five."}]`, stream: true},
	{name: "system prompt", input: `[{"type":"message","role":"system","content":"Answer as a sailor would."},{"type":"message","role":"user","content":"Say hello."}]`},
	{name: "function tool", call: true, input: `[{"type":"message","role":"user","content":"What is the weather in Lisbon?"}]`,
		tools: `[{"type":"function","name":"weather","description":"The weather at a place","parameters":{"type":"object","properties":{"place":{"type":"string"}},"required":["place"]}}]`},
	{name: "function tool streamed", call: true, stream: true, input: `[{"type":"message","role":"user","content":"What is the weather in Lisbon?"}]`,
		tools: `[{"type":"function","name":"weather","description":"The weather at a place","parameters":{"type":"object","properties":{"place":{"type":"string"}},"required":["place"]}}]`},
	{name: "image input", input: `[{"type":"message","role":"user","content":[{"type":"input_text","text":"What is in this picture?"},{"type":"input_image","image_url":"` + onePixelPNG + `"}]}]`},
	// Codex's reasoning (a summary, no effort) and a verbosity without
	// a format: the answer names both members of each.
	{name: "reasoning and text in part", input: `[{"type":"message","role":"user","content":"Say hello."}]`,
		extra: `,"reasoning":{"summary":"auto"},"text":{"verbosity":"low"}`},
	{name: "conversation", input: `[{"type":"message","role":"user","content":"My name is Ada."},{"type":"message","role":"assistant","content":"Hello Ada."},{"type":"message","role":"user","content":"What is my name?"}]`},
}

// orAnswer is what one request got: the response object (whole, or the
// terminal event's), the stream's events, and the errors found.
type orAnswer struct {
	response map[string]any
	events   []map[string]any
	errs     []string
}

// orRun sends c to url (POST …/responses) with the header and model
// given, and checks the answer as the suite does.
func orRun(t *testing.T, url, model string, hdr http.Header, c orCase) orAnswer {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"input":%s`, model, c.input)
	if c.tools != "" {
		body += `,"tools":` + c.tools
	}
	if c.stream {
		body += `,"stream":true`
	}
	body += c.extra
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body+"}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %v %s", c.name, resp.StatusCode, err, raw)
	}
	var a orAnswer
	decode := func(b []byte) map[string]any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			a.errs = append(a.errs, fmt.Sprintf("not JSON: %.200s", b))
		}
		return m
	}
	if !c.stream {
		a.response = decode(raw)
	} else {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok || strings.TrimSpace(data) == "[DONE]" {
				continue
			}
			ev := decode([]byte(data))
			a.events = append(a.events, ev)
			orEvent.check(fmt.Sprintf("event %d", len(a.events)-1), ev, &a.errs)
			switch ev["type"] {
			case "response.completed", "response.failed", "response.incomplete":
				a.response, _ = ev["response"].(map[string]any)
			}
		}
		if len(a.events) == 0 {
			a.errs = append(a.errs, "no stream events")
		}
	}
	if a.response == nil {
		a.errs = append(a.errs, "no response object")
		return a
	}
	orResponse.check("response", a.response, &a.errs)
	// The suite's own checks.
	output, _ := a.response["output"].([]any)
	if len(output) == 0 {
		a.errs = append(a.errs, "no output items")
	}
	if a.response["status"] != "completed" {
		a.errs = append(a.errs, fmt.Sprintf("status %v, want completed", a.response["status"]))
	}
	if c.call {
		called := false
		for _, o := range output {
			m, _ := o.(map[string]any)
			called = called || m["type"] == "function_call"
		}
		if !called {
			a.errs = append(a.errs, "no function_call output item")
		}
	}
	if c.call && c.stream {
		seen := map[string]bool{}
		for _, ev := range a.events {
			typ, _ := ev["type"].(string)
			if item, _ := ev["item"].(map[string]any); item != nil {
				typ += " " + fmt.Sprint(item["type"])
			}
			seen[typ] = true
		}
		for _, want := range []string{"response.output_item.added function_call", "response.function_call_arguments.delta",
			"response.function_call_arguments.done", "response.output_item.done function_call"} {
			if !seen[want] {
				a.errs = append(a.errs, "no "+want+" event")
			}
		}
	}
	return a
}

// orShape is v's members at every depth (object keys sorted, arrays by
// their first element), its values left out: what a relay that adds or
// drops nothing keeps.
func orShape(v any) string {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteString("{")
		for _, k := range keys {
			b.WriteString(k + ":" + orShape(x[k]) + ",")
		}
		return b.String() + "}"
	case []any:
		if len(x) == 0 {
			return "[]"
		}
		return "[" + orShape(x[0]) + "]"
	}
	return "."
}

// TestOpenResponsesSchema runs the cases against the stub directly and
// through the gateway on the demo config (contoso's gpt-4o, on the Azure
// v1 pool), each held against the specification; then the two answers'
// shapes must be equal. POST /responses/compact is held against its
// CompactResource the same way. Before the stub carried completed_at,
// presence_penalty and the six other members (and strict on each tool),
// every case failed both ways.
func TestOpenResponsesSchema(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{demo: true, stubOpts: stub.Options{Tokens: 6}})
	direct := http.Header{"Api-Key": {backendKey}}
	through := http.Header{"Authorization": {"Bearer " + g.token("contoso")}}
	t.Run("compact", func(t *testing.T) {
		body := `{"model":%q,"input":[{"role":"user","content":"Run echo stub."},{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"stub"}]}`
		var shapes []string
		for _, target := range []struct {
			url, model string
			hdr        http.Header
		}{{g.stubURLs[0] + "/openai/v1/responses/compact", "gpt-4o-prod", direct}, {g.URL + "/v1/responses/compact", "gpt-4o", through}} {
			req, err := http.NewRequest(http.MethodPost, target.url, strings.NewReader(fmt.Sprintf(body, target.model)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = target.hdr.Clone()
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			var m map[string]any
			if err := d.Decode(&m); err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s: %d %v %s", target.url, resp.StatusCode, err, raw)
			}
			var errs []string
			orCompact.check("compaction", m, &errs)
			if out, _ := m["output"].([]any); len(out) == 0 || out[len(out)-1].(map[string]any)["type"] != "compaction" {
				errs = append(errs, "the output does not end with a compaction item")
			}
			if len(errs) > 0 {
				t.Errorf("%s breaks the schema:\n%s", target.url, strings.Join(errs, "\n"))
			}
			shapes = append(shapes, orShape(m))
		}
		if shapes[0] != shapes[1] {
			t.Errorf("the compaction's shape through the gateway differs:\n stub    %s\n gateway %s", shapes[0], shapes[1])
		}
	})
	for _, c := range orCases {
		t.Run(c.name, func(t *testing.T) {
			s := orRun(t, g.stubURLs[0]+"/openai/v1/responses", "gpt-4o-prod", direct, c)
			w := orRun(t, g.URL+"/v1/responses", "gpt-4o", through, c)
			if len(s.errs) > 0 {
				t.Errorf("the stub's answer breaks the schema:\n%s", strings.Join(s.errs, "\n"))
			}
			if len(w.errs) > 0 {
				t.Errorf("the gateway's answer breaks the schema:\n%s", strings.Join(w.errs, "\n"))
			}
			if a, b := orShape(s.response), orShape(w.response); a != b {
				t.Errorf("the response's shape through the gateway differs:\n stub    %s\n gateway %s", a, b)
			}
			if len(s.events) != len(w.events) {
				t.Fatalf("%d events from the stub, %d through the gateway", len(s.events), len(w.events))
			}
			for i := range s.events {
				if a, b := orShape(s.events[i]), orShape(w.events[i]); a != b || s.events[i]["type"] != w.events[i]["type"] {
					t.Errorf("event %d (%v) differs through the gateway:\n stub    %s\n gateway %s", i, s.events[i]["type"], a, b)
				}
			}
		})
	}
}

// TestOpenResponsesSchemaRejects: the schema above fails an answer
// missing any member the stub once left out, one
// of the wrong type, an event without its sequence number and one of a
// type the specification does not have.
func TestOpenResponsesSchemaRejects(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 3}})
	c := orCases[3] // a function tool: tools[] and a function_call item
	c.stream = true
	good := orRun(t, g.stubURLs[0]+"/v1/responses", "m", http.Header{"Authorization": {"Bearer " + backendKey}}, c)
	if len(good.errs) > 0 || len(good.events) < 6 {
		t.Fatalf("%d events, errors %v", len(good.events), good.errs)
	}
	var resp string
	{
		b, _ := json.Marshal(good.response)
		resp = string(b)
	}
	fails := func(name string, schema *orSchema, mutate func(m map[string]any)) {
		t.Helper()
		d := json.NewDecoder(strings.NewReader(resp))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		var errs []string
		schema.check("response", m, &errs)
		if len(errs) == 0 {
			t.Errorf("%s: the schema found nothing wrong", name)
		}
	}
	for _, f := range []string{"completed_at", "presence_penalty", "frequency_penalty", "top_logprobs", "max_tool_calls",
		"service_tier", "safety_identifier", "prompt_cache_key"} {
		fails("no "+f, orResponse, func(m map[string]any) { delete(m, f) })
	}
	fails("no tools[0].strict", orResponse, func(m map[string]any) { delete(m["tools"].([]any)[0].(map[string]any), "strict") })
	fails("a float top_logprobs", orResponse, func(m map[string]any) { m["top_logprobs"] = json.Number("0.5") })
	fails("usage without its details", orResponse, func(m map[string]any) { delete(m["usage"].(map[string]any), "output_tokens_details") })
	fails("a function call without call_id", orResponse, func(m map[string]any) { delete(m["output"].([]any)[0].(map[string]any), "call_id") })
	fails("an event without sequence_number", orEvent, func(m map[string]any) {
		for k := range m {
			delete(m, k)
		}
		m["type"], m["item_id"], m["output_index"], m["delta"] = "response.function_call_arguments.delta", "fc_1", json.Number("0"), "x"
	})
	fails("an event of another type", orEvent, func(m map[string]any) { m["type"] = "response.custom_tool_call_input.delta" })
}

// TestSDKNodeOpenResponses runs scripts/sdktest/openresponses.test.mjs:
// the AI SDK's Open Responses provider (@ai-sdk/open-responses), a client
// written to the specification, through the gateway on the demo config,
// and checks the access log: every call 200 and ok, tokens counted.
func TestSDKNodeOpenResponses(t *testing.T) {
	t.Parallel()
	node, dir := nodeSDK(t)
	g := startGateway(t, options{demo: true, stubOpts: stub.Options{Tokens: 8}})
	nodeTest(t, node, dir, append(cleanEnv(), "RESPONSES_URL="+g.URL+"/v1/responses", "TOKEN="+g.token("contoso"),
		"MODEL=gpt-4o", "EXPECT_TOKENS=8"), "openresponses.test.mjs")
	lines := pathLog(g, "contoso", "/v1/responses")
	if len(lines) != 6 { // text, streamed text, and two calls with a tool each
		t.Errorf("%d Responses calls in the access log, want 6", len(lines))
	}
	for _, l := range lines {
		p, _ := l["prompt_tokens"].(float64)
		c, _ := l["completion_tokens"].(float64)
		if l["status"] != 200.0 || l["outcome"] != "ok" || p <= 0 || c <= 0 {
			t.Errorf("access log %v", l)
		}
	}
}
