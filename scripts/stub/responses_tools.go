package stub

// The Responses API as agents use it: a function_call output item when the
// request offers function tools and its input does not end with a tool's
// output (streamed as response.output_item.added,
// response.function_call_arguments.delta…, .done, response.output_item.done),
// and structured output (text.format json_schema or json_object): a message
// whose text is JSON satisfying the schema. GET responses/{id}?stream=true
// replays a stored response as its stream.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"
)

// respAgent is what an agent's request gets instead of the words: a call,
// or the text of structured output, in pieces (a token each).
type respAgent struct {
	call   *outputItem
	pieces []string
}

// toolOutputs are the input item types that carry a tool's result: the
// tool ran, the answer is text.
var toolOutputs = map[string]bool{
	"function_call_output":    true,
	"custom_tool_call_output": true,
	"local_shell_call_output": true,
	"mcp_call_output":         true,
}

// agentAnswer is req's call (pickTool over its function tools, arguments
// from the tool's parameters schema), unless tool_choice is "none" or the
// input's last item is a tool's output; else with text.format json_schema,
// JSON from the schema (json_object: {"answer":"stub"}); else nothing.
func (req responsesRequest) agentAnswer() respAgent {
	var tools []struct {
		Type       string          `json:"type"`
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	}
	_ = json.Unmarshal(req.Tools, &tools)
	last := bytes.TrimSpace(req.Input)
	var items []json.RawMessage
	if json.Unmarshal(req.Input, &items) == nil && len(items) > 0 {
		last = items[len(items)-1]
	}
	var lastItem struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(last, &lastItem)
	forced, none := chatToolChoice(req.ToolChoice)
	names := make([]string, len(tools))
	for i, t := range tools {
		if t.Type == "function" {
			names[i] = t.Name
		}
	}
	if i := pickTool(names, last, forced); i >= 0 && !none && !toolOutputs[lastItem.Type] {
		args := schemaJSON(tools[i].Parameters)
		return respAgent{
			call: &outputItem{ID: newID("fc_"), Type: "function_call", Status: "completed",
				CallID: "call_" + newID("")[:24], Name: names[i], Arguments: args},
			pieces: splitPieces(args, chatPieceSize),
		}
	}
	var text struct {
		Format struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	}
	_ = json.Unmarshal(req.Text, &text)
	switch text.Format.Type {
	case "json_schema":
		return respAgent{pieces: splitPieces(schemaJSON(text.Format.Schema), chatPieceSize)}
	case "json_object":
		return respAgent{pieces: splitPieces(`{"answer":"stub"}`, chatPieceSize)}
	}
	return respAgent{}
}

// skipEvents is src from its event after: what GET …?stream=true with
// starting_after sends.
type skipEvents struct {
	src   eventSource
	after int // events 0..after are left out
}

func (se skipEvents) count() int          { return max(se.src.count()-se.after-1, 0) }
func (se skipEvents) due(i int) time.Time { return se.src.due(i + se.after + 1) }
func (se skipEvents) tokensAt(i int) int  { return se.src.tokensAt(i + se.after + 1) }
func (se skipEvents) appendAt(dst []byte, i int, now int64) []byte {
	return se.src.appendAt(dst, i+se.after+1, now)
}

// replayResponse answers GET responses/{id}?stream=true: the response's
// stream as created, each event at the time it was due then (a background
// response still in progress streams as it completes), after
// starting_after when given. A cancelled response's stream is its
// response.created and response.in_progress, cancelled. Replayed deltas
// are not counted as generated again.
func (s *Server) replayResponse(w http.ResponseWriter, r *http.Request, f Fault, rs *respStream, cancelled bool, after int) {
	rs.replay, rs.cancelled = true, cancelled
	end := endCanceled
	rc, ok := s.beginStream(w)
	defer func() { s.endStream(end) }()
	if !ok {
		return
	}
	var buf []byte
	s.pump(w, r, rc, f, skipEvents{src: rs, after: after}, respStreamError, &buf, &end)
}
