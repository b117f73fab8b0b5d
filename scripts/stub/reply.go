package stub

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// maxChoices is the largest n a chat or completion request may ask for,
// as OpenAI's.
const maxChoices = 128

// request is the part of a chat or completion request body the stub reads.
// Fields it does not read (user, temperature, ...) are accepted and
// ignored, as a backend does.
type request struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	N                   *int   `json:"n"`
	MaxTokens           int    `json:"max_tokens"`
	MaxCompletionTokens int    `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`

	// Chat only: what an agent sends (chattools.go).
	Messages       []json.RawMessage `json:"messages"`
	Tools          []chatTool        `json:"tools"`
	ToolChoice     json.RawMessage   `json:"tool_choice"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
}

// decodeJSON decodes body into v, or answers 400 and reports false.
func decodeJSON(w http.ResponseWriter, body []byte, v any) bool {
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, http.StatusBadRequest, "stub: request body is not valid JSON: "+err.Error(), "invalid_request_error", "")
		return false
	}
	return true
}

// modelOf is the model a response names: the request's, else the Azure
// deployment, else the first of Options.Models.
func (s *Server) modelOf(model string, rt route) string {
	switch {
	case model != "":
		return model
	case rt.deployment != "":
		return rt.deployment
	}
	return s.opts.Models[0]
}

func (s *Server) promptTokens(body []byte) int {
	if s.opts.PromptTokens > 0 {
		return s.opts.PromptTokens
	}
	return max(len(body)/4, 1)
}

// answer is everything a chat or completion response says, streamed or not.
type answer struct {
	id           string
	created      int64 // Unix seconds
	model        string
	chat         bool   // chat.completion, else text_completion
	n            int    // choices
	tokens       int    // per choice
	finish       string // "stop", or "length" when max_tokens cut it
	promptTokens int
	includeUsage bool
	wd           *wording
	seed         uint64 // of the text, per wording.seedOf
	// A chat answer that is not the stream's words (chattools.go): a tool
	// call, or fixed content (structured output) in pieces, a token each.
	call   *chatCall
	pieces []string
}

// completionTokens is the usage.completion_tokens: all choices together.
func (a answer) completionTokens() int { return max(a.n, 1) * a.tokens }

func (s *Server) complete(w http.ResponseWriter, r *http.Request, body []byte, rt route, f Fault, sh shape, arrived time.Time) {
	var req request
	if !decodeJSON(w, body, &req) {
		return
	}
	a := answer{
		created:      arrived.Unix(),
		model:        s.modelOf(req.Model, rt),
		chat:         rt.kind == kindChat,
		n:            1,
		tokens:       sh.tokens,
		finish:       "stop",
		promptTokens: s.promptTokens(body),
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		wd:           s.wording,
		seed:         s.wording.seedOf(body),
	}
	if req.N != nil {
		if *req.N < 1 || *req.N > maxChoices {
			writeParamError(w, http.StatusBadRequest, "stub: n must be 1 to "+strconv.Itoa(maxChoices)+", got "+strconv.Itoa(*req.N), "invalid_request_error", "n", "")
			return
		}
		a.n = *req.N
	}
	if a.chat {
		a.agentAnswer(req)
	}
	for _, limit := range []int{req.MaxTokens, req.MaxCompletionTokens} {
		if limit > 0 && limit < a.tokens && !s.opts.IgnoreMaxTokens && a.call == nil {
			a.tokens, a.finish = limit, "length"
		}
	}
	if a.pieces != nil {
		a.pieces = a.pieces[:a.tokens]
	}
	prefix := "cmpl-stub-"
	if a.chat {
		prefix = "chatcmpl-stub-"
	}
	a.id = prefix + strconv.FormatUint(s.ids.Add(1), 10)
	s.prompt.Add(int64(a.promptTokens))
	switch {
	case req.Stream && (a.call != nil || a.pieces != nil):
		s.streamChunks(w, r, a, f, sh, arrived)
	case req.Stream:
		s.stream(w, r, a, f, sh, arrived)
	default:
		s.whole(w, r, a, f)
	}
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type message struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"` // null with tool calls
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

type choice struct {
	Index        int       `json:"index"`
	Message      *message  `json:"message,omitempty"`
	Text         *string   `json:"text,omitempty"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
}

type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   usage    `json:"usage"`
}

// whole answers a non-streaming request: a chat.completion or a
// text_completion JSON, after Options.NonStreamDelay.
func (s *Server) whole(w http.ResponseWriter, r *http.Request, a answer, f Fault) {
	c := completion{
		ID:      a.id,
		Object:  "text_completion",
		Created: a.created,
		Model:   a.model,
		Choices: make([]choice, a.n),
		Usage:   usage{a.promptTokens, a.completionTokens(), a.promptTokens + a.completionTokens()},
	}
	if a.chat {
		c.Object = "chat.completion"
	}
	s.generated.Add(int64(a.completionTokens()))
	for i := range c.Choices {
		text := a.text(i)
		c.Choices[i] = choice{Index: i, FinishReason: a.finish}
		if a.chat {
			c.Choices[i].Message = &message{Role: "assistant", Content: &text}
			if a.call != nil {
				c.Choices[i].Message.Content = nil
				c.Choices[i].Message.ToolCalls = []chatToolCall{a.call.json(i, true)}
			}
		} else {
			c.Choices[i].Text = &text
		}
	}
	s.writeWhole(w, r, f, c)
}

// writeWhole writes v as a non-streaming JSON answer after
// Options.NonStreamDelay; a DropAfter or StallAfter fault cuts the body in
// half (the declared length, half of it, then the fault).
func (s *Server) writeWhole(w http.ResponseWriter, r *http.Request, f Fault, v any) {
	if d := s.opts.NonStreamDelay; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.done:
			panic(http.ErrAbortHandler)
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "stub: "+err.Error(), "server_error", "")
		return
	}
	out = append(out, '\n')
	w.Header().Set("Content-Type", "application/json")
	if f.DropAfter == 0 && f.StallAfter == 0 {
		_, _ = w.Write(out)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(out)))
	_, _ = w.Write(out[:len(out)/2])
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	if f.StallAfter != 0 {
		s.hold(r)
		return
	}
	panic(http.ErrAbortHandler)
}

func (s *Server) models(w http.ResponseWriter) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list"}
	for _, id := range s.opts.Models {
		list.Data = append(list.Data, model{id, "model", s.created, "stub"})
	}
	writeJSON(w, http.StatusOK, list)
}

// apiError is the inside of OpenAI's error JSON.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// writeError answers with OpenAI's error JSON; an empty code is null.
func writeError(w http.ResponseWriter, status int, msg, typ, code string) {
	writeParamError(w, status, msg, typ, "", code)
}

// writeParamError is writeError with the error's param, the request field
// at fault; an empty param is null.
func writeParamError(w http.ResponseWriter, status int, msg, typ, param, code string) {
	e := apiError{Message: msg, Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	writeJSON(w, status, struct {
		Error apiError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	out, err := json.Marshal(v)
	if err != nil {
		status, out = http.StatusInternalServerError, []byte(`{"error":{"message":"stub: encoding failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(out, '\n'))
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(dst []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil { // unreachable: a string always encodes
		return append(dst, `""`...)
	}
	return append(dst, q...)
}
