package stub

// What agents need of the stub, as the official Go SDK decodes it: chat
// tool calls (whole and streamed), the Responses API's function_call items
// (whole and streamed, then text once the output comes back), structured
// output on both, a stored response replayed as a stream, and the schema
// generator they share with the Messages API's tool_use.

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

func TestSchemaValue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, schema, want string }{
		{"required only", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["b"]}`, `{"b":1}`},
		{"types", `{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"number","minimum":5},"i":{"type":"integer","maximum":0},` +
			`"b":{"type":"boolean"},"z":{"type":"null"},"l":{"type":"array","items":{"type":"string"},"minItems":2},"o":{"type":"object"}},` +
			`"required":["s","n","i","b","z","l","o"]}`,
			`{"b":true,"i":0,"l":["stub","stub"],"n":5,"o":{},"s":"stub","z":null}`},
		{"enum const anyOf nullable", `{"type":"object","properties":{"e":{"enum":["x","y"]},"c":{"const":3},` +
			`"u":{"anyOf":[{"type":"null"},{"type":"integer"}]},"t":{"type":["null","boolean"]}},"required":["e","c","u","t"]}`,
			`{"c":3,"e":"x","t":true,"u":1}`},
		{"refs", `{"type":"object","properties":{"p":{"$ref":"#/$defs/P"},"q":{"$ref":"#/definitions/Q"}},"required":["p","q"],` +
			`"$defs":{"P":{"type":"object","properties":{"x":{"type":"string","format":"date"}},"required":["x"]}},"definitions":{"Q":{"type":"string","minLength":6}}}`,
			`{"p":{"x":"2025-01-01"},"q":"stubxx"}`},
		{"recursion is bounded", `{"type":"object","properties":{"next":{"$ref":"#"}},"required":["next"]}`, ""},
		{"command", `{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},"cmd":{"type":"string"}},"required":["command","cmd"]}`,
			`{"cmd":"echo stub","command":["echo","stub"]}`},
		{"no type", `{"properties":{"k":{}},"required":["k"]}`, `{"k":"stub"}`},
		{"not JSON", `nope`, `{}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := schemaJSON(json.RawMessage(tt.schema))
			if tt.want != "" && got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("not JSON: %s", got)
			}
		})
	}
}

func TestPickTool(t *testing.T) {
	t.Parallel()
	names := []string{"shell", "", "shell_command", "read"}
	for _, tt := range []struct {
		last, forced string
		want         int
	}{
		{"run it", "", 0},
		{"use shell_command please", "", 2}, // the longest name mentioned
		{"read the file", "", 3},
		{"anything", "read", 3},
		{"anything", "missing", 0},
	} {
		if got := pickTool(names, []byte(tt.last), tt.forced); got != tt.want {
			t.Errorf("pickTool(%q, %q) = %d, want %d", tt.last, tt.forced, got, tt.want)
		}
	}
	if got := pickTool(nil, []byte("x"), ""); got != -1 {
		t.Errorf("no tools: %d", got)
	}
	if got := splitPieces("aé€b", 1); strings.Join(got, "|") != "a|é|€|b" {
		t.Errorf("splitPieces cut a character: %q", got)
	}
}

var weatherParams = map[string]any{
	"type":       "object",
	"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer", "minimum": 2}},
	"required":   []any{"city", "days"},
}

func TestSDKChatTools(t *testing.T) {
	t.Parallel()
	c, st := sdkClient(t, fast)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "noop", Parameters: shared.FunctionParameters{"type": "object"}}),
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: weatherParams}),
		},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
			Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}}},
	}
	wantArgs := `{"city":"stub","days":2}`

	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ch := res.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != "" {
		t.Fatalf("answer %s", res.RawJSON())
	}
	call := ch.Message.ToolCalls[0]
	if call.Type != "function" || call.Function.Name != "get_weather" || call.Function.Arguments != wantArgs ||
		!strings.HasPrefix(call.ID, "call_") || res.Usage.CompletionTokens != int64(len(splitPieces(wantArgs, chatPieceSize))) {
		t.Fatalf("call %s", res.RawJSON())
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	deltas := 0
	for stream.Next() {
		cur := stream.Current()
		if !acc.AddChunk(cur) {
			t.Fatalf("accumulator refused %s", cur.RawJSON())
		}
		if len(cur.Choices) > 0 && len(cur.Choices[0].Delta.ToolCalls) > 0 {
			deltas++
		}
		if tc, ok := acc.JustFinishedToolCall(); ok && (tc.Name != "get_weather" || tc.Arguments != wantArgs) {
			t.Fatalf("finished call %+v", tc)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	got := acc.Choices[0]
	if got.FinishReason != "tool_calls" || len(got.Message.ToolCalls) != 1 || got.Message.ToolCalls[0].Function.Arguments != wantArgs ||
		got.Message.ToolCalls[0].ID == "" || deltas < 3 || acc.Usage.CompletionTokens == 0 {
		t.Fatalf("accumulated %+v (%d deltas), usage %+v", got, deltas, acc.Usage)
	}

	// The tool's result comes back: the answer is text.
	params.Messages = append(params.Messages, res.Choices[0].Message.ToParam(), openai.ToolMessage("sunny", call.ID))
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	res, err = c.Chat.Completions.New(ctx, params)
	if err != nil || res.Choices[0].FinishReason != "stop" || res.Choices[0].Message.Content != strings.Repeat(" tok", 5) || len(res.Choices[0].Message.ToolCalls) != 0 {
		t.Fatalf("after the tool's result: %v %s", err, res.RawJSON())
	}
	// tool_choice none: text.
	params.Messages = params.Messages[:1]
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	if res, err = c.Chat.Completions.New(ctx, params); err != nil || res.Choices[0].FinishReason != "stop" {
		t.Fatalf("tool_choice none: %v %s", err, res.RawJSON())
	}
	if n := len(st.Requests()); n != 4 {
		t.Fatalf("%d requests", n)
	}
}

func TestSDKChatStructured(t *testing.T) {
	t.Parallel()
	c, _ := sdkClient(t, fast)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "w", Schema: weatherParams, Strict: openai.Bool(true)}}},
	}
	want := `{"city":"stub","days":2}`
	res, err := c.Chat.Completions.New(ctx, params)
	if err != nil || res.Choices[0].Message.Content != want || res.Choices[0].FinishReason != "stop" {
		t.Fatalf("%v %s", err, res.RawJSON())
	}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	for stream.Next() {
		if cur := stream.Current(); len(cur.Choices) > 0 {
			text.WriteString(cur.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || text.String() != want {
		t.Fatalf("streamed %q, %v", text.String(), err)
	}
	// max_tokens cuts structured content as it cuts text.
	params.MaxCompletionTokens = openai.Int(2)
	res, err = c.Chat.Completions.New(ctx, params)
	if err != nil || res.Choices[0].FinishReason != "length" || res.Choices[0].Message.Content != want[:2*chatPieceSize] {
		t.Fatalf("cut: %v %s", err, res.RawJSON())
	}
	params.MaxCompletionTokens = param.Opt[int64]{}
	params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	if res, err = c.Chat.Completions.New(ctx, params); err != nil || !json.Valid([]byte(res.Choices[0].Message.Content)) {
		t.Fatalf("json_object: %v %s", err, res.RawJSON())
	}
}

func responsesTool() responses.ToolUnionParam {
	return responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Parameters: weatherParams, Strict: openai.Bool(true)}}
}

func TestSDKResponsesTools(t *testing.T) {
	t.Parallel()
	c, _ := sdkClient(t, fast)
	ctx := context.Background()
	wantArgs := `{"city":"stub","days":2}`
	params := responses.ResponseNewParams{
		Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
		Tools: []responses.ToolUnionParam{responsesTool()},
	}
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != 1 || res.Output[0].Type != "function_call" {
		t.Fatalf("output %s", res.RawJSON())
	}
	fc := res.Output[0].AsFunctionCall()
	if fc.Name != "get_weather" || fc.Arguments != wantArgs || !strings.HasPrefix(fc.CallID, "call_") || !strings.HasPrefix(fc.ID, "fc_") ||
		fc.Status != "completed" || res.Status != "completed" || res.Usage.OutputTokens == 0 || res.OutputText() != "" {
		t.Fatalf("function call %s", res.RawJSON())
	}

	// Streamed: the item added, argument deltas, done, the item done.
	stream := c.Responses.NewStreaming(ctx, params)
	var types []string
	var args strings.Builder
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch e := ev.AsAny().(type) {
		case responses.ResponseOutputItemAddedEvent:
			if e.Item.Type != "function_call" || e.Item.Name != "get_weather" || e.Item.Arguments.OfString != "" || e.Item.Status != "in_progress" {
				t.Fatalf("added %s", e.RawJSON())
			}
		case responses.ResponseFunctionCallArgumentsDeltaEvent:
			args.WriteString(e.Delta)
		case responses.ResponseFunctionCallArgumentsDoneEvent:
			if e.Arguments != wantArgs || e.ItemID == "" {
				t.Fatalf("done %s", e.RawJSON())
			}
		case responses.ResponseCompletedEvent:
			final = e.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	wantTypes := "response.created response.in_progress response.output_item.added response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.completed"
	if strings.Join(types, " ") != wantTypes || args.String() != wantArgs || final.Output[0].AsFunctionCall().Arguments != wantArgs {
		t.Fatalf("events %v, arguments %q, final %s", types, args.String(), final.RawJSON())
	}

	// The output comes back (the whole history, as Codex sends it): text.
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("weather in Paris?", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemUnionParam{OfFunctionCall: &responses.ResponseFunctionToolCallParam{CallID: fc.CallID, Name: fc.Name, Arguments: fc.Arguments}},
		callOutput(fc.CallID, "sunny"),
	}}
	next, err := c.Responses.New(ctx, params)
	if err != nil || next.OutputText() != strings.Repeat(" tok", 5) {
		t.Fatalf("after the output: %v %s", err, next.RawJSON())
	}
	// Or by previous_response_id with the output alone.
	params.PreviousResponseID = openai.String(res.ID)
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		callOutput(fc.CallID, "sunny")}}
	if next, err = c.Responses.New(ctx, params); err != nil || next.Output[0].Type != "message" {
		t.Fatalf("previous_response_id: %v %s", err, next.RawJSON())
	}
}

func TestSDKResponsesStructured(t *testing.T) {
	t.Parallel()
	c, _ := sdkClient(t, fast)
	ctx := context.Background()
	want := `{"city":"stub","days":2}`
	params := responses.ResponseNewParams{
		Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")},
		Text:  responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigParamOfJSONSchema("w", weatherParams)},
	}
	res, err := c.Responses.New(ctx, params)
	if err != nil || res.OutputText() != want || res.Usage.OutputTokens != int64(len(splitPieces(want, chatPieceSize))) {
		t.Fatalf("%v %s", err, res.RawJSON())
	}
	if f := res.Text.Format; f.Type != "json_schema" || f.Name != "w" {
		t.Fatalf("text.format not echoed: %s", res.RawJSON())
	}
	stream := c.Responses.NewStreaming(ctx, params)
	var text strings.Builder
	for stream.Next() {
		if e, ok := stream.Current().AsAny().(responses.ResponseTextDeltaEvent); ok {
			text.WriteString(e.Delta)
		}
	}
	if err := stream.Err(); err != nil || text.String() != want {
		t.Fatalf("streamed %q, %v", text.String(), err)
	}
}

// TestResponsesReplay: GET responses/{id}?stream=true is the response's
// stream again (the same events), from starting_after when given, and
// replayed deltas are not generated twice.
func TestResponsesReplay(t *testing.T) {
	t.Parallel()
	st, ts := start(t, fast)
	for _, tc := range []struct{ name, body string }{
		{"message", `{"model":"m","input":"hi","stream":true}`},
		{"function_call", `{"model":"m","input":"hi","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := mustPost(t, ts, "/v1/responses", tc.body)
			created := readRespEvents(t, resp)
			id := created[0].Response.ID
			generated := st.Stats().CompletionTokens
			req, _ := http.NewRequest(http.MethodGet, ts.URL+"/v1/responses/"+id+"?stream=true", nil)
			r2, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			replayed := readRespEvents(t, r2)
			if len(replayed) != len(created) {
				t.Fatalf("%d events replayed, %d created", len(replayed), len(created))
			}
			for i := range created {
				if created[i].Type != replayed[i].Type || created[i].Seq != replayed[i].Seq || !reflect.DeepEqual(created[i].Delta, replayed[i].Delta) {
					t.Fatalf("event %d: %+v vs %+v", i, created[i], replayed[i])
				}
			}
			req, _ = http.NewRequest(http.MethodGet, ts.URL+"/v1/responses/"+id+"?stream=true&starting_after=2", nil)
			r3, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if after := readRespEvents(t, r3); len(after) != len(created)-3 || after[0].Seq != 3 {
				t.Fatalf("starting_after=2: %d events, first %+v", len(after), after[0])
			}
			if got := st.Stats().CompletionTokens; got != generated {
				t.Fatalf("a replay generated %d tokens", got-generated)
			}
		})
	}
	if status, _ := do(t, ts, http.MethodGet, "/v1/responses/resp_none?stream=true", ""); status != http.StatusNotFound {
		t.Fatalf("unknown id: %d", status)
	}
}

type respEventSeen struct {
	Type     string  `json:"type"`
	Seq      int     `json:"sequence_number"`
	Delta    *string `json:"delta"`
	Response *struct {
		ID string `json:"id"`
	} `json:"response"`
}

// readRespEvents reads a Responses stream's data lines.
func readRespEvents(t *testing.T, resp *http.Response) []respEventSeen {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	datas, err := newSSE(resp.Body).all()
	if err != nil {
		t.Fatal(err)
	}
	var out []respEventSeen
	for _, d := range datas {
		var ev respEventSeen
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		out = append(out, ev)
	}
	if len(out) == 0 {
		t.Fatal("no events")
	}
	return out
}

func callOutput(callID, output string) responses.ResponseInputItemUnionParam {
	item := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	item.OfFunctionCallOutput.CallID = openai.String(callID)
	return item
}

// TestSDKResponsesCustomTool: a freeform (custom) tool, as Codex offers
// apply_patch, is called with a custom_tool_call whose input is a patch
// in the tool's grammar (whole, and streamed as
// response.custom_tool_call_input.delta/.done); with its output back the
// answer is text. Before, the stub answered in prose.
func TestSDKResponsesCustomTool(t *testing.T) {
	t.Parallel()
	c, _ := sdkClient(t, fast)
	ctx := context.Background()
	wantInput := "*** Begin Patch\n*** Add File: " + StubPatchFile + "\n+" + StubPatchText + "\n*** End Patch\n"
	params := responses.ResponseNewParams{
		Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("use apply_patch to add a file")},
		Tools: []responses.ToolUnionParam{{OfCustom: &responses.CustomToolParam{Name: "apply_patch", Description: openai.String("patch files")}}},
	}
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != 1 || res.Output[0].Type != "custom_tool_call" {
		t.Fatalf("output %s", res.RawJSON())
	}
	call := res.Output[0].AsCustomToolCall()
	if call.Name != "apply_patch" || call.Input != wantInput || !strings.HasPrefix(call.CallID, "call_") {
		t.Fatalf("custom tool call %s", res.RawJSON())
	}

	stream := c.Responses.NewStreaming(ctx, params)
	var types []string
	var in strings.Builder
	for stream.Next() {
		ev := stream.Current()
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch e := ev.AsAny().(type) {
		case responses.ResponseCustomToolCallInputDeltaEvent:
			in.WriteString(e.Delta)
		case responses.ResponseCustomToolCallInputDoneEvent:
			if e.Input != wantInput || e.ItemID == "" {
				t.Fatalf("done %s", e.RawJSON())
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	wantTypes := "response.created response.in_progress response.output_item.added response.custom_tool_call_input.delta " +
		"response.custom_tool_call_input.done response.output_item.done response.completed"
	if strings.Join(types, " ") != wantTypes || in.String() != wantInput {
		t.Fatalf("events %v, input %q", types, in.String())
	}

	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("use apply_patch to add a file", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfCustomToolCall(call.CallID, call.Input, call.Name),
		responses.ResponseInputItemParamOfCustomToolCallOutput(call.CallID, "Done!"),
	}}
	if next, err := c.Responses.New(ctx, params); err != nil || next.Output[0].Type != "message" {
		t.Fatalf("after the output: %v %s", err, next.RawJSON())
	}
}

// TestCodeModeExec: tools offered in an additional_tools input item, in
// namespaces (Codex 0.171 on gpt-6.2-sol), are the stub's tools too; asked
// for apply_patch, the stub calls the freeform exec tool that declares it
// with JavaScript applying its patch.
func TestCodeModeExec(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	body := `{"model":"m","input":[{"type":"additional_tools","tools":[{"type":"namespace","name":"functions","tools":[` +
		`{"type":"custom","name":"exec","description":"declare const tools: { apply_patch(input: string): Promise<unknown>; };"},` +
		`{"type":"function","name":"wait","parameters":{"type":"object"}}]}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Use apply_patch to add a file."}]}]}`
	status, b := do(t, ts, "POST", "/v1/responses", body)
	var res struct {
		Output []struct{ Type, Name, Input string }
	}
	if err := json.Unmarshal(b, &res); status != 200 || err != nil || len(res.Output) != 1 {
		t.Fatalf("%d %s", status, b)
	}
	quoted, _ := json.Marshal(stubPatch)
	if o := res.Output[0]; o.Type != "custom_tool_call" || o.Name != "exec" || o.Input != "await tools.apply_patch("+string(quoted)+");\n" {
		t.Fatalf("output %+v", o)
	}
}
