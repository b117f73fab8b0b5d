package stub

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// namedEvent is one SSE event with its event name.
type namedEvent struct{ name, data string }

// readNamedEvents reads a Responses stream: each event an "event:" line, a
// "data:" line and a blank line, nothing else.
func readNamedEvents(t *testing.T, body io.Reader) []namedEvent {
	t.Helper()
	r := bufio.NewReader(body)
	var out []namedEvent
	for {
		line, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" {
			return out
		}
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		name, ok := strings.CutPrefix(line, "event: ")
		if !ok {
			t.Fatalf("after %d events: want an event line, got %q", len(out), line)
		}
		data, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(data, "data: ") {
			t.Fatalf("event %q: want a data line, got %q (%v)", name, data, err)
		}
		if blank, err := r.ReadString('\n'); err != nil || blank != "\n" {
			t.Fatalf("event %q: want a blank line, got %q (%v)", name, blank, err)
		}
		out = append(out, namedEvent{strings.TrimSuffix(name, "\n"), strings.TrimSuffix(strings.TrimPrefix(data, "data: "), "\n")})
	}
}

// wireResponse is the Response object as a client decodes it.
type wireResponse struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	CreatedAt         int64  `json:"created_at"`
	Status            string `json:"status"`
	Background        bool   `json:"background"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Instructions       *string `json:"instructions"`
	Model              string  `json:"model"`
	PreviousResponseID *string `json:"previous_response_id"`
	User               *string `json:"user"`
	Output             []struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type        string            `json:"type"`
			Text        string            `json:"text"`
			Annotations []json.RawMessage `json:"annotations"`
		} `json:"content"`
	} `json:"output"`
	Usage *struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int `json:"output_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens *int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
}

// text is the output text, checking the output is one assistant message
// with one output_text part.
func (r wireResponse) text(t *testing.T) string {
	t.Helper()
	if len(r.Output) != 1 {
		t.Fatalf("output has %d items: %+v", len(r.Output), r.Output)
	}
	m := r.Output[0]
	if m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") || len(m.Content) != 1 ||
		m.Content[0].Type != "output_text" || m.Content[0].Annotations == nil {
		t.Fatalf("output message %+v", m)
	}
	return m.Content[0].Text
}

// checkFinal checks a finished response: status, output text and usage.
func (r wireResponse) checkFinal(t *testing.T, model, status string, tokens int) {
	t.Helper()
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.CreatedAt == 0 || r.Model != model || r.Status != status {
		t.Fatalf("response header: %+v", r)
	}
	if got := r.text(t); got != strings.Repeat(" tok", tokens) {
		t.Fatalf("text %q, want %d tokens", got, tokens)
	}
	if r.Output[0].Status != status {
		t.Fatalf("message status %q, want %q", r.Output[0].Status, status)
	}
	u := r.Usage
	if u == nil || u.InputTokens < 1 || u.OutputTokens != tokens || u.TotalTokens != u.InputTokens+tokens ||
		u.InputTokensDetails.CachedTokens == nil || u.OutputTokensDetails.ReasoningTokens == nil {
		t.Fatalf("usage %+v", u)
	}
	incomplete := r.IncompleteDetails != nil && r.IncompleteDetails.Reason == "max_output_tokens"
	if incomplete != (status == "incomplete") {
		t.Fatalf("status %q with incomplete_details %+v", status, r.IncompleteDetails)
	}
}

// createResponse posts a non-streaming Responses request that must succeed.
func createResponse(t *testing.T, ts *httptest.Server, body string) wireResponse {
	t.Helper()
	status, b := do(t, ts, http.MethodPost, "/v1/responses", body)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	var r wireResponse
	decodeStrict(t, string(b), &r)
	return r
}

func wantError(t *testing.T, status int, body []byte, wantStatus int, param, code string) apiError {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, body)
	}
	e := errorBody(t, body)
	if got := deref(e.Param); got != param {
		t.Fatalf("param %q, want %q: %s", got, param, body)
	}
	if got := deref(e.Code); got != code {
		t.Fatalf("code %q, want %q: %s", got, code, body)
	}
	return e
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestResponsesCreate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		headers          []string
		model, status    string
		tokens           int
	}{
		{"string input", "/v1/responses", `{"model":"gpt-4.1","input":"hello"}`, nil, "gpt-4.1", "completed", 5},
		{"item input and instructions", "/v1/responses",
			`{"model":"gpt-4.1","instructions":"be brief","input":[{"role":"user","content":"hi"},{"type":"message","role":"user","content":[{"type":"input_text","text":"there"}]}]}`,
			nil, "gpt-4.1", "completed", 5},
		{"no model", "/v1/responses", `{"input":"x","user":"u1"}`, nil, DefaultModel, "completed", 5},
		{"azure v1", "/openai/v1/responses", `{"model":"dep","input":"hello"}`, []string{"api-key: k"}, "dep", "completed", 5},
		{"max_output_tokens cuts", "/v1/responses", `{"model":"m","input":"x","max_output_tokens":3}`, nil, "m", "incomplete", 3},
		{"max_output_tokens above", "/v1/responses", `{"model":"m","input":"x","max_output_tokens":99}`, nil, "m", "completed", 5},
		{"tokens header", "/v1/responses", `{"model":"m","input":"x"}`, []string{TokensHeader + ": 2"}, "m", "completed", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := fast
			opts.APIKey = "k"
			st, ts := start(t, opts)
			headers := append([]string{"Authorization: Bearer k"}, tc.headers...)
			if strings.HasPrefix(tc.path, "/openai/") {
				headers = tc.headers
			}
			status, b := do(t, ts, http.MethodPost, tc.path, tc.body, headers...)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			var r wireResponse
			decodeStrict(t, string(b), &r)
			r.checkFinal(t, tc.model, tc.status, tc.tokens)
			var req responsesRequest
			_ = json.Unmarshal([]byte(tc.body), &req)
			if deref(r.Instructions) != deref(req.Instructions) || deref(r.User) != deref(req.User) || r.PreviousResponseID != nil || r.Background {
				t.Fatalf("echoed fields: %s", b)
			}
			if last := st.LastRequest(); last.Path != strings.Split(tc.path, "?")[0] || string(last.Body) != tc.body {
				t.Fatalf("recorded %+v", last)
			}
		})
	}
}

func TestResponsesCreateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body  string
		status      int
		param, code string
	}{
		{"input a number", `{"model":"m","input":5}`, 400, "input", ""},
		{"input items not objects", `{"model":"m","input":["a"]}`, 400, "input", ""},
		{"max_output_tokens zero", `{"model":"m","input":"x","max_output_tokens":0}`, 400, "max_output_tokens", ""},
		{"background without store", `{"model":"m","input":"x","background":true,"store":false}`, 400, "background", ""},
		{"unknown previous response", `{"model":"m","input":"x","previous_response_id":"resp_nope"}`, 404, "previous_response_id", "previous_response_not_found"},
		{"bad json", `{"model":`, 400, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, fast)
			status, b := do(t, ts, http.MethodPost, "/v1/responses", tc.body)
			wantError(t, status, b, tc.status, tc.param, tc.code)
		})
	}
}

// TestResponsesPreviousNotFound pins OpenAI's exact error body.
func TestResponsesPreviousNotFound(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	status, b := do(t, ts, http.MethodPost, "/v1/responses", `{"model":"m","input":"x","previous_response_id":"resp_abc"}`)
	want := `{"error":{"message":"Previous response with id 'resp_abc' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}`
	if status != http.StatusNotFound || string(bytes.TrimSpace(b)) != want {
		t.Fatalf("status %d body %s\nwant 404 %s", status, b, want)
	}
}

func TestResponsesStream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		tokens           int
		final            string // the last event's type
		obfuscation      bool
	}{
		{"completed", "/v1/responses", `{"model":"m","input":"hi","stream":true}`, 5, "response.completed", true},
		{"azure v1", "/openai/v1/responses", `{"model":"m","input":"hi","stream":true}`, 5, "response.completed", true},
		{"incomplete", "/v1/responses", `{"model":"m","input":"hi","stream":true,"max_output_tokens":2}`, 2, "response.incomplete", true},
		{"no obfuscation", "/v1/responses", `{"model":"m","input":"hi","stream":true,"stream_options":{"include_obfuscation":false}}`, 5, "response.completed", false},
		{"not stored", "/v1/responses", `{"model":"m","input":"hi","stream":true,"store":false}`, 5, "response.completed", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, ts := start(t, fast)
			resp := mustPost(t, ts, tc.path, tc.body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := readNamedEvents(t, resp.Body)
			want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
			for range tc.tokens {
				want = append(want, "response.output_text.delta")
			}
			want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", tc.final)
			var names []string
			for _, e := range events {
				names = append(names, e.name)
			}
			if strings.Join(names, " ") != strings.Join(want, " ") {
				t.Fatalf("events\n got %v\nwant %v", names, want)
			}

			var deltas strings.Builder
			var respID, itemID string
			var final wireResponse
			lastEmit := int64(0)
			for i, e := range events {
				var ev struct {
					Type           string          `json:"type"`
					SequenceNumber *int            `json:"sequence_number"`
					Response       *wireResponse   `json:"response"`
					ItemID         string          `json:"item_id"`
					OutputIndex    *int            `json:"output_index"`
					ContentIndex   *int            `json:"content_index"`
					Delta          *string         `json:"delta"`
					Text           *string         `json:"text"`
					Item           json.RawMessage `json:"item"`
					Part           *struct {
						Type string `json:"type"`
						Text string `json:"text"`
					} `json:"part"`
					Logprobs    json.RawMessage `json:"logprobs"`
					Obfuscation *string         `json:"obfuscation"`
					EmitNS      int64           `json:"stub_emit_ns"`
				}
				decodeStrict(t, e.data, &ev)
				if ev.Type != e.name {
					t.Fatalf("event %d: event line %q, type %q", i, e.name, ev.Type)
				}
				if ev.SequenceNumber == nil || *ev.SequenceNumber != i {
					t.Fatalf("event %d: sequence_number %v", i, ev.SequenceNumber)
				}
				if ev.EmitNS < lastEmit {
					t.Fatalf("event %d: stub_emit_ns went back", i)
				}
				lastEmit = ev.EmitNS
				switch e.name {
				case "response.created", "response.in_progress":
					if ev.Response == nil || ev.Response.Status != "in_progress" || len(ev.Response.Output) != 0 || ev.Response.Usage != nil {
						t.Fatalf("event %d: %s", i, e.data)
					}
					if respID == "" {
						respID = ev.Response.ID
					}
					if ev.Response.ID != respID {
						t.Fatalf("event %d: response id %q, was %q", i, ev.Response.ID, respID)
					}
				case "response.output_item.added", "response.output_item.done":
					var item struct{ ID, Type, Status, Role string }
					decodeStrict(t, string(ev.Item), &item)
					if ev.OutputIndex == nil || *ev.OutputIndex != 0 || item.Type != "message" || item.Role != "assistant" {
						t.Fatalf("event %d: %s", i, e.data)
					}
					if itemID == "" {
						itemID = item.ID
					}
					if item.ID != itemID || (e.name == "response.output_item.added") != (item.Status == "in_progress") {
						t.Fatalf("event %d: item %+v", i, item)
					}
				case "response.content_part.added", "response.content_part.done",
					"response.output_text.delta", "response.output_text.done":
					if ev.ItemID != itemID || ev.OutputIndex == nil || *ev.OutputIndex != 0 || ev.ContentIndex == nil || *ev.ContentIndex != 0 {
						t.Fatalf("event %d: indexes: %s", i, e.data)
					}
					switch e.name {
					case "response.output_text.delta":
						if ev.Delta == nil || string(ev.Logprobs) != "[]" || (ev.Obfuscation != nil) != tc.obfuscation {
							t.Fatalf("event %d: %s", i, e.data)
						}
						deltas.WriteString(*ev.Delta)
					case "response.output_text.done":
						if ev.Text == nil || *ev.Text != deltas.String() {
							t.Fatalf("output_text.done %s, deltas %q", e.data, deltas.String())
						}
					default:
						if ev.Part == nil || ev.Part.Type != "output_text" || (e.name == "response.content_part.done") != (ev.Part.Text != "") {
							t.Fatalf("event %d: %s", i, e.data)
						}
					}
				default: // the final event
					if ev.Response == nil || ev.Response.ID != respID {
						t.Fatalf("final event: %s", e.data)
					}
					final = *ev.Response
				}
			}
			status := strings.TrimPrefix(tc.final, "response.")
			final.checkFinal(t, "m", status, tc.tokens)
			if final.text(t) != deltas.String() || final.Output[0].ID != itemID {
				t.Fatalf("final text %q, deltas %q", final.text(t), deltas.String())
			}
			// Stored unless store is false: GET returns the final response.
			code, b := do(t, ts, http.MethodGet, "/v1/responses/"+respID, "")
			if strings.Contains(tc.body, `"store":false`) {
				wantError(t, code, b, http.StatusNotFound, "", "not_found")
			} else {
				var got wireResponse
				decodeStrict(t, string(b), &got)
				if code != http.StatusOK || got.Status != status || got.text(t) != deltas.String() {
					t.Fatalf("GET after the stream: %d %s", code, b)
				}
			}
			waitFor(t, "the stream counted", func() bool { return st.Stats().Completed == 1 })
			if got := st.Stats(); got.Streams != 1 || got.Events != int64(len(events)) || got.Canceled != 0 {
				t.Fatalf("Stats %+v", got)
			}
		})
	}
}

// TestResponsesStreamTiming checks lower bounds only: the first delta no
// earlier than TTFT, each next one no earlier than Interval later.
func TestResponsesStreamTiming(t *testing.T) {
	t.Parallel()
	const ttft, interval = 50 * time.Millisecond, 10 * time.Millisecond
	_, ts := start(t, Options{TTFT: ttft, Interval: interval, Tokens: 3})
	sent := time.Now()
	resp := mustPost(t, ts, "/v1/responses", `{"model":"m","input":"x","stream":true}`)
	k := 0
	for _, e := range readNamedEvents(t, resp.Body) {
		if e.name != "response.output_text.delta" {
			continue
		}
		var ev struct {
			EmitNS int64 `json:"stub_emit_ns"`
		}
		_ = json.Unmarshal([]byte(e.data), &ev)
		if at, due := time.Duration(ev.EmitNS-sent.UnixNano()), ttft+time.Duration(k)*interval; at < due {
			t.Errorf("delta %d stamped %v after the request, want >= %v", k, at, due)
		}
		k++
	}
}

func TestResponsesStreamFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fault string
		names []string // the events before the fault
		last  string   // what ends the stream
	}{
		{"error_after=2", []string{"response.created", "response.in_progress", "error"}, "error"},
		{"error_after=0", []string{"error"}, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			st, ts := start(t, fast)
			resp := mustPost(t, ts, "/v1/responses", `{"model":"m","input":"x","stream":true}`, FaultHeader+": "+tc.fault)
			events := readNamedEvents(t, resp.Body)
			var names []string
			for _, e := range events {
				names = append(names, e.name)
			}
			if strings.Join(names, " ") != strings.Join(tc.names, " ") {
				t.Fatalf("events %v, want %v", names, tc.names)
			}
			var e struct{ Type, Code, Message string }
			decodeStrict(t, events[len(events)-1].data, &e)
			if e.Type != "error" || e.Code != "stub_error" || e.Message == "" {
				t.Fatalf("error event %s", events[len(events)-1].data)
			}
			waitFor(t, "the stream to end", func() bool { return st.Stats().ActiveStreams == 0 })
			if got := st.Stats(); got.Completed != 0 || got.Canceled != 0 {
				t.Fatalf("Stats %+v", got)
			}
		})
	}
	t.Run("drop leaves the stored response cancelled", func(t *testing.T) {
		t.Parallel()
		_, ts := start(t, fast)
		resp := mustPost(t, ts, "/v1/responses", `{"model":"m","input":"x","stream":true}`, FaultHeader+": drop_after=1")
		r := bufio.NewReader(resp.Body)
		_, _ = r.ReadString('\n') // event: response.created
		data, _ := r.ReadString('\n')
		var ev struct {
			Response wireResponse `json:"response"`
		}
		decodeStrict(t, strings.TrimPrefix(data, "data: "), &ev)
		if _, err := io.ReadAll(r); err == nil {
			t.Fatal("the stream ended cleanly; want it cut")
		}
		waitFor(t, "the response cancelled", func() bool {
			_, b := do(t, ts, http.MethodGet, "/v1/responses/"+ev.Response.ID, "")
			return bytes.Contains(b, []byte(`"status":"cancelled"`))
		})
	})
}

func TestResponsesStored(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	_, other := start(t, fast)
	r := createResponse(t, ts, `{"model":"m","input":"hi"}`)
	path := "/v1/responses/" + r.ID

	for _, p := range []string{path, "/openai/v1/responses/" + r.ID} {
		code, b := do(t, ts, http.MethodGet, p, "")
		var got wireResponse
		decodeStrict(t, string(b), &got)
		if code != http.StatusOK || got.ID != r.ID || got.Status != "completed" || got.text(t) != r.text(t) {
			t.Fatalf("GET %s: %d %s", p, code, b)
		}
	}
	// Another stub does not know the id, for any route.
	for _, m := range []struct{ method, path string }{
		{http.MethodGet, path}, {http.MethodDelete, path}, {http.MethodPost, path + "/cancel"}, {http.MethodGet, path + "/input_items"},
	} {
		code, b := do(t, other, m.method, m.path, "")
		e := wantError(t, code, b, http.StatusNotFound, "", "not_found")
		if e.Message != "Response with id '"+r.ID+"' not found." {
			t.Fatalf("message %q", e.Message)
		}
	}
	code, b := do(t, other, http.MethodPost, "/v1/responses", `{"model":"m","input":"x","previous_response_id":"`+r.ID+`"}`)
	wantError(t, code, b, http.StatusNotFound, "previous_response_id", "previous_response_not_found")

	code, b = do(t, ts, http.MethodDelete, path, "")
	if code != http.StatusOK || string(bytes.TrimSpace(b)) != `{"id":"`+r.ID+`","object":"response","deleted":true}` {
		t.Fatalf("DELETE: %d %s", code, b)
	}
	code, b = do(t, ts, http.MethodGet, path, "")
	wantError(t, code, b, http.StatusNotFound, "", "not_found")
	code, b = do(t, ts, http.MethodDelete, path, "")
	wantError(t, code, b, http.StatusNotFound, "", "not_found")
}

func TestResponsesIDsUnique(t *testing.T) {
	t.Parallel()
	_, a := start(t, fast)
	_, b := start(t, fast)
	seen := map[string]bool{}
	for i := range 20 {
		ts := a
		if i%2 == 1 {
			ts = b
		}
		r := createResponse(t, ts, `{"model":"m","input":"same"}`)
		for _, id := range []string{r.ID, r.Output[0].ID} {
			if seen[id] {
				t.Fatalf("id %s twice", id)
			}
			seen[id] = true
		}
	}
}

func TestResponsesPreviousResponse(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	first := createResponse(t, ts, `{"model":"m","input":"hi"}`)
	body := `{"model":"m","input":"and then?","previous_response_id":"` + first.ID + `"}`
	second := createResponse(t, ts, body)
	second.checkFinal(t, "m", "completed", 5)
	if deref(second.PreviousResponseID) != first.ID {
		t.Fatalf("previous_response_id %v", second.PreviousResponseID)
	}
	// The previous turn counts as input, as OpenAI bills it.
	if want := len(body)/4 + first.Usage.TotalTokens; second.Usage.InputTokens != want {
		t.Fatalf("input_tokens %d, want %d", second.Usage.InputTokens, want)
	}
	// A response stored with store: false cannot be continued.
	hidden := createResponse(t, ts, `{"model":"m","input":"hi","store":false}`)
	code, b := do(t, ts, http.MethodPost, "/v1/responses", `{"model":"m","input":"x","previous_response_id":"`+hidden.ID+`"}`)
	wantError(t, code, b, http.StatusNotFound, "previous_response_id", "previous_response_not_found")
	code, b = do(t, ts, http.MethodGet, "/v1/responses/"+hidden.ID, "")
	wantError(t, code, b, http.StatusNotFound, "", "not_found")
}

func TestResponsesCancel(t *testing.T) {
	t.Parallel()
	t.Run("not background", func(t *testing.T) {
		t.Parallel()
		_, ts := start(t, fast)
		r := createResponse(t, ts, `{"model":"m","input":"hi"}`)
		code, b := do(t, ts, http.MethodPost, "/v1/responses/"+r.ID+"/cancel", "")
		wantError(t, code, b, http.StatusBadRequest, "", "")
	})
	t.Run("background in progress", func(t *testing.T) {
		t.Parallel()
		_, ts := start(t, Options{TTFT: time.Hour, Tokens: 5})
		r := createResponse(t, ts, `{"model":"m","input":"hi","background":true}`)
		if r.Status != "queued" || !r.Background || len(r.Output) != 0 || r.Usage != nil {
			t.Fatalf("created %+v", r)
		}
		path := "/v1/responses/" + r.ID
		statusOf := func(method, path string) string {
			code, b := do(t, ts, method, path, "")
			var got wireResponse
			decodeStrict(t, string(b), &got)
			if code != http.StatusOK || got.ID != r.ID {
				t.Fatalf("%s %s: %d %s", method, path, code, b)
			}
			return got.Status
		}
		if s := statusOf(http.MethodGet, path); s != "in_progress" {
			t.Fatalf("GET: status %q", s)
		}
		if s := statusOf(http.MethodPost, "/openai/v1/responses/"+r.ID+"/cancel"); s != "cancelled" {
			t.Fatalf("cancel: status %q", s)
		}
		if s := statusOf(http.MethodGet, path); s != "cancelled" {
			t.Fatalf("GET after cancel: status %q", s)
		}
		if s := statusOf(http.MethodPost, path+"/cancel"); s != "cancelled" {
			t.Fatalf("second cancel: status %q", s)
		}
	})
	t.Run("background finished", func(t *testing.T) {
		t.Parallel()
		_, ts := start(t, Options{TTFT: 20 * time.Millisecond, Interval: time.Millisecond, Tokens: 4})
		r := createResponse(t, ts, `{"model":"m","input":"hi","background":true}`)
		var got wireResponse
		waitFor(t, "the background response to complete", func() bool {
			_, b := do(t, ts, http.MethodGet, "/v1/responses/"+r.ID, "")
			got = wireResponse{}
			decodeStrict(t, string(b), &got)
			return got.Status == "completed"
		})
		got.checkFinal(t, "m", "completed", 4)
		code, b := do(t, ts, http.MethodPost, "/v1/responses/"+r.ID+"/cancel", "")
		var after wireResponse
		decodeStrict(t, string(b), &after)
		if code != http.StatusOK || after.Status != "completed" || after.text(t) != got.text(t) {
			t.Fatalf("cancel after completion: %d %s", code, b)
		}
	})
}

func TestResponsesInputItems(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	r := createResponse(t, ts, `{"model":"m","input":[`+
		`{"role":"user","content":"first"},`+
		`{"role":"assistant","content":"second"},`+
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"third"}]},`+
		`{"type":"function_call_output","call_id":"call_1","output":"fourth"}]}`)
	type item struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Role    string `json:"role"`
		Status  string `json:"status"`
		CallID  string `json:"call_id"`
		Output  string `json:"output"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	type page struct {
		Object  string  `json:"object"`
		Data    []item  `json:"data"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
		HasMore bool    `json:"has_more"`
	}
	list := func(t *testing.T, query string) page {
		t.Helper()
		code, b := do(t, ts, http.MethodGet, "/v1/responses/"+r.ID+"/input_items"+query, "")
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, b)
		}
		var p page
		decodeStrict(t, string(b), &p)
		if p.Object != "list" {
			t.Fatalf("object %q", p.Object)
		}
		if len(p.Data) > 0 && (deref(p.FirstID) != p.Data[0].ID || deref(p.LastID) != p.Data[len(p.Data)-1].ID) {
			t.Fatalf("first_id/last_id: %s", b)
		}
		return p
	}
	text := func(it item) string {
		if it.Type == "function_call_output" {
			return it.Output
		}
		if len(it.Content) != 1 {
			return "?"
		}
		return it.Content[0].Text
	}
	asc := list(t, "?order=asc")
	if len(asc.Data) != 4 || asc.HasMore {
		t.Fatalf("asc: %+v", asc)
	}
	wantTypes := []string{"message/input_text", "message/output_text", "message/input_text", "function_call_output/"}
	for i, it := range asc.Data {
		partType := ""
		if it.Type == "message" {
			partType = it.Content[0].Type
			if it.Status != "completed" || !strings.HasPrefix(it.ID, "msg_") {
				t.Fatalf("item %d: %+v", i, it)
			}
		}
		if it.ID == "" || it.Type+"/"+partType != wantTypes[i] || text(it) != []string{"first", "second", "third", "fourth"}[i] {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	desc := list(t, "")
	if len(desc.Data) != 4 || desc.Data[0].ID != asc.Data[3].ID || desc.Data[3].ID != asc.Data[0].ID {
		t.Fatalf("default order is not newest first: %+v", desc)
	}
	p := list(t, "?order=asc&limit=2")
	if len(p.Data) != 2 || !p.HasMore || p.Data[1].ID != asc.Data[1].ID {
		t.Fatalf("limit=2: %+v", p)
	}
	p = list(t, "?order=asc&limit=2&after="+deref(p.LastID))
	if len(p.Data) != 2 || p.HasMore || p.Data[0].ID != asc.Data[2].ID {
		t.Fatalf("second page: %+v", p)
	}
	if p := list(t, "?after="+asc.Data[0].ID); len(p.Data) != 0 || p.FirstID != nil || p.HasMore {
		t.Fatalf("after the oldest, newest first: %+v", p)
	}

	single := createResponse(t, ts, `{"model":"m","input":"just this"}`)
	code, b := do(t, ts, http.MethodGet, "/openai/v1/responses/"+single.ID+"/input_items", "")
	if code != http.StatusOK || !bytes.Contains(b, []byte(`"content":[{"text":"just this","type":"input_text"}]`)) || !bytes.Contains(b, []byte(`"role":"user"`)) {
		t.Fatalf("string input: %d %s", code, b)
	}

	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?order=up", "?after=msg_nope"} {
		code, b := do(t, ts, http.MethodGet, "/v1/responses/"+r.ID+"/input_items"+q, "")
		if code != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", q, code, b)
		}
		errorBody(t, b)
	}
}

func TestResponsesRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/responses", 405, "POST"},
		{"PUT", "/v1/responses/resp_1", 405, "GET, DELETE"},
		{"GET", "/v1/responses/resp_1/cancel", 405, "POST"},
		{"POST", "/v1/responses/resp_1/input_items", 405, "GET"},
		{"GET", "/v1/responses/", 404, ""},
		{"GET", "/v1/responses/resp_1/", 404, ""},
		{"GET", "/v1/responses/resp_1/other", 404, ""},
		{"POST", "/openai/deployments/d/responses?api-version=1", 404, ""},
		{"GET", "/openai/deployments/d/responses/resp_1?api-version=1", 404, ""},
		{"GET", "/v1/responses/resp_1", 404, ""}, // a route, but no such response
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, fast)
			resp, b := doResp(t, ts, tc.method, tc.path, "")
			if resp.StatusCode != tc.status || resp.Header.Get("Allow") != tc.allow {
				t.Fatalf("status %d Allow %q, want %d %q: %s", resp.StatusCode, resp.Header.Get("Allow"), tc.status, tc.allow, b)
			}
			errorBody(t, b)
		})
	}
}

// TestRequests is how a test checks what the stub received across several
// requests: here, that no Responses request carried stream_options.
func TestRequests(t *testing.T) {
	t.Parallel()
	st, ts := start(t, fast)
	if got := st.Requests(); len(got) != 0 {
		t.Fatalf("before any request: %d", len(got))
	}
	bodies := []string{
		`{"model":"m","input":"a","stream":true}`,
		`{"model":"m","input":"b"}`,
	}
	for _, b := range bodies {
		readAll(t, mustPost(t, ts, "/v1/responses", b, "X-Trace: "+b[len(b)-4:]))
	}
	got := st.Requests()
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	for i, rec := range got {
		if rec.Method != "POST" || rec.Path != "/v1/responses" || string(rec.Body) != bodies[i] {
			t.Fatalf("request %d: %+v", i, rec)
		}
		var fields map[string]json.RawMessage
		decodeStrict(t, string(rec.Body), &fields)
		if _, ok := fields["stream_options"]; ok {
			t.Fatalf("request %d carried stream_options: %s", i, rec.Body)
		}
	}
	got[0].Header.Set("X-Trace", "changed")
	got[0].Body[0] = 'X'
	if again := st.Requests()[0]; again.Header.Get("X-Trace") == "changed" || again.Body[0] == 'X' {
		t.Fatal("Requests shares its header or body with the caller")
	}
}

func TestRequestsBounded(t *testing.T) {
	t.Parallel()
	st, ts := start(t, fast)
	const n = historySize + 6
	for i := range n {
		readAll(t, mustPost(t, ts, "/v1/embeddings", `{"input":"`+strconv.Itoa(i)+`"}`))
	}
	got := st.Requests()
	if len(got) != historySize {
		t.Fatalf("%d requests kept, want %d", len(got), historySize)
	}
	for i, rec := range got {
		if want := `{"input":"` + strconv.Itoa(n-historySize+i) + `"}`; string(rec.Body) != want {
			t.Fatalf("request %d: %s, want %s", i, rec.Body, want)
		}
	}
	if last := st.LastRequest(); string(last.Body) != `{"input":"`+strconv.Itoa(n-1)+`"}` {
		t.Fatalf("LastRequest %s", last.Body)
	}
	// Bodies are kept up to historyBodies in all, the newest always.
	big := `{"input":"` + strings.Repeat("x", historyBodies/3) + `"}`
	for range 4 {
		readAll(t, mustPost(t, ts, "/v1/embeddings", big))
	}
	got = st.Requests()
	kept := 0
	for _, rec := range got {
		kept += len(rec.Body)
	}
	if kept > historyBodies || string(got[len(got)-1].Body) != big || got[len(got)-4].Body != nil {
		t.Fatalf("kept %d body bytes; newest kept %v; oldest big one dropped %v", kept, string(got[len(got)-1].Body) == big, got[len(got)-4].Body == nil)
	}
}

// TestResponseRequiredFields: the stub's Response objects carry every
// field the Open Responses schema requires (eight were once missing, and
// tools[].strict), whole and in a stream's events;
// completed_at is null until the response completed.
func TestResponseRequiredFields(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	required := []string{"id", "object", "created_at", "completed_at", "status", "model", "output", "tools", "tool_choice",
		"presence_penalty", "frequency_penalty", "top_logprobs", "max_tool_calls", "service_tier", "safety_identifier",
		"prompt_cache_key", "parallel_tool_calls", "truncation", "text", "reasoning", "temperature", "top_p", "usage", "metadata"}
	check := func(t *testing.T, raw json.RawMessage, completed bool) {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range required {
			if _, ok := m[k]; !ok {
				t.Errorf("response lacks %q: %s", k, raw)
			}
		}
		if got := string(m["completed_at"]) != "null"; got != completed {
			t.Errorf("completed_at %s, completed %v", m["completed_at"], completed)
		}
		var tools []map[string]any
		_ = json.Unmarshal(m["tools"], &tools)
		for _, tl := range tools {
			if tl["strict"] != true {
				t.Errorf("tool %v lacks strict", tl)
			}
		}
	}
	body := `{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"none"}`
	status, b := do(t, ts, "POST", "/v1/responses", body)
	if status != 200 {
		t.Fatalf("%d %s", status, b)
	}
	check(t, b, true)

	resp := mustPost(t, ts, "/v1/responses", strings.Replace(body, `"input"`, `"stream":true,"input"`, 1))
	events, err := newSSE(resp.Body).all()
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, ev := range events {
		var e struct {
			Type     string
			Response json.RawMessage
		}
		if json.Unmarshal([]byte(ev), &e) != nil || e.Response == nil {
			continue
		}
		seen++
		check(t, e.Response, e.Type == "response.completed")
	}
	if seen < 3 {
		t.Fatalf("%d events carry a response", seen)
	}
}

// TestCompactAndInputTokens: POST responses/compact answers a
// response.compaction with the user's messages, a compaction item and
// usage; POST
// responses/input_tokens counts the prompt (both on the Azure v1 path
// too).
func TestCompactAndInputTokens(t *testing.T) {
	t.Parallel()
	_, ts := start(t, fast)
	for _, root := range []string{"/v1", "/openai/v1"} {
		status, b := do(t, ts, "POST", root+"/responses/compact",
			`{"model":"m","input":[{"role":"user","content":"a long conversation"},{"role":"assistant","content":"yes"},{"type":"function_call_output","call_id":"c","output":"x"}]}`)
		var c struct {
			Object string
			Output []struct {
				Type, Role       string
				EncryptedContent string `json:"encrypted_content"`
			}
			Usage struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		// The user's messages, then the compaction item.
		if err := json.Unmarshal(b, &c); status != 200 || err != nil || c.Object != "response.compaction" || len(c.Output) != 2 ||
			c.Output[0].Type != "message" || c.Output[0].Role != "user" ||
			c.Output[1].Type != "compaction" || c.Output[1].EncryptedContent == "" || c.Usage.InputTokens <= 0 || c.Usage.OutputTokens <= 0 {
			t.Fatalf("%s compact: %d %s", root, status, b)
		}
		status, b = do(t, ts, "POST", root+"/responses/input_tokens", `{"model":"m","input":"count me"}`)
		var n struct {
			Object      string
			InputTokens int `json:"input_tokens"`
		}
		if err := json.Unmarshal(b, &n); status != 200 || err != nil || n.Object != "response.input_tokens" || n.InputTokens <= 0 {
			t.Fatalf("%s input_tokens: %d %s", root, status, b)
		}
	}
	if status, _ := do(t, ts, "POST", "/v1/responses/compact", `{}`); status != 400 {
		t.Fatalf("compact without a model: %d", status)
	}
}

// TestCompactionTrigger: an input ending with a compaction_trigger item
// (Codex's remote compaction, v2) is answered with exactly one output
// item, a compaction, whole and streamed (created, in_progress, the item
// added and done, completed), with its output tokens in usage and in the
// stub's Stats.
func TestCompactionTrigger(t *testing.T) {
	t.Parallel()
	const input = `"input":[{"role":"user","content":"a long conversation"},{"type":"function_call_output","call_id":"c1","output":"stub"},{"type":"compaction_trigger"}]`
	type item struct {
		ID               string `json:"id"`
		Type             string `json:"type"`
		EncryptedContent string `json:"encrypted_content"`
	}
	check := func(t *testing.T, output []item, out int) {
		t.Helper()
		if len(output) != 1 || output[0].Type != "compaction" || output[0].EncryptedContent != compactionContent || !strings.HasPrefix(output[0].ID, "cmp_") || out != compactionTokens {
			t.Fatalf("output %+v, %d output tokens", output, out)
		}
	}
	t.Run("whole", func(t *testing.T) {
		t.Parallel()
		st, ts := start(t, fast)
		status, b := do(t, ts, "POST", "/v1/responses", `{"model":"m","tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}],`+input+`}`)
		var r struct {
			Output []item `json:"output"`
			Usage  struct {
				OutputTokens int `json:"output_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &r); status != 200 || err != nil {
			t.Fatalf("%d %s", status, b)
		}
		check(t, r.Output, r.Usage.OutputTokens)
		if got := st.Stats().CompletionTokens; got != compactionTokens {
			t.Fatalf("Stats: %d completion tokens", got)
		}
	})
	t.Run("streamed", func(t *testing.T) {
		t.Parallel()
		st, ts := start(t, fast)
		resp := mustPost(t, ts, "/openai/v1/responses", `{"model":"m","stream":true,`+input+`}`)
		var names []string
		var done []item
		var out int
		for _, e := range readNamedEvents(t, resp.Body) {
			names = append(names, e.name)
			var ev struct {
				Item     *item `json:"item"`
				Response *struct {
					Usage *struct {
						OutputTokens int `json:"output_tokens"`
					} `json:"usage"`
				} `json:"response"`
			}
			decodeStrict(t, e.data, &ev)
			if e.name == "response.output_item.done" {
				done = append(done, *ev.Item)
			}
			if e.name == "response.completed" {
				out = ev.Response.Usage.OutputTokens
			}
		}
		want := "response.created response.in_progress response.output_item.added response.output_item.done response.completed"
		if strings.Join(names, " ") != want {
			t.Fatalf("events %v, want %s", names, want)
		}
		check(t, done, out)
		if got := st.Stats().CompletionTokens; got != compactionTokens {
			t.Fatalf("Stats: %d completion tokens", got)
		}
	})
}
