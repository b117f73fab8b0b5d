package stub

// Chat Completions as agents use it: a tool call (message.tool_calls,
// finish_reason "tool_calls"; streamed as tool_calls deltas, the arguments
// in pieces) when the request offers tools and the conversation does not
// end with a tool's result, and structured output (response_format
// json_schema or json_object): content that is JSON satisfying the schema.
// These answers are off the benchmark's path: their chunks are encoded
// with encoding/json up front.

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// chatTool is a tool of a chat request.
type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// chatCall is the tool call of a chat answer: one per choice, each with
// its own id.
type chatCall struct {
	name, args string
	ids        []string
}

// chatToolCall is a tool call as a message (whole) or a delta (streamed)
// carries it.
type chatToolCall struct {
	Index    *int             `json:"index,omitempty"` // deltas only
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function chatToolFunction `json:"function"`
}

type chatToolFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// json is choice c's call: whole, or as the opening delta (id, type, name
// and empty arguments).
func (cc *chatCall) json(c int, whole bool) chatToolCall {
	tc := chatToolCall{ID: cc.ids[c], Type: "function", Function: chatToolFunction{Name: cc.name, Arguments: cc.args}}
	if !whole {
		zero := 0
		tc.Index, tc.Function.Arguments = &zero, ""
	}
	return tc
}

// chatPieceSize is the bytes of a tool call's arguments or of structured
// content per streamed delta: one token each.
const chatPieceSize = 4

// agentAnswer makes a a tool call or structured content when req asks for
// one: a call of pickTool's tool, with arguments from its parameters
// schema, unless tool_choice is "none" or the last message is a tool's
// result or a control prompt (isControlPrompt); else with response_format json_schema, JSON from the schema
// (json_object: {"answer":"stub"}).
func (a *answer) agentAnswer(req request) {
	if len(req.Tools) > 0 && len(req.Messages) > 0 {
		last := req.Messages[len(req.Messages)-1]
		var m struct {
			Role string `json:"role"`
		}
		_ = json.Unmarshal(last, &m)
		forced, none := chatToolChoice(req.ToolChoice)
		names := make([]string, len(req.Tools))
		for i, t := range req.Tools {
			if t.Type == "function" || t.Type == "" {
				names[i] = t.Function.Name
			}
		}
		if i := pickTool(names, last, forced); i >= 0 && !none && m.Role != "tool" && m.Role != "function" && !isControlPrompt(last) {
			cc := &chatCall{name: names[i], args: schemaJSON(req.Tools[i].Function.Parameters)}
			for range max(a.n, 1) {
				cc.ids = append(cc.ids, "call_"+newID("")[:24])
			}
			a.call, a.pieces, a.finish = cc, splitPieces(cc.args, chatPieceSize), "tool_calls"
			a.tokens = len(a.pieces)
			return
		}
	}
	rf := req.ResponseFormat
	if rf == nil {
		return
	}
	var content string
	switch rf.Type {
	case "json_schema":
		content = "{}"
		if rf.JSONSchema != nil {
			content = schemaJSON(rf.JSONSchema.Schema)
		}
	case "json_object":
		content = `{"answer":"stub"}`
	default:
		return
	}
	a.pieces = splitPieces(content, chatPieceSize)
	a.tokens = len(a.pieces)
}

// chatToolChoice reads tool_choice: the function it forces, and whether
// it is "none".
func chatToolChoice(raw json.RawMessage) (forced string, none bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return "", s == "none"
	}
	var o struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		Name string `json:"name"` // the Responses API's shape
	}
	_ = json.Unmarshal(raw, &o)
	if o.Function.Name != "" {
		return o.Function.Name, false
	}
	return o.Name, false
}

// text is choice c's content: none for a call, the pieces, or the words.
func (a answer) text(c int) string {
	switch {
	case a.call != nil:
		return ""
	case a.pieces != nil:
		return strings.Join(a.pieces, "")
	}
	return a.wd.text(a.seed, c, a.tokens)
}

type chatChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Choices []chunkChoice   `json:"choices"`
	Usage   json.RawMessage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	ToolCalls []chatToolCall  `json:"tool_calls,omitempty"`
}

// chunkStream is a chat stream of pre-rendered chunks: per step, one
// chunk of each choice (the role chunk, a delta per piece, the finish
// chunk), then the usage chunk when asked for, then [DONE].
type chunkStream struct {
	events   [][]byte
	n, steps int // choices, steps per choice
	first    time.Time
	interval time.Duration
}

func (cs *chunkStream) count() int { return len(cs.events) }

func (cs *chunkStream) step(i int) int {
	if i >= cs.n*cs.steps {
		return -1
	}
	return i / cs.n
}

func (cs *chunkStream) due(i int) time.Time {
	switch st := cs.step(i); {
	case st == 0:
		return cs.first
	case st > 0 && st < cs.steps-1:
		return cs.first.Add(time.Duration(st-1) * cs.interval)
	}
	return time.Time{}
}

func (cs *chunkStream) tokensAt(i int) int {
	if st := cs.step(i); st > 0 && st < cs.steps-1 {
		return 1
	}
	return 0
}

func (cs *chunkStream) appendAt(dst []byte, i int, _ int64) []byte {
	return append(dst, cs.events[i]...)
}

// streamChunks streams a tool call or fixed content as chat chunks.
func (s *Server) streamChunks(w http.ResponseWriter, r *http.Request, a answer, f Fault, sh shape, arrived time.Time) {
	n := max(a.n, 1)
	cs := &chunkStream{n: n, steps: len(a.pieces) + 2, first: arrived.Add(sh.ttft), interval: sh.interval}
	var usageNull json.RawMessage
	if a.includeUsage {
		usageNull = json.RawMessage("null")
	}
	render := func(choices []chunkChoice, u json.RawMessage) []byte {
		data, err := json.Marshal(chatChunk{ID: a.id, Object: "chat.completion.chunk", Created: a.created, Model: a.model, Choices: choices, Usage: u})
		if err != nil { // unreachable: the stub's own values
			panic(http.ErrAbortHandler)
		}
		return []byte("data: " + string(data) + "\n\n")
	}
	for st := range cs.steps {
		for c := range n {
			ch := chunkChoice{Index: c}
			switch {
			case st == 0:
				ch.Delta.Role, ch.Delta.Content = "assistant", json.RawMessage(`""`)
				if a.call != nil {
					ch.Delta.Content, ch.Delta.ToolCalls = json.RawMessage("null"), []chatToolCall{a.call.json(c, false)}
				}
			case st < cs.steps-1:
				piece := a.pieces[st-1]
				if a.call != nil {
					zero := 0
					ch.Delta.ToolCalls = []chatToolCall{{Index: &zero, Function: chatToolFunction{Arguments: piece}}}
				} else {
					ch.Delta.Content, _ = json.Marshal(piece)
				}
			default:
				ch.FinishReason = &a.finish
			}
			cs.events = append(cs.events, render([]chunkChoice{ch}, usageNull))
		}
	}
	if a.includeUsage {
		u, _ := json.Marshal(usage{a.promptTokens, a.completionTokens(), a.promptTokens + a.completionTokens()})
		cs.events = append(cs.events, render([]chunkChoice{}, u))
	}
	cs.events = append(cs.events, []byte(doneEvent))

	end := endCanceled
	rc, ok := s.beginStream(w)
	defer func() { s.endStream(end) }()
	if !ok {
		return
	}
	var buf []byte
	s.pump(w, r, rc, f, cs, streamError, &buf, &end)
}
