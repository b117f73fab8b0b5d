package stub

// Anthropic's Messages API, as Anthropic (and vLLM's Messages-compatible
// route, and Claude in Microsoft Foundry) answer it: POST /v1/messages
// with a whole message or its event stream (message_start,
// content_block_start, ping, content_block_delta…, content_block_stop,
// message_delta, message_stop), a tool_use block when the request offers
// tools and the conversation does not end with their results (the tool
// the user's last words name, so Claude Code runs the one its prompt asks
// for), and POST /v1/messages/count_tokens. Errors have Anthropic's shape.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// messagesRequest is what the stub reads of a Messages request.
type messagesRequest struct {
	Model     string            `json:"model"`
	MaxTokens *int              `json:"max_tokens"`
	Stream    bool              `json:"stream"`
	Messages  []json.RawMessage `json:"messages"`
	Tools     []messagesTool    `json:"tools"`
	Thinking  *struct {
		Type         string `json:"type"`
		BudgetTokens int    `json:"budget_tokens"`
	} `json:"thinking"`
	// Structured output: output_format (the beta's name) or
	// output_config.format, a json_schema.
	OutputFormat *messagesFormat `json:"output_format"`
	OutputConfig struct {
		Format *messagesFormat `json:"format"`
	} `json:"output_config"`
}

// messagesFormat is a structured-output format of the Messages API.
type messagesFormat struct {
	Type   string          `json:"type"`
	Schema json.RawMessage `json:"schema"`
}

// schema is the JSON schema the answer must satisfy (nil: none).
func (r messagesRequest) schema() json.RawMessage {
	for _, f := range []*messagesFormat{r.OutputConfig.Format, r.OutputFormat} {
		if f != nil && f.Type == "json_schema" {
			return f.Schema
		}
	}
	return nil
}

// StubEditText is what the stub's edits write (a new_string), and
// SubagentPrompt the prompt it gives the agents it starts (Claude Code's
// Task or Agent tool): a conversation whose last text is exactly that is
// a subagent's, answered in text, so that it ends after one turn.
const (
	StubEditText   = "stub, edited"
	SubagentPrompt = "stub"
)

// agentTools start a subagent: called only when the last message names
// them, never as the fallback (Claude Code lists Task or Agent first; a
// fallback call of it starts agents that start agents).
var agentTools = map[string]bool{"Task": true, "Agent": true}

type messagesTool struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	InputSchema  json.RawMessage `json:"input_schema"`
	DeferLoading bool            `json:"defer_loading"`
}

// messagesUsage is Anthropic's usage object.
type messagesUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// contentBlock is a text or tool_use block of an answer.
type contentBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// anthMessage is Anthropic's message object.
type anthMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        messagesUsage  `json:"usage"`
}

// writeAnthropicError answers in the Messages API's error shape.
func writeAnthropicError(w http.ResponseWriter, status int, msg string) {
	typ := "api_error"
	switch {
	case status == http.StatusBadRequest:
		typ = "invalid_request_error"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusForbidden:
		typ = "permission_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == 529:
		typ = "overloaded_error"
	case status < 500:
		typ = "invalid_request_error"
	}
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e.Type, e.Error.Type, e.Error.Message = "error", typ, msg
	writeJSON(w, status, e)
}

// messagesStreamError is a Messages stream's error event, for
// Fault.ErrorAfter.
const messagesStreamError = "event: error\ndata: " +
	`{"type":"error","error":{"type":"overloaded_error","message":"stub: injected mid-stream error"}}` + "\n\n"

// readMessages decodes and checks a Messages or count_tokens request, or
// answers 400.
func readMessages(w http.ResponseWriter, body []byte, needMax bool) (messagesRequest, bool) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "stub: request body is not valid JSON: "+err.Error())
		return req, false
	}
	switch {
	case req.Model == "":
		writeAnthropicError(w, http.StatusBadRequest, "model: Field required")
	case len(req.Messages) == 0:
		writeAnthropicError(w, http.StatusBadRequest, "messages: Field required")
	case needMax && req.MaxTokens == nil:
		writeAnthropicError(w, http.StatusBadRequest, "max_tokens: Field required")
	case needMax && *req.MaxTokens < 1:
		writeAnthropicError(w, http.StatusBadRequest, "max_tokens: Input should be greater than or equal to 1")
	case needMax && req.Thinking != nil && req.Thinking.Type == "enabled" && req.Thinking.BudgetTokens >= *req.MaxTokens:
		writeAnthropicError(w, http.StatusBadRequest, "`max_tokens` must be greater than `thinking.budget_tokens`")
	default:
		return req, true
	}
	return req, false
}

// usageFor splits the prompt tokens as a cache would: with cache_control
// in the request, half of them are read from the cache, so a test sees
// all three of Anthropic's input counts add up.
func (s *Server) usageFor(body []byte) messagesUsage {
	p := s.messagesPrompt(body)
	if bytes.Contains(body, []byte(`"cache_control"`)) {
		return messagesUsage{InputTokens: p - p/2, CacheReadInputTokens: p / 2}
	}
	return messagesUsage{InputTokens: p}
}

func (s *Server) countTokens(w http.ResponseWriter, body []byte) {
	if _, ok := readMessages(w, body, false); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": s.messagesPrompt(body)})
}

// messagesPrompt is a Messages body's input tokens, counted as Anthropic's
// count_tokens counts them: from the text, not the JSON around it (about
// 4 bytes a token), so a gateway that asks the count before reserving
// sees the same number the answer's usage bills. Options.PromptTokens,
// when set, is the count instead.
func (s *Server) messagesPrompt(body []byte) int {
	if s.opts.PromptTokens > 0 {
		return s.opts.PromptTokens
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return max(len(body)/4, 1)
	}
	return max(textBytes(v, "")/4, 1)
}

// notText are the members whose strings never reach the model as text.
var notText = map[string]bool{"model": true, "role": true, "type": true, "id": true, "tool_use_id": true,
	"media_type": true, "stop_sequences": true, "cache_control": true, "metadata": true, "tool_choice": true}

// textBytes is the bytes of every string in v below a member not in
// notText (tool schemas' keys count: the model reads them).
func textBytes(v any, key string) int {
	if notText[key] {
		return 0
	}
	switch t := v.(type) {
	case string:
		return len(t)
	case []any:
		n := 0
		for _, e := range t {
			n += textBytes(e, key)
		}
		return n
	case map[string]any:
		n := 0
		for k, e := range t {
			if key == "properties" {
				n += len(k)
			}
			n += textBytes(e, k)
		}
		return n
	}
	return 0
}

// messages answers a Messages request: a tool_use block when tools are
// offered and the last message holds no tool_result, else text of the
// stream's tokens (fewer when max_tokens cuts it).
func (s *Server) messages(w http.ResponseWriter, r *http.Request, body []byte, f Fault, sh shape, arrived time.Time) {
	req, ok := readMessages(w, body, true)
	if !ok {
		return
	}
	u := s.usageFor(body)
	seed := s.wording.seedOf(body)
	s.prompt.Add(int64(u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens))
	m := anthMessage{ID: newID("msg_"), Type: "message", Role: "assistant", Model: req.Model}
	stop := "end_turn"
	tokens := sh.tokens
	if tool := toolToCall(req); tool != nil {
		input := toolInput(tool.InputSchema)
		m.Content = []contentBlock{{Type: "tool_use", ID: newID("toolu_"), Name: tool.Name, Input: input}}
		stop, tokens = "tool_use", max(len(input)/4, 1)
	} else if schema := req.schema(); schema != nil {
		text := schemaJSON(schema)
		tokens = max(len(text)/4, 1)
		m.Content = []contentBlock{{Type: "text", Text: &text}}
	} else {
		if !s.opts.IgnoreMaxTokens && *req.MaxTokens < tokens {
			tokens, stop = *req.MaxTokens, "max_tokens"
		}
		text := s.wording.text(seed, 0, tokens)
		m.Content = []contentBlock{{Type: "text", Text: &text}}
	}
	m.StopReason = &stop
	u.OutputTokens = tokens
	m.Usage = u
	if !req.Stream {
		if s.opts.NonStreamDelay > 0 {
			s.wait(r.Context(), time.NewTimer(time.Hour), time.Now().Add(s.opts.NonStreamDelay))
		}
		s.generated.Add(int64(tokens))
		writeJSON(w, http.StatusOK, m)
		return
	}
	s.streamMessage(w, r, m, seed, f, sh, arrived)
}

// toolToCall is the tool the answer calls: none when the request offers
// none or its last message carries a tool_result (the tool ran: answer in
// text), asks for structured output, is a subagent's (its last text is
// SubagentPrompt) or a control prompt (isControlPrompt); else the tool whose name the last message's last text
// names as a word (the last message that is not a system message), or the first tool that is not deferred (defer_loading:
// Anthropic loads those through tool search, they cannot be called
// directly) and does not start an agent (agentTools). Only
// the last text counts because Claude Code sends its system reminders,
// which name its tools, as text blocks before the user's words.
func toolToCall(req messagesRequest) *messagesTool {
	if len(req.Tools) == 0 {
		return nil
	}
	last := lastTurn(req.Messages)
	if bytes.Contains(last, []byte(`"tool_result"`)) {
		return nil
	}
	text := lastText(last)
	if text == "" || text == SubagentPrompt || req.schema() != nil || isControlPrompt([]byte(text)) {
		// Only system reminders (a task notification), a subagent's
		// conversation, structured output, or a summary asked for
		// (control.go): text.
		return nil
	}
	for i := range req.Tools {
		if t := &req.Tools[i]; t.Name != "" && mentions(text, t.Name) {
			return t
		}
	}
	for i := range req.Tools {
		if t := &req.Tools[i]; !t.DeferLoading && !agentTools[t.Name] {
			return t
		}
	}
	return nil
}

// lastTurn is the conversation's last message that is not a system
// message: Claude Code 2.1 sends its environment and its agent and tool
// lists as role "system" messages after the user's words (and after a
// tool's result), and they name every tool it has.
func lastTurn(msgs []json.RawMessage) json.RawMessage {
	for i := len(msgs) - 1; i >= 0; i-- {
		var m struct {
			Role string `json:"role"`
		}
		if json.Unmarshal(msgs[i], &m) == nil && m.Role != "system" {
			return msgs[i]
		}
	}
	return msgs[len(msgs)-1]
}

// lastText is a message's content when it is a string, else the text of
// its last text block that is not a system reminder (Claude Code puts
// them before the user's words, after them too, and alone in a task
// notification): the words the user wrote, "" when there are none.
func lastText(msg json.RawMessage) string {
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(msg, &m)
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var blocks []struct{ Type, Text string }
	_ = json.Unmarshal(m.Content, &blocks)
	for i := len(blocks) - 1; i >= 0; i-- {
		if blocks[i].Type == "text" && !strings.HasPrefix(strings.TrimSpace(blocks[i].Text), "<system-reminder>") {
			return blocks[i].Text
		}
	}
	return ""
}

// mentions reports whether name occurs in text as a word: not inside a
// longer name (Task in TaskCreate).
func mentions(text, name string) bool {
	word := func(c byte) bool {
		return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for off := 0; ; {
		i := strings.Index(text[off:], name)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(name)
		if (i == 0 || !word(text[i-1])) && (end == len(text) || !word(text[end])) {
			return true
		}
		off = i + 1
	}
}

// toolInput is an input that fits the tool's schema (schemaValue).
func toolInput(schema json.RawMessage) json.RawMessage {
	return json.RawMessage(schemaJSON(schema))
}

// msgStream is one Messages stream's events, rendered up front:
//
//	0      message_start        (the message, empty content, input usage)
//	1      content_block_start  (an empty text block, or the tool_use block)
//	2      ping
//	3..    content_block_delta  (text_delta per token, or input_json_delta pieces)
//	D+3    content_block_stop
//	D+4    message_delta        (stop_reason, cumulative output usage)
//	D+5    message_stop
//
// where D is the deltas.
type msgStream struct {
	events   [][]byte
	deltas   int
	first    time.Time
	interval time.Duration
}

func (ms *msgStream) count() int { return len(ms.events) }

func (ms *msgStream) due(i int) time.Time {
	switch k := i - 3; {
	case i >= 1 && k <= 0:
		return ms.first
	case k > 0 && k < ms.deltas:
		return ms.first.Add(time.Duration(k) * ms.interval)
	}
	return time.Time{}
}

func (ms *msgStream) tokensAt(i int) int {
	if k := i - 3; k >= 0 && k < ms.deltas {
		return 1
	}
	return 0
}

func (ms *msgStream) appendAt(dst []byte, i int, _ int64) []byte {
	return append(dst, ms.events[i]...)
}

func appendMsgEvent(events [][]byte, name string, v any) [][]byte {
	data, err := json.Marshal(v)
	if err != nil { // unreachable: every value is the stub's own
		panic(http.ErrAbortHandler)
	}
	return append(events, []byte("event: "+name+"\ndata: "+string(data)+"\n\n"))
}

// streamMessage writes m as the Messages event stream.
func (s *Server) streamMessage(w http.ResponseWriter, r *http.Request, m anthMessage, seed uint64, f Fault, sh shape, arrived time.Time) {
	block := m.Content[0]
	start := m
	start.Content, start.StopReason = []contentBlock{}, nil
	start.Usage.OutputTokens = 1
	var ev [][]byte
	ev = appendMsgEvent(ev, "message_start", map[string]any{"type": "message_start", "message": start})
	opening := block
	var pieces []map[string]any
	if block.Type == "tool_use" {
		opening.Input = json.RawMessage(`{}`)
		// Anthropic's first input_json_delta is empty; the input follows
		// in pieces.
		pieces = append(pieces, map[string]any{"type": "input_json_delta", "partial_json": ""})
		for _, p := range splitPieces(string(block.Input), 8) {
			pieces = append(pieces, map[string]any{"type": "input_json_delta", "partial_json": p})
		}
	} else {
		empty := ""
		opening.Text = &empty
		for k := range m.Usage.OutputTokens { // the words of the JSON answer's text
			pieces = append(pieces, map[string]any{"type": "text_delta", "text": s.wording.word(seed, 0, k)})
		}
	}
	ev = appendMsgEvent(ev, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": opening})
	ev = appendMsgEvent(ev, "ping", map[string]string{"type": "ping"})
	for _, p := range pieces {
		ev = appendMsgEvent(ev, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": p})
	}
	ev = appendMsgEvent(ev, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	ev = appendMsgEvent(ev, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": m.StopReason, "stop_sequence": nil}, "usage": map[string]int{"output_tokens": m.Usage.OutputTokens}})
	ev = appendMsgEvent(ev, "message_stop", map[string]string{"type": "message_stop"})

	end := endCanceled
	rc, ok := s.beginStream(w)
	defer func() { s.endStream(end) }()
	if !ok {
		return
	}
	ms := &msgStream{events: ev, deltas: len(pieces), first: arrived.Add(sh.ttft), interval: sh.interval}
	var buf []byte
	s.pump(w, r, rc, f, ms, messagesStreamError, &buf, &end)
}
