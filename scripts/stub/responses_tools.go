package stub

// The Responses API as agents use it: a function_call output item when the
// request offers function tools and its input does not end with a tool's
// output (streamed as response.output_item.added,
// response.function_call_arguments.delta…, .done, response.output_item.done),
// a custom_tool_call for a freeform (custom) tool such as Codex's
// apply_patch (response.custom_tool_call_input.delta…, .done),
// structured output (text.format json_schema or json_object): a message
// whose text is JSON satisfying the schema, and for an input ending with a
// compaction_trigger item (Codex's remote compaction) one compaction item.
// GET responses/{id}?stream=true replays a stored response as its stream.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// respAgent is what an agent's request gets instead of the words: a call
// (or a compaction item), or the text of structured output, in pieces (a
// token each).
type respAgent struct {
	call   *outputItem
	pieces []string
}

// compaction reports whether the answer is a compaction item.
func (a respAgent) compaction() bool { return a.call != nil && a.call.Type == "compaction" }

// A compaction's output: its item's opaque content (a client sends it back
// as an input item) and the output tokens it is billed.
const (
	compactionContent = "stub-compaction"
	compactionTokens  = 8
)

// toolOutputs are the input item types that carry a tool's result: the
// tool ran, the answer is text.
var toolOutputs = map[string]bool{
	"function_call_output":    true,
	"custom_tool_call_output": true,
	"local_shell_call_output": true,
	"mcp_call_output":         true,
}

// agentAnswer is req's compaction item when its input ends with a
// compaction_trigger; else its call (pickTool over its function tools,
// arguments from the tool's parameters schema), unless tool_choice is
// "none" or the input's last item is a tool's output, a compaction or a
// control prompt (isControlPrompt); else
// with text.format json_schema,
// JSON from the schema (json_object: {"answer":"stub"}); else nothing.
func (req responsesRequest) agentAnswer() respAgent {
	var tools []respTool
	_ = json.Unmarshal(req.Tools, &tools)
	last := bytes.TrimSpace(req.Input)
	var items []json.RawMessage
	if json.Unmarshal(req.Input, &items) == nil && len(items) > 0 {
		last = items[len(items)-1]
	}
	tools = flatTools(append(tools, additionalTools(items)...))
	var lastItem struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(last, &lastItem)
	if lastItem.Type == "compaction_trigger" {
		// Codex's remote compaction (v2): the conversation so far ends
		// with this marker, and the answer is one compaction item.
		return respAgent{call: &outputItem{ID: newID("cmp_"), Type: "compaction", EncryptedContent: compactionContent}}
	}
	forced, none := chatToolChoice(req.ToolChoice)
	names := make([]string, len(tools))
	for i, t := range tools {
		if t.Type == "function" || t.Type == "custom" {
			names[i] = t.Name
		}
	}
	// A compaction item last is the work so far, summarized (Codex
	// continues a turn with it): the answer is text, as after a tool's
	// output, or an agent would compact and call again for ever.
	// So is a summary asked for, or a window that continues from one
	// (control.go).
	answered := toolOutputs[lastItem.Type] || lastItem.Type == "compaction" || isControlPrompt(last)
	if i := pickTool(names, last, forced); i >= 0 && !none && !answered {
		if tools[i].Type == "custom" {
			// A freeform tool (Codex's apply_patch): its input is text
			// in the tool's own grammar, not JSON arguments.
			in := customInput(tools[i], last)
			return respAgent{
				call: &outputItem{ID: newID("ctc_"), Type: "custom_tool_call", Status: "completed",
					CallID: "call_" + newID("")[:24], Name: names[i], Arguments: in},
				pieces: splitPieces(in, chatPieceSize),
			}
		}
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

// StubPatchFile is the file the stub's apply_patch call adds, and
// StubPatchText its one line: what an agent test checks on disk.
const (
	StubPatchFile = "stub.txt"
	StubPatchText = "written by the stub's apply_patch"
)

// respTool is one tool a Responses request offers; a namespace holds
// tools of its own.
type respTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Tools       []respTool      `json:"tools"`
}

// additionalTools are the tools of the input's additional_tools items:
// Codex 0.171 offers its tools there, in namespaces, for the models it
// runs in code mode (gpt-6.2-sol).
func additionalTools(items []json.RawMessage) []respTool {
	var out []respTool
	for _, raw := range items {
		var it struct {
			Type  string     `json:"type"`
			Tools []respTool `json:"tools"`
		}
		if json.Unmarshal(raw, &it) == nil && it.Type == "additional_tools" {
			out = append(out, it.Tools...)
		}
	}
	return out
}

// flatTools lists tools with each namespace's tools in its place.
func flatTools(tools []respTool) []respTool {
	var out []respTool
	for _, t := range tools {
		if t.Type == "namespace" {
			out = append(out, flatTools(t.Tools)...)
			continue
		}
		out = append(out, t)
	}
	return out
}

// stubPatch adds StubPatchFile, in apply_patch's grammar.
const stubPatch = "*** Begin Patch\n*** Add File: " + StubPatchFile + "\n+" + StubPatchText + "\n*** End Patch\n"

// customInput is a freeform tool call's input: for apply_patch the patch
// that adds StubPatchFile; for Codex's code-mode exec tool, when the
// request asks for apply_patch and exec offers it, JavaScript that calls
// it with that patch; else a word.
func customInput(t respTool, last []byte) string {
	switch {
	case t.Name == "apply_patch":
		return stubPatch
	case t.Name == "exec" && bytes.Contains(last, []byte("apply_patch")) && strings.Contains(t.Description, "apply_patch("):
		quoted, _ := json.Marshal(stubPatch)
		return "await tools.apply_patch(" + string(quoted) + ");\n"
	}
	return "stub"
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

// compactResponse answers POST responses/compact as OpenAI does: a
// response.compaction object whose output is the input's user messages
// (as input_items lists them) followed by one compaction item (its
// encrypted_content opaque to the client, which sends it back as input),
// with usage: the prompt counted, a few output tokens.
func (s *Server) compactResponse(w http.ResponseWriter, body []byte) {
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Model == "" {
		writeError(w, http.StatusBadRequest, "stub: compact needs a JSON body with a model", "invalid_request_error", "invalid_request")
		return
	}
	items, _, err := responseInputItems(req.Input)
	if err != nil {
		writeParamError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "input", "")
		return
	}
	var output []json.RawMessage
	for _, it := range items {
		var m struct{ Type, Role string }
		if json.Unmarshal(it, &m) == nil && m.Type == "message" && m.Role == "user" {
			output = append(output, it)
		}
	}
	c, _ := json.Marshal(outputItem{ID: newID("cmp_"), Type: "compaction", EncryptedContent: compactionContent})
	output = append(output, c)
	input := s.promptTokens(body)
	s.prompt.Add(int64(input))
	s.generated.Add(compactionTokens)
	writeJSON(w, http.StatusOK, map[string]any{
		"id": newID("resp_"), "object": "response.compaction", "created_at": time.Now().Unix(), "output": output,
		"usage": responseUsage{InputTokens: input, OutputTokens: compactionTokens, TotalTokens: input + compactionTokens},
	})
}
