package stub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

const chatBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`
const chatUsageBody = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`

// checkStream reads a whole stream and checks it is OpenAI's chunk
// sequence: [role], tokens, finish, [usage], [DONE], nothing after.
func checkStream(t *testing.T, resp *http.Response, chat, includeUsage bool, tokens int, model, finish string, promptTokens int) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, readAll(t, resp))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	data, err := newSSE(resp.Body).all()
	if err != nil {
		t.Fatalf("reading stream: %v", err)
	}
	want := tokens + 2
	if chat {
		want++
	}
	if includeUsage {
		want++
	}
	if len(data) != want {
		t.Fatalf("got %d events, want %d: %q", len(data), want, data)
	}
	if data[len(data)-1] != "[DONE]" {
		t.Fatalf("last event %q, want [DONE]", data[len(data)-1])
	}
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	var id string
	var lastEmit int64
	var text strings.Builder
	for i, d := range data[:len(data)-1] {
		var c chunk
		decodeStrict(t, d, &c)
		var raw map[string]json.RawMessage
		decodeStrict(t, d, &raw)
		if id == "" {
			id = c.ID
		}
		if c.ID != id || c.Object != object || c.Model != model || c.Created == 0 {
			t.Fatalf("event %d: id/object/model/created: %s", i, d)
		}
		if c.EmitNS < lastEmit || c.EmitNS == 0 {
			t.Fatalf("event %d: stub_emit_ns %d after %d", i, c.EmitNS, lastEmit)
		}
		lastEmit = c.EmitNS
		u, hasUsage := raw["usage"]
		isUsage := includeUsage && i == len(data)-2
		switch {
		case isUsage:
			if len(c.Choices) != 0 || c.Usage == nil {
				t.Fatalf("usage chunk: %s", d)
			}
			wantU := usage{promptTokens, tokens, promptTokens + tokens}
			if *c.Usage != wantU {
				t.Fatalf("usage %+v, want %+v", *c.Usage, wantU)
			}
			continue
		case includeUsage && string(u) != "null":
			t.Fatalf("event %d: want \"usage\":null: %s", i, d)
		case !includeUsage && hasUsage:
			t.Fatalf("event %d: want no usage field: %s", i, d)
		}
		if len(c.Choices) != 1 || c.Choices[0].Index != 0 {
			t.Fatalf("event %d: choices: %s", i, d)
		}
		ch := c.Choices[0]
		isFinish := i == tokens && !chat || i == tokens+1 && chat
		if isFinish {
			if ch.FinishReason == nil || *ch.FinishReason != finish {
				t.Fatalf("finish chunk: %s", d)
			}
			continue
		}
		if ch.FinishReason != nil {
			t.Fatalf("event %d: finish_reason before the end: %s", i, d)
		}
		if chat && i == 0 {
			if ch.Delta == nil || ch.Delta.Role == nil || *ch.Delta.Role != "assistant" || ch.Delta.Content == nil || *ch.Delta.Content != "" {
				t.Fatalf("role chunk: %s", d)
			}
			continue
		}
		switch {
		case chat && ch.Delta != nil && ch.Delta.Content != nil && ch.Delta.Role == nil:
			text.WriteString(*ch.Delta.Content)
		case !chat && ch.Text != nil:
			text.WriteString(*ch.Text)
		default:
			t.Fatalf("event %d: not a token: %s", i, d)
		}
	}
	if got, want := text.String(), strings.Repeat(" tok", tokens); got != want {
		t.Fatalf("text %q, want %q", got, want)
	}
}

func TestStreamShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		chat, usage      bool
		model            string
	}{
		{"chat", "/v1/chat/completions", chatBody, true, false, "gpt-4o-mini"},
		{"chat with usage", "/v1/chat/completions", chatUsageBody, true, true, "gpt-4o-mini"},
		{"include_usage false", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, true, false, "m"},
		{"azure deployment", "/openai/deployments/dep1/chat/completions?api-version=2024-10-21", `{"stream":true,"stream_options":{"include_usage":true}}`, true, true, "dep1"},
		{"azure v1", "/openai/v1/chat/completions", chatUsageBody, true, true, "gpt-4o-mini"},
		{"completions", "/v1/completions", `{"model":"m","prompt":"x","stream":true}`, false, false, "m"},
		{"completions with usage", "/v1/completions", `{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`, false, true, "m"},
		{"azure completions", "/openai/deployments/d/completions?api-version=1", `{"prompt":"x","stream":true}`, false, false, "d"},
		{"model with quotes", "/v1/chat/completions", `{"model":"a\"b\\c</x>","stream":true}`, true, false, "a\"b\\c</x>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := fast
			opts.PromptTokens = 7
			_, ts := start(t, opts)
			resp := mustPost(t, ts, tc.path, tc.body)
			checkStream(t, resp, tc.chat, tc.usage, 5, tc.model, "stop", 7)
		})
	}
}

func TestStreamLength(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    Options
		body    string
		headers []string
		tokens  int
		finish  string
	}{
		{"default tokens", Options{TTFT: -1, Interval: -1}, chatUsageBody, nil, DefaultTokens, "stop"},
		{"no tokens", Options{TTFT: -1, Interval: -1, Tokens: -1}, chatUsageBody, nil, 0, "stop"},
		{"max_tokens cuts", fast, `{"model":"gpt-4o-mini","stream":true,"max_tokens":3,"stream_options":{"include_usage":true}}`, nil, 3, "length"},
		{"max_completion_tokens cuts", fast, `{"model":"gpt-4o-mini","stream":true,"max_completion_tokens":2,"stream_options":{"include_usage":true}}`, nil, 2, "length"},
		{"max_tokens above", fast, `{"model":"gpt-4o-mini","stream":true,"max_tokens":99,"stream_options":{"include_usage":true}}`, nil, 5, "stop"},
		{"tokens header", fast, chatUsageBody, []string{TokensHeader + ": 9"}, 9, "stop"},
		{"fast headers", Options{Tokens: 4}, chatUsageBody, []string{TTFTHeader + ": 0s", IntervalHeader + ": -1ms"}, 4, "stop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, tc.opts)
			resp := mustPost(t, ts, "/v1/chat/completions", tc.body, tc.headers...)
			checkStream(t, resp, true, true, tc.tokens, "gpt-4o-mini", tc.finish, max(len(tc.body)/4, 1))
		})
	}
}

func TestStreamBadShapeHeader(t *testing.T) {
	t.Parallel()
	for _, h := range []string{TokensHeader + ": -1", TokensHeader + ": x", TTFTHeader + ": 5", IntervalHeader + ": soon"} {
		t.Run(h, func(t *testing.T) {
			t.Parallel()
			_, ts := start(t, fast)
			resp := mustPost(t, ts, "/v1/chat/completions", chatBody, h)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			if e := errorBody(t, readAll(t, resp)); e.Code == nil || *e.Code != "stub_bad_header" {
				t.Fatalf("error %+v", e)
			}
		})
	}
}

// TestStreamTiming checks only lower bounds, which hold on any machine:
// the stub never writes a token before its schedule.
func TestStreamTiming(t *testing.T) {
	t.Parallel()
	const ttft, interval, tokens = 60 * time.Millisecond, 10 * time.Millisecond, 4
	_, ts := start(t, Options{TTFT: ttft, Interval: interval, Tokens: tokens})
	sent := time.Now()
	resp := mustPost(t, ts, "/v1/chat/completions", chatBody)
	sse := newSSE(resp.Body)
	var emits []int64
	for {
		d, err := sse.next()
		if err != nil {
			t.Fatal(err)
		}
		if len(emits) == 0 {
			if since := time.Since(sent); since < ttft {
				t.Fatalf("first event after %v, before TTFT %v", since, ttft)
			}
		}
		if d == "[DONE]" {
			break
		}
		var c chunk
		decodeStrict(t, d, &c)
		emits = append(emits, c.EmitNS)
	}
	// emits: role, 4 tokens, finish. Token k is due TTFT + k*Interval
	// after the request arrived, which is after sent.
	for k := range tokens {
		due := ttft + time.Duration(k)*interval
		if at := time.Duration(emits[1+k] - sent.UnixNano()); at < due {
			t.Errorf("token %d stamped %v after the request, want >= %v", k, at, due)
		}
	}
	if at := time.Duration(emits[0] - sent.UnixNano()); at < ttft {
		t.Errorf("role chunk stamped %v after the request, want >= %v", at, ttft)
	}
}

func TestStreamCanceled(t *testing.T) {
	t.Parallel()
	st, ts := start(t, Options{TTFT: -1, Interval: time.Hour, Tokens: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := post(t, ctx, ts, "/v1/chat/completions", chatBody)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sse := newSSE(resp.Body)
	for range 2 { // role, first token; the second token is an hour away
		if _, err := sse.next(); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.Stats().ActiveStreams; got != 1 {
		t.Fatalf("ActiveStreams %d, want 1", got)
	}
	cancel()
	waitFor(t, "the stream to end", func() bool { return st.Stats().ActiveStreams == 0 })
	got := st.Stats()
	// The prompt was read, and one token generated before the cancel.
	want := Stats{Requests: 1, Streams: 1, Canceled: 1, Events: 2, PromptTokens: int64(len(chatBody) / 4), CompletionTokens: 1}
	if got != want {
		t.Fatalf("Stats %+v, want %+v", got, want)
	}
}

func TestStreamCompletedStats(t *testing.T) {
	t.Parallel()
	st, ts := start(t, fast)
	const streams = 40
	errs := make(chan error, streams)
	for range streams {
		go func() {
			resp, err := post(t, context.Background(), ts, "/v1/chat/completions", chatUsageBody)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			_, err = newSSE(resp.Body).all()
			errs <- err
		}()
	}
	for range streams {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "streams to end", func() bool { return st.Stats().ActiveStreams == 0 })
	// role + 5 tokens + finish + usage + [DONE]
	want := Stats{Requests: streams, Streams: streams, Completed: streams, Events: streams * 9,
		PromptTokens: streams * int64(len(chatUsageBody)/4), CompletionTokens: streams * 5}
	if got := st.Stats(); got != want {
		t.Fatalf("Stats %+v, want %+v", got, want)
	}
}

// TestStepOrdering is the shape of the gateway's ordering test: the
// client must hold event k before the stub writes event k+1.
func TestStepOrdering(t *testing.T) {
	t.Parallel()
	step := make(chan struct{})
	st, ts := start(t, Options{Tokens: 3, Step: step})
	resp := mustPost(t, ts, "/v1/chat/completions", chatUsageBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sse := newSSE(resp.Body)
	const events = 1 + 3 + 1 + 1 + 1
	for k := range events {
		if got := st.Emitted(); got != int64(k) {
			t.Fatalf("before step %d: Emitted %d", k, got)
		}
		select {
		case step <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatalf("the stub never took step %d", k)
		}
		d, err := sse.next()
		if err != nil {
			t.Fatalf("event %d: %v", k, err)
		}
		if got := st.Emitted(); got > int64(k+1) {
			t.Fatalf("after event %d: Emitted %d, the stub ran ahead", k, got)
		}
		if k == events-1 && d != "[DONE]" {
			t.Fatalf("last event %q", d)
		}
		waitFor(t, "event "+strconv.Itoa(k)+" counted", func() bool { return st.Emitted() == int64(k+1) })
	}
	if _, err := sse.next(); err == nil {
		t.Fatal("an event after [DONE]")
	}
	waitFor(t, "stream completed", func() bool { return st.Stats().Completed == 1 })
}

// TestStepClose checks that Close releases a stream waiting for a step,
// and that the client sees the stream broken, not ended.
func TestStepClose(t *testing.T) {
	t.Parallel()
	st, ts := start(t, Options{Tokens: 3, Step: make(chan struct{})})
	resp := mustPost(t, ts, "/v1/chat/completions", chatBody)
	st.Close()
	if _, err := newSSE(resp.Body).all(); err == nil {
		t.Fatal("stream ended cleanly after Close; want an error")
	}
	waitFor(t, "stream counted canceled", func() bool { return st.Stats().Canceled == 1 })
}

func TestAppendEventNoAlloc(t *testing.T) {
	for _, a := range []answer{
		{id: "chatcmpl-stub-1", model: "m", chat: true, n: 1, tokens: 3, finish: "stop", promptTokens: 2, includeUsage: true, created: 1},
		{id: "chatcmpl-stub-2", model: "m", chat: true, n: 3, tokens: 9, finish: "stop", includeUsage: true, wd: newWording(true), seed: 7},
		{id: "cmpl-stub-3", model: "m", n: 2, tokens: 9, finish: "length", wd: newWording(true), seed: 1},
	} {
		var tm templates
		tm.render(a)
		buf := make([]byte, 0, 512)
		allocs := testing.AllocsPerRun(100, func() {
			for i := range tm.count() {
				ev, c, k := tm.at(i)
				buf = tm.appendEvent(buf[:0], ev, c, k, time.Now().UnixNano())
			}
		})
		if allocs != 0 {
			t.Fatalf("%s: %v allocations per stream of events, want 0", a.id, allocs)
		}
	}
}

// TestEventBytes pins the exact wire bytes, as a reader of the gateway's
// SSE scanner tests would expect them.
func TestEventBytes(t *testing.T) {
	t.Parallel()
	head := `data: {"id":"chatcmpl-stub-7","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o",`
	tests := []struct {
		name         string
		includeUsage bool
		want         []string
	}{
		{"with usage", true, []string{
			head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null,"stub_emit_ns":42}` + "\n\n",
			head + `"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":null,"stub_emit_ns":42}` + "\n\n",
			head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"usage":null,"stub_emit_ns":42}` + "\n\n",
			head + `"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10},"stub_emit_ns":42}` + "\n\n",
			"data: [DONE]\n\n",
		}},
		{"without usage", false, []string{
			head + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"stub_emit_ns":42}` + "\n\n",
			head + `"choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"stub_emit_ns":42}` + "\n\n",
			head + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"stub_emit_ns":42}` + "\n\n",
			"data: [DONE]\n\n",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var tm templates
			tm.render(answer{id: "chatcmpl-stub-7", created: 1700000000, model: "gpt-4o", chat: true, tokens: 1, finish: "length", promptTokens: 9, includeUsage: tc.includeUsage})
			if tm.count() != len(tc.want) {
				t.Fatalf("count %d, want %d", tm.count(), len(tc.want))
			}
			for i, want := range tc.want {
				ev, c, k := tm.at(i)
				if got := string(tm.appendEvent(nil, ev, c, k, 42)); got != want {
					t.Errorf("event %d:\n got %s\nwant %s", i, got, want)
				}
			}
		})
	}
}

// TestIgnoreMaxTokens: a stub that ignores the output cap generates its
// Tokens whatever the request asks, and counts them; one that honours it
// stops at the cap.
func TestIgnoreMaxTokens(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","stream":true,"max_completion_tokens":2,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprint("ignore=", ignore), func(t *testing.T) {
			opts := fast
			opts.IgnoreMaxTokens = ignore
			st, ts := start(t, opts)
			resp, err := post(t, context.Background(), ts, "/v1/chat/completions", body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := newSSE(resp.Body).all(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the stream to end", func() bool { return st.Stats().ActiveStreams == 0 })
			want := int64(2)
			if ignore {
				want = 5
			}
			if got := st.Stats(); got.CompletionTokens != want || got.PromptTokens != int64(len(body)/4) {
				t.Fatalf("Stats %+v, want %d completion tokens", got, want)
			}
		})
	}
}
