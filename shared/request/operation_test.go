package request

import (
	"testing"
)

// TestOperations: each row of the table, field by field, as the request
// path reads it.
func TestOperations(t *testing.T) {
	t.Parallel()
	type row struct {
		path, suffix, api, genAI string
		shape                    Shape
		need                     uint8
		needName                 string
		caps                     []CapField
		capField                 CapField
		capRequired              bool
		minCap                   int64
		streams                  bool
		prompt                   string // the first member that is the prompt
		billed, generates        bool
		streamOptions            bool
		bill, floor              string // the meter's first bill and floor events
		creates                  bool
		deployments              bool
		continues, hosted        bool
		counter                  bool
	}
	want := map[Operation]row{
		ChatCompletions: {path: "/v1/chat/completions", suffix: "/chat/completions", api: "Chat Completions", genAI: "chat",
			need: HasMessages, needName: "messages", caps: []CapField{MaxTokens, MaxCompletionTokens}, capField: MaxCompletionTokens,
			streams: true, prompt: "messages", billed: true, generates: true, streamOptions: true, deployments: true},
		Completions: {path: "/v1/completions", suffix: "/completions", api: "Completions", genAI: "text_completion",
			need: HasPrompt, needName: "prompt", caps: []CapField{MaxTokens}, capField: MaxTokens,
			streams: true, prompt: "prompt", billed: true, generates: true, streamOptions: true, deployments: true},
		Embeddings: {path: "/v1/embeddings", suffix: "/embeddings", api: "Embeddings", genAI: "embeddings",
			need: HasInput, needName: "input", streams: true, prompt: "input", billed: true, deployments: true},
		Responses: {path: "/v1/responses", suffix: "/responses", api: "the Responses API", genAI: "chat", shape: ShapeResponses,
			caps: []CapField{MaxOutputTokens}, capField: MaxOutputTokens, minCap: 16,
			streams: true, prompt: "input", billed: true, generates: true, creates: true, continues: true,
			bill: "response.completed", floor: "response.output_text.delta"},
		Messages: {path: "/v1/messages", suffix: "/messages", api: "the Messages API", genAI: "chat", shape: ShapeAnthropic,
			need: HasMessages, needName: "messages", caps: []CapField{MaxTokens}, capField: MaxTokens, capRequired: true,
			streams: true, prompt: "messages", billed: true, generates: true,
			bill: "message_delta", floor: "content_block_delta"},
		CountTokens: {path: "/v1/messages/count_tokens", suffix: "/messages/count_tokens", api: "the Messages API's count_tokens", genAI: "chat",
			shape: ShapeAnthropic, need: HasMessages, needName: "messages", capField: MaxTokens, prompt: "messages", counter: true},
		ResponsesCompact: {path: "/v1/responses/compact", suffix: "/responses/compact", api: "the Responses API's compact", genAI: "chat",
			shape: ShapeResponses, prompt: "input", billed: true, generates: true, continues: true, hosted: true},
		ResponsesInputTokens: {path: "/v1/responses/input_tokens", suffix: "/responses/input_tokens", api: "the Responses API's input_tokens", genAI: "chat",
			shape: ShapeResponses, prompt: "input", continues: true, hosted: true, counter: true},
	}
	ops := Operations()
	if len(ops) != len(want) {
		t.Fatalf("%d operations, %d rows expected", len(ops), len(want))
	}
	paths := map[string]Operation{}
	for i, op := range ops {
		w, ok := want[op]
		if !ok || int(op) != i {
			t.Fatalf("operation %d at %d has no expected row", op, i)
		}
		t.Run(w.path, func(t *testing.T) {
			if prev, dup := paths[op.Path()]; dup {
				t.Errorf("path %s also %d's", op.Path(), prev)
			}
			paths[op.Path()] = op
			if op.Path() != w.path || op.String() != w.path || op.Suffix() != w.suffix || op.API() != w.api || op.GenAIName() != w.genAI {
				t.Errorf("path %q suffix %q api %q gen_ai %q", op.Path(), op.Suffix(), op.API(), op.GenAIName())
			}
			if op.Shape() != w.shape || op.Anthropic() != (w.shape == ShapeAnthropic) {
				t.Errorf("shape %d, anthropic %v", op.Shape(), op.Anthropic())
			}
			if need, name := op.Requires(); need != w.need || name != w.needName {
				t.Errorf("requires %d %q", need, name)
			}
			for f := MaxTokens; f < numCaps; f++ {
				has := false
				for _, c := range w.caps {
					has = has || c == f
				}
				if op.HasCap(f) != has {
					t.Errorf("HasCap(%s) = %v", f, !has)
				}
			}
			if op.HasCaps() != (len(w.caps) > 0) || op.CapField() != w.capField || op.CapRequired() != w.capRequired || op.MinCap() != w.minCap {
				t.Errorf("caps %v, cap field %s, required %v, min %d", op.HasCaps(), op.CapField(), op.CapRequired(), op.MinCap())
			}
			if op.Streams() != w.streams || op.Prompt().Prompt[0] != w.prompt || op.Billed() != w.billed || op.Generates() != w.generates {
				t.Errorf("streams %v, prompt %v, billed %v, generates %v", op.Streams(), op.Prompt().Prompt, op.Billed(), op.Generates())
			}
			if op.StreamOptions() != w.streamOptions || op.Creates() != w.creates || op.OnDeployments() != w.deployments {
				t.Errorf("stream options %v, creates %v, deployments %v", op.StreamOptions(), op.Creates(), op.OnDeployments())
			}
			if m := op.Meter(); first(m.Bill) != w.bill || first(m.Floor) != w.floor {
				t.Errorf("meter bills at %v, floors with %v", m.Bill, m.Floor)
			}
			if op.Continues() != w.continues || op.Hosted() != w.hosted || op.Counts() != w.counter {
				t.Errorf("continues %v, hosted %v, counter %v", op.Continues(), op.Hosted(), op.Counts())
			}
			got, ok := DeploymentOperation(w.suffix[1:])
			if ok != w.deployments || ok && got != op {
				t.Errorf("DeploymentOperation(%q) = %d, %v", w.suffix[1:], got, ok)
			}
		})
	}
	for _, s := range []string{"", "responses", "messages", "chat", "/chat/completions"} {
		if op, ok := DeploymentOperation(s); ok {
			t.Errorf("DeploymentOperation(%q) = %d", s, op)
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestAnswerColumns: every row of the table answers JSON, or an SSE
// stream asked for by "stream": true; stream_format asks none of them
// (a registered row's other kinds: shared/server's speech_test.go).
func TestAnswerColumns(t *testing.T) {
	t.Parallel()
	for _, op := range Operations() {
		if op.Answer() != AnswerJSON || op.AnswerMedia("audio/mpeg") {
			t.Errorf("%s: answer %d", op, op.Answer())
		}
		for _, tc := range []struct {
			body string
			want bool
		}{{`{"model":"m","stream":true}`, true}, {`{"model":"m","stream":false}`, false}, {`{"model":"m","stream_format":"sse"}`, false}} {
			b, err := ParseBody([]byte(tc.body))
			if err != nil || op.AsksStream(&b) != tc.want {
				t.Errorf("%s: %s asks a stream %v (%v)", op, tc.body, !tc.want, err)
			}
		}
	}
}
