package request

import (
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/sse"
)

// Operation is an API operation the gateway proxies: OpenAI's, or
// Anthropic's Messages API. It indexes the operations table,
// so it stays a byte the request path copies freely, and everything the
// gateway does differently for an operation is read from its row instead
// of a switch in each step. Adding an operation is a constant, a row and
// its tests.
type Operation uint8

// Operations the gateway proxies.
const (
	ChatCompletions Operation = iota
	Completions
	Embeddings
	Responses
	// Messages is Anthropic's POST /v1/messages.
	Messages
	// CountTokens is Anthropic's POST /v1/messages/count_tokens: a prompt
	// counted, nothing generated.
	CountTokens
	// ResponsesCompact is the Responses API's POST /v1/responses/compact:
	// a conversation compacted into fewer items (how Codex keeps a long
	// session within the context window), billed like a response.
	ResponsesCompact
	// ResponsesInputTokens is the Responses API's POST
	// /v1/responses/input_tokens: a prompt counted, nothing generated.
	ResponsesInputTokens
	numOperations // the table's own; Register adds more
)

// Shape is the family an operation's answers belong to: what its stream's
// events look like and how the gateway's own errors are written for it.
type Shape uint8

const (
	// ShapeOpenAI is Chat Completions' family: data-only stream events,
	// ended by data: {"error":…}; OpenAI's error JSON.
	ShapeOpenAI Shape = iota
	// ShapeResponses is the Responses API's: named stream events, ended
	// by its own error event; OpenAI's error JSON.
	ShapeResponses
	// ShapeAnthropic is the Messages API's: named stream events and
	// Anthropic's error JSON, in a body and as a stream's error event.
	ShapeAnthropic
)

// Answer is the kind of body an operation answers with when it does not
// stream: what the gateway checks before relaying it and how
// it relays it.
type Answer uint8

const (
	// AnswerJSON is one whole JSON object (application/json or +json),
	// scanned for its usage and id as it is relayed.
	AnswerJSON Answer = iota
	// AnswerBinary is bytes of the row's media types (audio/…), relayed
	// as they come: nothing in them is read.
	AnswerBinary
)

// Trigger is the body field that asks an operation for an SSE stream.
type Trigger uint8

const (
	// TriggerStream is "stream": true (chat, completions, Responses,
	// Messages).
	TriggerStream Trigger = iota
	// TriggerStreamFormat is "stream_format": "sse" (OpenAI's audio
	// speech; any other format is the row's binary answer).
	TriggerStreamFormat
)

// operation is one row of the table.
type operation struct {
	// path is the public path: /v1, the API root, and below it the
	// suffix every backend's root shares.
	path string
	// api names the API in a refusal ("served on a surface without …").
	api string
	// genAI is its gen_ai.operation.name: the Responses and Messages APIs
	// are chats, as the semantic conventions name OpenAI's.
	genAI string
	shape Shape
	// need is the body field the operation requires (a Has… bit; 0: none)
	// and needName its name.
	need     uint8
	needName string
	// caps are the output-cap fields its body may have (a bit per
	// CapField). A cap field an operation does not have is read by some
	// backends and ignored by others (vLLM's chat ignores
	// max_output_tokens), so the gateway refuses it rather than trust it.
	caps uint8
	// capField is the field a budget's output cap is written into where
	// the backend's kind does not read another (upstream.Target.CapField).
	capField CapField
	// capRequired: the request must name its cap (the Messages API's
	// max_tokens).
	capRequired bool
	// minCap is the least cap the API accepts: a budget with less left
	// refuses rather than forward a cap the backend answers with 400.
	minCap int64
	// noStream: the operation has no stream (count_tokens).
	noStream bool
	// answer is what it answers with when not streaming, media the
	// media-type prefixes a binary answer may have; trigger the body
	// field that asks for a stream.
	answer  Answer
	media   []string
	trigger Trigger
	// features and state are its columns of the server-side features
	// (features.go) and stored-state (state.go) rules.
	features featureRule
	state    stateRule
	// prompt is how its body reaches the model (prompt.Body): the members
	// that never do, the members that are the prompt, the members that
	// bring content the body does not hold. Every other member counts as
	// text: the prompt bound is deny-by-default.
	prompt prompt.Body
	// fields are the top-level members it forwards to every backend
	// kind (fields.go): what no list names is dropped or refused.
	fields []string
	// unbilled: it bills nothing, so no budget reserves for it
	// (count_tokens); noOutput: it generates nothing (embeddings,
	// count_tokens).
	unbilled, noOutput bool
	// streamOptions: its stream reports usage only when asked with
	// stream_options.include_usage, which the gateway adds when the
	// client did not (the Responses API's stream carries usage in
	// response.completed, and Azure refuses stream_options there).
	streamOptions bool
	// meter is its stream's metering (sse.Meter): which event's usage is
	// the bill, and which events floor the output. The zero meter is a
	// data-only stream's: the usage chunk is the bill and every content
	// chunk floors the output.
	meter sse.Meter
	// creates: its answer is a stored response whose owner the gateway
	// records, and its body may continue one (previous_response_id).
	creates bool
	// counter is the operation that counts its input tokens exactly
	// (hasCounter): a budget asks it before refusing a prompt bound the
	// tenant cannot afford.
	counter    Operation
	hasCounter bool
	// deployments: Azure OpenAI's deployments surface serves it, at
	// /openai/deployments/{deployment}{suffix}.
	deployments bool
	// continues: its body may continue a stored response
	// (previous_response_id) or name stored state (conversation,
	// item_reference), which the gateway checks the tenant owns, as it
	// does for an operation that creates one; its answer is not stored.
	continues bool
	// hosted: only OpenAI's API and Azure's v1 surface serve it; vLLM's
	// OpenAI-compatible server does not.
	hosted bool
	// counts: it counts a prompt for the caller (count_tokens,
	// input_tokens): a client sends many at once (Claude Code's /context
	// about 35), so it draws a fraction of a request from the tenant's
	// bucket.
	counts bool
}

// operations is the table, one row per Operation.
var operations = []operation{
	ChatCompletions: {path: "/v1/chat/completions", api: "Chat Completions", genAI: "chat",
		need: HasMessages, needName: "messages", caps: capBits(MaxTokens, MaxCompletionTokens), capField: MaxCompletionTokens,
		fields: chatFields, prompt: chatPrompt, streamOptions: true, deployments: true,
		features: featDeclared | featChatTools | featFileIDs, state: stateDeclared | stateRequestID},
	Completions: {path: "/v1/completions", api: "Completions", genAI: "text_completion",
		need: HasPrompt, needName: "prompt", caps: capBits(MaxTokens), capField: MaxTokens,
		fields: completionsFields, prompt: completionsPrompt, streamOptions: true, deployments: true,
		features: featDeclared, state: stateDeclared | stateRequestID},
	Embeddings: {path: "/v1/embeddings", api: "Embeddings", genAI: "embeddings",
		need: HasInput, needName: "input", fields: embeddingsFields, prompt: embeddingsPrompt, noOutput: true, deployments: true,
		features: featDeclared, state: stateDeclared | stateRequestID},
	// input may be absent (a prompt template, a continued response).
	Responses: {path: "/v1/responses", api: "the Responses API", genAI: "chat", shape: ShapeResponses,
		caps: capBits(MaxOutputTokens), capField: MaxOutputTokens, minCap: 16, // OpenAI's least max_output_tokens
		fields: responsesFields, prompt: responsesPrompt, creates: true, meter: responsesMeter, counter: ResponsesInputTokens, hasCounter: true,
		features: featDeclared | featResponsesTools | featFileIDs, state: stateDeclared | stateRequestID | stateInputItems | statePrompt},
	Messages: {path: "/v1/messages", api: "the Messages API", genAI: "chat", shape: ShapeAnthropic,
		need: HasMessages, needName: "messages", caps: capBits(MaxTokens), capField: MaxTokens, capRequired: true,
		fields: messagesFields, prompt: messagesPrompt, meter: messagesMeter, counter: CountTokens, hasCounter: true,
		features: featDeclared | featMessagesTools | featFileIDs, state: stateDeclared | stateRequestID},
	CountTokens: {path: "/v1/messages/count_tokens", api: "the Messages API's count_tokens", genAI: "chat", shape: ShapeAnthropic,
		need: HasMessages, needName: "messages", capField: MaxTokens, noStream: true,
		fields: countTokensFields, prompt: messagesPrompt, unbilled: true, noOutput: true, counts: true,
		features: featDeclared | featMessagesTools | featFileIDs, state: stateDeclared | stateRequestID},
	// Compaction has no output cap in its API (no budget cap is written),
	// and no stream.
	ResponsesCompact: {path: "/v1/responses/compact", api: "the Responses API's compact", genAI: "chat", shape: ShapeResponses,
		noStream: true, fields: compactFields, prompt: responsesPrompt, continues: true, hosted: true,
		features: featDeclared | featResponsesTools | featFileIDs, state: stateDeclared | stateRequestID | stateInputItems | statePrompt},
	ResponsesInputTokens: {path: "/v1/responses/input_tokens", api: "the Responses API's input_tokens", genAI: "chat", shape: ShapeResponses,
		noStream: true, fields: inputTokensFields, prompt: responsesPrompt, unbilled: true, noOutput: true, continues: true, hosted: true, counts: true,
		features: featDeclared | featResponsesTools | featFileIDs, state: stateDeclared | stateRequestID | stateInputItems | statePrompt},
}

// The prompt column: what of each API's body reaches the model. A member
// no list names counts as text, its keys included.
var (
	// openAINever: the members of OpenAI's APIs (and vLLM's sampling
	// extensions) that never reach the model: the model, the stream
	// switches, sampling, output caps and n, ids and metadata.
	openAINever = []string{"model", "stream", "stream_options", "n", "best_of", "max_tokens",
		"max_completion_tokens", "max_output_tokens", "temperature", "top_p", "top_k", "min_p",
		"presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "logprobs",
		"top_logprobs", "user", "seed", "metadata", "store", "service_tier", "parallel_tool_calls",
		"reasoning_effort", "stop", "encoding_format", "dimensions", "echo", "safety_identifier",
		"prompt_cache_key", "truncation", "include", "background", "verbosity", "max_tool_calls"}
	chatPrompt = prompt.Body{Never: openAINever, Prompt: []string{"messages"},
		Unbounded: []string{"web_search_options"}}
	// completionsPrompt: prompt may batch prompts, each with its own n
	// completions.
	completionsPrompt = prompt.Body{Never: openAINever, Prompt: []string{"prompt", "suffix"}, Batches: true}
	embeddingsPrompt  = prompt.Body{Never: openAINever, Prompt: []string{"input"}}
	// responsesPrompt: prompt names a stored template, and
	// previous_response_id and conversation stored context, that the
	// body does not hold.
	responsesPrompt = prompt.Body{Never: openAINever, Prompt: []string{"input", "instructions"},
		Unbounded: []string{"previous_response_id", "conversation", "prompt"}}
	// messagesPrompt: Anthropic's members, and OpenAI's that a
	// translating backend reads; images and documents carry a source.
	messagesPrompt = prompt.Body{Never: append([]string{"thinking", "stop_sequences", "tool_choice"}, openAINever...),
		Prompt: []string{"messages", "system"}, Unbounded: []string{"mcp_servers", "container"}, Sources: true}
)

// The named-event streams' meters (the operations table's meter column).
var (
	// responsesMeter: the Responses API's stream ends at its terminal
	// events (there is no [DONE]), its ".delta" events carry tokens; it
	// bills at its terminal event's
	// response.usage; its text, refusal, reasoning and tool-argument
	// deltas each carry at least one token.
	responsesMeter = sse.Meter{
		End:   []string{"response.completed", "response.incomplete", "response.failed"},
		Error: "error", TokenSuffix: ".delta",
		Bill:   []string{"response.completed", "response.incomplete", "response.failed"},
		BillAt: sse.InResponse,
		Floor: []string{"response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta",
			"response.reasoning_summary_text.delta", "response.function_call_arguments.delta"},
	}
	// messagesMeter: the Messages API's stream ends at message_stop, its
	// content_block_delta events carry tokens; it bills at message_delta (cumulative
	// output_tokens; message_start carries input and cache counts, and an
	// output of 1 that is no bill); a content_block_delta with text,
	// thinking or tool input carries at least one token.
	messagesMeter = sse.Meter{
		End: []string{"message_stop"}, Error: "error", Tokens: []string{"content_block_delta"},
		Bill: []string{"message_delta"}, BillAt: sse.TopLevel,
		Start: "message_start", StartAt: sse.InMessage,
		Floor:       []string{"content_block_delta"},
		FloorDeltas: []sse.Delta{{Type: "text_delta", Field: "text"}, {Type: "thinking_delta", Field: "thinking"}, {Type: "input_json_delta", Field: "partial_json"}},
	}
)

func capBits(fields ...CapField) uint8 {
	var b uint8
	for _, f := range fields {
		b |= 1 << f
	}
	return b
}

// Operations lists every operation, in table order, registered ones
// last. The list is shared (the request path reads it without
// allocating): callers must not write to it.
func Operations() []Operation { return all[:len(all):len(all)] }

// all is Operations' list, grown by Register.
var all = func() []Operation {
	ops := make([]Operation, len(operations))
	for i := range ops {
		ops[i] = Operation(i)
	}
	return ops
}()

// Spec is an operation defined outside the table, for Register: a
// test-only operation, as a test-only backend kind is registered from
// its own file. Its fields are the row's columns of the same
// names; what it leaves zero is the zero row's (JSON in, JSON or a
// data-only stream out, billed, no caps).
type Spec struct {
	Path, API, GenAI string
	Shape            Shape
	// Need is the body field it requires (a Has… bit) and NeedName its
	// name.
	Need     uint8
	NeedName string
	Answer   Answer
	Media    []string
	Trigger  Trigger
	Meter    sse.Meter
	Prompt   prompt.Body
	// Fields are the top-level members it forwards (fields.go); what
	// the list does not name is dropped or refused.
	Fields []string
	// Unbilled: no budget reserves for it; NoOutput: it generates no
	// output tokens; Hosted: vLLM does not serve it.
	Unbilled, NoOutput, Hosted bool
}

// Register adds an operation to the table and returns it; the server's
// routes, checks, budgets and relay then read its row as they read the
// table's. Call it from an init function: the table is read without a
// lock once requests are served.
func Register(s Spec) Operation {
	operations = append(operations, operation{path: s.Path, api: s.API, genAI: s.GenAI, shape: s.Shape,
		need: s.Need, needName: s.NeedName, answer: s.Answer, media: s.Media, trigger: s.Trigger,
		meter: s.Meter, prompt: s.Prompt, fields: s.Fields, unbilled: s.Unbilled, noOutput: s.NoOutput, hosted: s.Hosted,
		features: featDeclared, state: stateDeclared | stateRequestID})
	op := Operation(len(operations) - 1)
	all = append(all, op)
	fieldSets = append(fieldSets, setOf(s.Fields))
	return op
}

// DeploymentOperation is the operation an Azure deployment route names
// after /openai/deployments/{deployment}/ ("chat/completions").
func DeploymentOperation(suffix string) (Operation, bool) {
	for o := range Operation(len(operations)) {
		if o.OnDeployments() && o.Suffix()[1:] == suffix {
			return o, true
		}
	}
	return 0, false
}

// String is the operation's public path.
func (o Operation) String() string { return o.Path() }

// Path is the operation's public path (/v1/chat/completions).
func (o Operation) Path() string { return operations[o].path }

// Suffix is the operation's path below an API root (/chat/completions).
func (o Operation) Suffix() string { return operations[o].path[len("/v1"):] }

// API names the operation's API for a person ("the Responses API").
func (o Operation) API() string { return operations[o].api }

// GenAIName is the operation's gen_ai.operation.name.
func (o Operation) GenAIName() string { return operations[o].genAI }

// Shape is the family of the operation's answers and errors.
func (o Operation) Shape() Shape { return operations[o].shape }

// Anthropic reports whether op is one of Anthropic's Messages API, whose
// errors and stream events have Anthropic's shapes.
func (o Operation) Anthropic() bool { return operations[o].shape == ShapeAnthropic }

// Requires is the body field op requires, as a Has… bit and its name;
// need is 0 when it requires none.
func (o Operation) Requires() (need uint8, name string) {
	return operations[o].need, operations[o].needName
}

// HasCap reports whether op's request has the output-cap field f: chat
// reads max_completion_tokens and its deprecated max_tokens, legacy
// completions max_tokens, the Responses API max_output_tokens, the
// Messages API max_tokens (which it requires), and embeddings and
// count_tokens none.
func (o Operation) HasCap(f CapField) bool { return operations[o].caps&(1<<f) != 0 }

// HasCaps reports whether op's request has any output-cap field.
func (o Operation) HasCaps() bool { return operations[o].caps != 0 }

// CapField is the field an output cap is written into unless the
// backend's kind reads another (upstream.Target.CapField).
func (o Operation) CapField() CapField { return operations[o].capField }

// CapRequired reports whether op's request must name its cap.
func (o Operation) CapRequired() bool { return operations[o].capRequired }

// MinCap is the least output cap op's API accepts (0: any).
func (o Operation) MinCap() int64 { return operations[o].minCap }

// Answer is the kind of body op answers with when it does not stream.
func (o Operation) Answer() Answer { return operations[o].answer }

// AnswerMedia reports whether media type mt (lower case, without
// parameters) is one op's binary answer may have.
func (o Operation) AnswerMedia(mt string) bool {
	for _, m := range operations[o].media {
		if len(mt) >= len(m) && mt[:len(m)] == m {
			return true
		}
	}
	return false
}

// AsksStream reports whether body b asks op for an SSE stream, by the
// row's trigger: "stream": true, or "stream_format": "sse".
func (o Operation) AsksStream(b *Body) bool {
	if operations[o].trigger == TriggerStreamFormat {
		return b.StreamFormat == "sse"
	}
	return b.Stream
}

// Streams reports whether op may be asked to stream.
func (o Operation) Streams() bool { return !operations[o].noStream }

// Prompt is how op's body reaches the model, for its prompt bound: a
// copy of the row's; its slices are the table's, shared and never
// written.
func (o Operation) Prompt() prompt.Body { return operations[o].prompt }

// Billed reports whether op generates tokens a budget reserves for.
func (o Operation) Billed() bool { return !operations[o].unbilled }

// Generates reports whether op generates output tokens.
func (o Operation) Generates() bool { return !operations[o].noOutput }

// StreamOptions reports whether op's stream carries usage only when
// stream_options.include_usage asks for it.
func (o Operation) StreamOptions() bool { return operations[o].streamOptions }

// Meter is op's stream metering: which event is the bill, which events
// floor the output. It is a copy of the row's; its slices are
// the table's, shared and never written.
func (o Operation) Meter() sse.Meter { return operations[o].meter }

// Counter is the operation that counts op's input tokens exactly (the
// Messages API's count_tokens); ok is false for an operation without one.
func (o Operation) Counter() (c Operation, ok bool) {
	return operations[o].counter, operations[o].hasCounter
}

// Creates reports whether op's answer is a stored response (the Responses
// API).
func (o Operation) Creates() bool { return operations[o].creates }

// OnDeployments reports whether Azure OpenAI's deployments surface serves
// op.
func (o Operation) OnDeployments() bool { return operations[o].deployments }

// Continues reports whether op's body may continue a stored response or
// name stored state, which the gateway checks the tenant owns: every
// operation that creates one, and compact and input_tokens.
func (o Operation) Continues() bool { return operations[o].creates || operations[o].continues }

// Hosted reports whether only OpenAI's API and Azure's v1 surface serve
// op (not vLLM).
func (o Operation) Hosted() bool { return operations[o].hosted }

// Counts reports whether op counts a prompt for the caller
// (count_tokens, input_tokens), which the limiter weighs as a fraction
// of a request.
func (o Operation) Counts() bool { return operations[o].counts }
