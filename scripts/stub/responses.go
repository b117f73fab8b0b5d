package stub

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OpenAI's Responses API (POST /v1/responses and the stored-response
// routes): the answer is one output item, a message with one output_text
// part (the same words as a chat answer, or JSON for text.format), or a
// function_call when the request offers function tools
// (responses_tools.go).
// Responses are stored per Server (store defaults to true, as OpenAI's), so
// two stubs never know each other's ids.

// maxStored is how many responses a Server keeps; past it the oldest go.
const maxStored = 10_000

// responsesRequest is the part of a Responses request the stub reads. The
// raw fields are echoed in the response object as sent, or as OpenAI's
// defaults when absent.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Stream             bool            `json:"stream"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Background         bool            `json:"background"`
	User               *string         `json:"user"`
	StreamOptions      *struct {
		IncludeObfuscation *bool `json:"include_obfuscation"`
	} `json:"stream_options"`

	Metadata          json.RawMessage `json:"metadata"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
	Reasoning         json.RawMessage `json:"reasoning"`
	Temperature       json.RawMessage `json:"temperature"`
	Text              json.RawMessage `json:"text"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	Tools             json.RawMessage `json:"tools"`
	TopP              json.RawMessage `json:"top_p"`
	Truncation        json.RawMessage `json:"truncation"`
	// Echoed as sent, or their defaults (the Open Responses schema
	// requires each in a Response).
	PresencePenalty  json.RawMessage `json:"presence_penalty"`
	FrequencyPenalty json.RawMessage `json:"frequency_penalty"`
	TopLogprobs      json.RawMessage `json:"top_logprobs"`
	MaxToolCalls     json.RawMessage `json:"max_tool_calls"`
	ServiceTier      json.RawMessage `json:"service_tier"`
	SafetyIdentifier json.RawMessage `json:"safety_identifier"`
	PromptCacheKey   json.RawMessage `json:"prompt_cache_key"`
}

// responseObject is OpenAI's Response object.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              *apiError          `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []outputItem       `json:"output"`
	ParallelToolCalls  json.RawMessage    `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          json.RawMessage    `json:"reasoning"`
	Store              bool               `json:"store"`
	Temperature        json.RawMessage    `json:"temperature"`
	Text               json.RawMessage    `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	TopP               json.RawMessage    `json:"top_p"`
	Truncation         json.RawMessage    `json:"truncation"`
	Usage              *responseUsage     `json:"usage"`
	User               *string            `json:"user"`
	Metadata           json.RawMessage    `json:"metadata"`
	// CompletedAt is set once the response completed (null before).
	CompletedAt      *int64          `json:"completed_at"`
	PresencePenalty  json.RawMessage `json:"presence_penalty"`
	FrequencyPenalty json.RawMessage `json:"frequency_penalty"`
	TopLogprobs      json.RawMessage `json:"top_logprobs"`
	MaxToolCalls     json.RawMessage `json:"max_tool_calls"`
	ServiceTier      json.RawMessage `json:"service_tier"`
	SafetyIdentifier json.RawMessage `json:"safety_identifier"`
	PromptCacheKey   json.RawMessage `json:"prompt_cache_key"`
}

// completedAt is when a completed response completed (done), else nil.
func completedAt(status string, done time.Time) *int64 {
	if status != "completed" {
		return nil
	}
	t := done.Unix()
	return &t
}

// withDefaults is the object v (a request's reasoning or text) with each
// member of def it leaves out, as OpenAI echoes them: Codex sends
// reasoning with a summary and no effort, and the answer names both. A v
// that is not an object is def.
func withDefaults(v json.RawMessage, def string) json.RawMessage {
	var m, d map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil || m == nil || json.Unmarshal([]byte(def), &d) != nil {
		return json.RawMessage(def)
	}
	for k, dv := range d {
		if _, ok := m[k]; !ok {
			m[k] = dv
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage(def)
	}
	return b
}

// strictTools is a request's tools with strict set on each function tool
// that leaves it out (its default, true), as OpenAI echoes them.
func strictTools(raw json.RawMessage) json.RawMessage {
	var tools []map[string]json.RawMessage
	if json.Unmarshal(raw, &tools) != nil {
		return raw
	}
	for _, t := range tools {
		if _, ok := t["strict"]; !ok && string(t["type"]) == `"function"` {
			t["strict"] = json.RawMessage("true")
		}
	}
	b, err := json.Marshal(tools)
	if err != nil {
		return raw
	}
	return b
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

// outputItem is the one output item: the assistant's message, or a
// function call.
type outputItem struct {
	ID      string
	Type    string // "message", "function_call", "custom_tool_call" or "compaction"
	Status  string
	Content []outputText // a message's
	Role    string       // a message's
	// A function call's (a custom tool call's input is in Arguments).
	CallID, Name, Arguments string
	// A compaction's: the compacted conversation, opaque to the client.
	EncryptedContent string
}

// MarshalJSON writes the fields of the item's type, as OpenAI does.
func (it outputItem) MarshalJSON() ([]byte, error) {
	if it.Type == "compaction" {
		return json.Marshal(struct {
			ID               string `json:"id"`
			Type             string `json:"type"`
			EncryptedContent string `json:"encrypted_content"`
		}{it.ID, it.Type, it.EncryptedContent})
	}
	if it.Type == "custom_tool_call" {
		return json.Marshal(struct {
			ID     string `json:"id"`
			Type   string `json:"type"`
			Status string `json:"status"`
			CallID string `json:"call_id"`
			Name   string `json:"name"`
			Input  string `json:"input"`
		}{it.ID, it.Type, it.Status, it.CallID, it.Name, it.Arguments})
	}
	if it.Type == "function_call" {
		return json.Marshal(struct {
			ID        string `json:"id"`
			Type      string `json:"type"`
			Status    string `json:"status"`
			Arguments string `json:"arguments"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
		}{it.ID, it.Type, it.Status, it.Arguments, it.CallID, it.Name})
	}
	content := it.Content
	if content == nil {
		content = []outputText{}
	}
	return json.Marshal(struct {
		ID      string       `json:"id"`
		Type    string       `json:"type"`
		Status  string       `json:"status"`
		Content []outputText `json:"content"`
		Role    string       `json:"role"`
	}{it.ID, it.Type, it.Status, content, it.Role})
}

// outputText is an output_text content part.
type outputText struct {
	Type        string     `json:"type"` // "output_text"
	Annotations []struct{} `json:"annotations"`
	Logprobs    []struct{} `json:"logprobs"`
	Text        string     `json:"text"`
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Annotations: []struct{}{}, Logprobs: []struct{}{}, Text: text}
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// orRaw is v, or def when v is absent or null.
func orRaw(v json.RawMessage, def string) json.RawMessage {
	if len(bytes.TrimSpace(v)) == 0 || string(bytes.TrimSpace(v)) == "null" {
		return json.RawMessage(def)
	}
	return v
}

// newID returns prefix and 48 random hex digits, the shape of OpenAI's
// resp_ and msg_ ids: random, so that no two stubs share one.
func newID(prefix string) string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return prefix + hex.EncodeToString(b[:])
}

// respState is where a stored response is.
type respState uint8

const (
	statePending   respState = iota // a stream still running, or a background response before its due time
	stateDone                       // its final form: completed or incomplete
	stateCancelled                  // cancelled, or its stream ended early
)

// storedResponse is a response as created, and its input items.
type storedResponse struct {
	final   responseObject    // as it ends
	items   []json.RawMessage // the input items, each with an id
	itemIDs []string
	state   respState
	due     time.Time // a background response's completion; zero otherwise
	// replay is its stream as created (its first event due at TTFT after
	// it arrived), for GET responses/{id}?stream=true.
	replay respStream
}

// view is sr as a client sees it at now.
func (sr *storedResponse) view(now time.Time) responseObject {
	switch {
	case sr.state == stateCancelled:
		return sr.unfinished("cancelled")
	case sr.state == statePending && (sr.due.IsZero() || now.Before(sr.due)):
		return sr.unfinished("in_progress")
	}
	return sr.final
}

// unfinished is sr with status and as yet no output or usage.
func (sr *storedResponse) unfinished(status string) responseObject {
	v := sr.final
	v.Status, v.Output, v.Usage, v.IncompleteDetails, v.CompletedAt = status, []outputItem{}, nil, nil, nil
	return v
}

// responseStore holds a Server's stored responses.
type responseStore struct {
	mu    sync.Mutex
	byID  map[string]*storedResponse
	order []string // ids, oldest first; deleted ids stay until trimmed
}

func (rs *responseStore) put(sr *storedResponse) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byID == nil {
		rs.byID = make(map[string]*storedResponse)
	}
	rs.byID[sr.final.ID] = sr
	rs.order = append(rs.order, sr.final.ID)
	for len(rs.byID) > maxStored {
		delete(rs.byID, rs.order[0])
		rs.order = rs.order[1:]
	}
	if len(rs.order) > 2*maxStored { // drop the ids of deleted responses
		live := make([]string, 0, len(rs.byID))
		for _, id := range rs.order {
			if rs.byID[id] != nil {
				live = append(live, id)
			}
		}
		rs.order = live
	}
}

// with calls fn with the stored response id, under the store's lock; it
// reports false, without calling fn, when there is none.
func (rs *responseStore) with(id string, fn func(*storedResponse)) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	sr := rs.byID[id]
	if sr == nil {
		return false
	}
	fn(sr)
	return true
}

func (rs *responseStore) remove(id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byID[id] == nil {
		return false
	}
	delete(rs.byID, id)
	return true
}

// finish moves a pending response to st; one cancelled meanwhile stays
// cancelled.
func (rs *responseStore) finish(sr *storedResponse, st respState) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if sr.state == statePending {
		sr.state = st
	}
}

// errBadItems is the 400 for an input that is neither a string nor an
// array of item objects.
var errBadItems = errors.New("stub: input must be a string or an array of input items")

// responseInputItems turns input into the items that input_items lists:
// a string is one user message; a message whose content is a string gets
// it as one input_text (output_text for the assistant) part; every item
// gets a type (message when absent), and an id and status when absent.
func responseInputItems(raw json.RawMessage) ([]json.RawMessage, []string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		raw = []byte(`[{"role":"user","content":` + string(raw) + `}]`)
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, errBadItems
	}
	items := make([]json.RawMessage, len(list))
	ids := make([]string, len(list))
	for i, item := range list {
		if item == nil {
			return nil, nil, errBadItems
		}
		var typ, role, id string
		_ = json.Unmarshal(item["type"], &typ)
		_ = json.Unmarshal(item["role"], &role)
		_ = json.Unmarshal(item["id"], &id)
		if typ == "" {
			typ = "message"
			item["type"] = json.RawMessage(`"message"`)
		}
		if id == "" {
			prefix := "item_"
			if typ == "message" {
				prefix = "msg_"
			}
			id = newID(prefix)
			item["id"], _ = json.Marshal(id)
		}
		if typ == "message" {
			if json.Unmarshal(item["content"], &text) == nil {
				part := "input_text"
				if role == "assistant" {
					part = "output_text"
				}
				item["content"], _ = json.Marshal([]map[string]string{{"type": part, "text": text}})
			}
			if item["status"] == nil {
				item["status"] = json.RawMessage(`"completed"`)
			}
		}
		b, err := json.Marshal(item)
		if err != nil {
			return nil, nil, err
		}
		items[i], ids[i] = b, id
	}
	return items, ids, nil
}

// createResponse answers POST responses: the response object, or with
// stream the Responses event stream, or with background (and no stream)
// the queued response, which completes TTFT + tokens × Interval after it
// arrived.
func (s *Server) createResponse(w http.ResponseWriter, r *http.Request, body []byte, rt route, f Fault, sh shape, arrived time.Time) {
	var req responsesRequest
	if !decodeJSON(w, body, &req) {
		return
	}
	items, ids, err := responseInputItems(req.Input)
	if err != nil {
		writeParamError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "input", "")
		return
	}
	store := req.Store == nil || *req.Store
	if req.Background && !store {
		writeParamError(w, http.StatusBadRequest, "stub: background responses need store=true", "invalid_request_error", "background", "")
		return
	}
	input := s.promptTokens(body)
	if prev := req.PreviousResponseID; prev != nil {
		// The previous turns are part of this prompt, as OpenAI bills them.
		found := s.responses.with(*prev, func(sr *storedResponse) {
			if u := sr.final.Usage; u != nil {
				input += u.TotalTokens
			}
		})
		if !found {
			writeParamError(w, http.StatusNotFound, "Previous response with id '"+*prev+"' not found.",
				"invalid_request_error", "previous_response_id", "previous_response_not_found")
			return
		}
	}
	tokens, status, itemStatus := sh.tokens, "completed", "completed"
	ag := req.agentAnswer()
	if ag.pieces != nil || ag.compaction() {
		tokens = len(ag.pieces)
	}
	var incomplete *incompleteDetails
	if m := req.MaxOutputTokens; m != nil {
		if *m < 1 {
			writeParamError(w, http.StatusBadRequest, "stub: max_output_tokens must be at least 1, got "+strconv.Itoa(*m),
				"invalid_request_error", "max_output_tokens", "")
			return
		}
		if *m < tokens && !s.opts.IgnoreMaxTokens && ag.call == nil {
			tokens, status, itemStatus = *m, "incomplete", "incomplete"
			incomplete = &incompleteDetails{Reason: "max_output_tokens"}
		}
	}
	seed := s.wording.seedOf(body)
	item := outputItem{ID: newID("msg_"), Type: "message", Status: itemStatus, Role: "assistant"}
	switch {
	case ag.call != nil:
		item = *ag.call
	case ag.pieces != nil:
		ag.pieces = ag.pieces[:tokens]
		item.Content = []outputText{newOutputText(strings.Join(ag.pieces, ""))}
	default:
		item.Content = []outputText{newOutputText(s.wording.text(seed, 0, tokens))}
	}
	output := tokens
	if ag.compaction() {
		output = compactionTokens
	}
	u := &responseUsage{InputTokens: input, OutputTokens: output, TotalTokens: input + output}
	sr := &storedResponse{
		final: responseObject{
			ID:                 newID("resp_"),
			Object:             "response",
			CreatedAt:          arrived.Unix(),
			Status:             status,
			Background:         req.Background,
			IncompleteDetails:  incomplete,
			Instructions:       req.Instructions,
			MaxOutputTokens:    req.MaxOutputTokens,
			Model:              s.modelOf(req.Model, rt),
			Output:             []outputItem{item},
			ParallelToolCalls:  orRaw(req.ParallelToolCalls, "true"),
			PreviousResponseID: req.PreviousResponseID,
			Reasoning:          withDefaults(req.Reasoning, `{"effort":null,"summary":null}`),
			Store:              store,
			Temperature:        orRaw(req.Temperature, "1.0"),
			Text:               withDefaults(req.Text, `{"format":{"type":"text"}}`),
			ToolChoice:         orRaw(req.ToolChoice, `"auto"`),
			Tools:              strictTools(orRaw(req.Tools, "[]")),
			TopP:               orRaw(req.TopP, "1.0"),
			Truncation:         orRaw(req.Truncation, `"disabled"`),
			Usage:              u,
			User:               req.User,
			Metadata:           orRaw(req.Metadata, "{}"),
			CompletedAt:        completedAt(status, arrived.Add(sh.ttft+time.Duration(tokens)*sh.interval)),
			PresencePenalty:    orRaw(req.PresencePenalty, "0.0"),
			FrequencyPenalty:   orRaw(req.FrequencyPenalty, "0.0"),
			TopLogprobs:        orRaw(req.TopLogprobs, "0"),
			MaxToolCalls:       orRaw(req.MaxToolCalls, "null"),
			ServiceTier:        orRaw(req.ServiceTier, `"default"`),
			SafetyIdentifier:   orRaw(req.SafetyIdentifier, "null"),
			PromptCacheKey:     orRaw(req.PromptCacheKey, "null"),
		},
		items:   items,
		itemIDs: ids,
	}
	obfuscate := req.StreamOptions == nil || req.StreamOptions.IncludeObfuscation == nil || *req.StreamOptions.IncludeObfuscation
	sr.replay = respStream{sr: sr, tokens: tokens, wd: s.wording, seed: seed, pieces: ag.pieces, call: ag.call != nil,
		obfuscate: obfuscate, first: arrived.Add(sh.ttft), interval: sh.interval}
	switch {
	case req.Stream: // pending until the stream ends
	case req.Background:
		sr.due = arrived.Add(sh.ttft + time.Duration(tokens)*sh.interval)
	default:
		sr.state = stateDone
	}
	if store {
		s.responses.put(sr)
	}
	s.prompt.Add(int64(input))
	if !req.Stream {
		s.generated.Add(int64(output))
	}
	switch {
	case req.Stream:
		s.streamResponse(w, r, sr, f)
	case req.Background:
		s.writeWhole(w, r, f, sr.unfinished("queued"))
	default:
		s.writeWhole(w, r, f, sr.final)
	}
}

// notFound answers 404 for a response id this Server has not stored.
func notFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "Response with id '"+id+"' not found.", "invalid_request_error", "not_found")
}

// response answers GET responses/{id} with the stored response as it is
// now (with ?stream=true, as its stream: replayResponse), and DELETE
// responses/{id} by forgetting it.
func (s *Server) response(w http.ResponseWriter, r *http.Request, rt route, f Fault) {
	if r.Method == http.MethodDelete {
		if !s.responses.remove(rt.id) {
			notFound(w, rt.id)
			return
		}
		writeJSON(w, http.StatusOK, struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Deleted bool   `json:"deleted"`
		}{rt.id, "response", true})
		return
	}
	var v responseObject
	var replay respStream
	var cancelled bool
	if !s.responses.with(rt.id, func(sr *storedResponse) {
		v, replay, cancelled = sr.view(time.Now()), sr.replay, sr.state == stateCancelled
	}) {
		notFound(w, rt.id)
		return
	}
	q := r.URL.Query()
	if q.Get("stream") != "true" {
		writeJSON(w, http.StatusOK, v)
		return
	}
	after := -1
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeParamError(w, http.StatusBadRequest, "stub: starting_after must be a sequence number, got "+strconv.Quote(v), "invalid_request_error", "starting_after", "")
			return
		}
		after = n
	}
	s.replayResponse(w, r, f, &replay, cancelled, after)
}

// cancelResponse answers POST responses/{id}/cancel. A background
// response still in progress is cancelled; one already finished is
// returned as it is (cancelling is idempotent). A response created
// without background cannot be cancelled: 400, as OpenAI answers.
func (s *Server) cancelResponse(w http.ResponseWriter, rt route) {
	var v responseObject
	background := true
	found := s.responses.with(rt.id, func(sr *storedResponse) {
		if background = sr.final.Background; !background {
			return
		}
		now := time.Now()
		if sr.state == statePending && (sr.due.IsZero() || now.Before(sr.due)) {
			sr.state = stateCancelled
		}
		v = sr.view(now)
	})
	switch {
	case !found:
		notFound(w, rt.id)
	case !background:
		writeError(w, http.StatusBadRequest, "Only responses created with background=true can be cancelled.", "invalid_request_error", "")
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// inputItems answers GET responses/{id}/input_items: a page of the input
// items, newest first unless order=asc, limit (1–100, default 20) per
// page, after an item id.
func (s *Server) inputItems(w http.ResponseWriter, r *http.Request, rt route) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeParamError(w, http.StatusBadRequest, "stub: limit must be 1 to 100, got "+strconv.Quote(v), "invalid_request_error", "limit", "")
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		writeParamError(w, http.StatusBadRequest, "stub: order must be asc or desc, got "+strconv.Quote(order), "invalid_request_error", "order", "")
		return
	}
	var items []json.RawMessage
	var ids []string
	if !s.responses.with(rt.id, func(sr *storedResponse) { items, ids = sr.items, sr.itemIDs }) {
		notFound(w, rt.id)
		return
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
		if order != "asc" {
			idx[i] = len(items) - 1 - i
		}
	}
	if after := q.Get("after"); after != "" {
		at := -1
		for i, k := range idx {
			if ids[k] == after {
				at = i
			}
		}
		if at < 0 {
			writeParamError(w, http.StatusBadRequest, "stub: no input item with id "+strconv.Quote(after), "invalid_request_error", "after", "")
			return
		}
		idx = idx[at+1:]
	}
	page := struct {
		Object  string            `json:"object"`
		Data    []json.RawMessage `json:"data"`
		FirstID *string           `json:"first_id"`
		LastID  *string           `json:"last_id"`
		HasMore bool              `json:"has_more"`
	}{Object: "list", Data: []json.RawMessage{}, HasMore: len(idx) > limit}
	idx = idx[:min(len(idx), limit)]
	for _, k := range idx {
		page.Data = append(page.Data, items[k])
	}
	if len(idx) > 0 {
		page.FirstID, page.LastID = &ids[idx[0]], &ids[idx[len(idx)-1]]
	}
	writeJSON(w, http.StatusOK, page)
}
