package stub

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// tokenText is the content of every token; a response's text is
// strings.Repeat(tokenText, completion_tokens), streamed or not.
const tokenText = " tok"

// request is the part of a request body the stub reads.
type request struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           int    `json:"max_tokens"`
	MaxCompletionTokens int    `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Input      json.RawMessage `json:"input"`      // embeddings
	Dimensions int             `json:"dimensions"` // embeddings
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
}

func decodeRequest(w http.ResponseWriter, body []byte) (request, bool) {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "stub: request body is not valid JSON: "+err.Error(), "invalid_request_error", "")
		return request{}, false
	}
	return req, true
}

// modelOf is the model a response names: the request's, else the Azure
// deployment, else the first of Options.Models.
func (s *Server) modelOf(req request, rt route) string {
	switch {
	case req.Model != "":
		return req.Model
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
	chat         bool // chat.completion, else text_completion
	tokens       int
	finish       string // "stop", or "length" when max_tokens cut it
	promptTokens int
	includeUsage bool
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, body []byte, rt route, f Fault, sh shape, arrived time.Time) {
	req, ok := decodeRequest(w, body)
	if !ok {
		return
	}
	a := answer{
		created:      arrived.Unix(),
		model:        s.modelOf(req, rt),
		chat:         rt.kind == kindChat,
		tokens:       sh.tokens,
		finish:       "stop",
		promptTokens: s.promptTokens(body),
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
	}
	for _, limit := range []int{req.MaxTokens, req.MaxCompletionTokens} {
		if limit > 0 && limit < a.tokens {
			a.tokens, a.finish = limit, "length"
		}
	}
	prefix := "cmpl-stub-"
	if a.chat {
		prefix = "chatcmpl-stub-"
	}
	a.id = prefix + strconv.FormatUint(s.ids.Add(1), 10)
	if req.Stream {
		s.stream(w, r, a, f, sh, arrived)
		return
	}
	s.whole(w, r, a, f)
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
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
	text := strings.Repeat(tokenText, a.tokens)
	c := completion{
		ID:      a.id,
		Object:  "text_completion",
		Created: a.created,
		Model:   a.model,
		Choices: []choice{{FinishReason: a.finish}},
		Usage:   usage{a.promptTokens, a.tokens, a.promptTokens + a.tokens},
	}
	if a.chat {
		c.Object = "chat.completion"
		c.Choices[0].Message = &message{Role: "assistant", Content: text}
	} else {
		c.Choices[0].Text = &text
	}
	out, err := json.Marshal(c)
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
	// A truncated body: the declared length, half of it, then the fault.
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

// embeddings answers with one small constant vector per input.
func (s *Server) embeddings(w http.ResponseWriter, body []byte, rt route) {
	req, ok := decodeRequest(w, body)
	if !ok {
		return
	}
	inputs := 1
	var list []json.RawMessage
	if json.Unmarshal(req.Input, &list) == nil && len(list) > 0 {
		// A list of strings is several inputs; a list of numbers is one
		// tokenized input.
		if t := strings.TrimSpace(string(list[0])); strings.HasPrefix(t, `"`) || strings.HasPrefix(t, `[`) {
			inputs = len(list)
		}
	}
	dims := req.Dimensions
	if dims <= 0 || dims > 4096 {
		dims = 8
	}
	prompt := s.promptTokens(body)
	out := make([]byte, 0, 64+inputs*(48+dims*6))
	out = append(out, `{"object":"list","data":[`...)
	for i := range inputs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"object":"embedding","index":`...)
		out = strconv.AppendInt(out, int64(i), 10)
		out = append(out, `,"embedding":[`...)
		for d := range dims {
			if d > 0 {
				out = append(out, ',')
			}
			out = append(out, "0.125"...)
		}
		out = append(out, "]}"...)
	}
	out = append(out, `],"model":`...)
	out = appendJSONString(out, s.modelOf(req, rt))
	out = append(out, `,"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, int64(prompt), 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, int64(prompt), 10)
	out = append(out, "}}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
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
	e := apiError{Message: msg, Type: typ}
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
