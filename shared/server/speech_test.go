package server

// A test-only operation whose answer is not JSON, whole in this file as a
// new operation is: a row, registered here as kind_test.go registers a
// backend kind, and its tests. Its answer is audio bytes, or an SSE stream
// of audio deltas when stream_format asks for one; the gateway routes,
// checks and relays it from its row alone.

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
)

// testSpeech reads a text aloud (OpenAI's /v1/audio/speech is its
// model; its stream's event names are this test's).
var testSpeech = request.Register(request.Spec{
	Path: "/v1/test/speech", API: "the test speech API", GenAI: "text_to_speech",
	Need: request.HasInput, NeedName: "input",
	Answer: request.AnswerBinary, Media: []string{"audio/"}, Trigger: request.TriggerStreamFormat,
	Meter: sse.Meter{End: []string{"speech.audio.done"}, Error: "error", Tokens: []string{"speech.audio.delta"},
		Bill: []string{"speech.audio.done"}, BillAt: sse.TopLevel, Floor: []string{"speech.audio.delta"}},
	Prompt:   prompt.Body{Never: []string{"model", "voice", "response_format", "speed", "stream_format"}, Prompt: []string{"input", "instructions"}},
	Fields:   []string{"model", "input", "voice", "response_format", "speed", "stream_format", "instructions"},
	Unbilled: true, NoOutput: true,
})

// TestTestSpeech: the registered row runs through the gateway end to end.
// Its binary answer is relayed byte for byte (bytes no JSON scanner
// would pass), a 200 that is not audio is a backend failure (502, never
// relayed), stream_format "sse" relays its own event table's stream and
// stops at its terminal event, and its body is checked as its row says.
func TestTestSpeech(t *testing.T) {
	t.Parallel()
	audio := append([]byte("ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x64"), bytes.Repeat([]byte{0x00, 0xff, '"', '{'}, 40_000)...)
	delta := "event: speech.audio.delta\ndata: {\"type\":\"speech.audio.delta\",\"audio\":\"AAAA\"}\n\n"
	done := "event: speech.audio.done\ndata: {\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":3,\"output_tokens\":9,\"total_tokens\":12}}\n\n"
	after := "event: speech.audio.delta\ndata: {\"type\":\"speech.audio.delta\",\"audio\":\"BBBB\"}\n\n"
	for _, tc := range []struct {
		name, body string
		// backend's answer
		ctype, answer string
		// what the client gets
		status int
		want   string
	}{
		{"audio bytes relayed as sent", `{"model":"m","input":"hello","voice":"alloy"}`, "audio/mpeg", string(audio), 200, string(audio)},
		{"stream_format audio is bytes too", `{"model":"m","input":"hello","stream_format":"audio"}`, "audio/wav", string(audio), 200, string(audio)},
		{"a 200 in JSON is no audio", `{"model":"m","input":"hello"}`, "application/json", `{"ok":true}`, 502, ""},
		{"a 200 in HTML is no audio", `{"model":"m","input":"hello"}`, "text/html", "<html>", 502, ""},
		{"stream_format sse streams its events", `{"model":"m","input":"hello","stream_format":"sse"}`, "text/event-stream",
			delta + delta + done + after, 200, delta + delta + done},
		{"stream: true is not this row's trigger", `{"model":"m","input":"hello","stream":true}`, "audio/mpeg", string(audio), 200, string(audio)},
		{"its required field", `{"model":"m","voice":"alloy"}`, "audio/mpeg", "", 400, ""},
		{"stream_format must be a string", `{"model":"m","input":"hello","stream_format":true}`, "audio/mpeg", "", 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got atomic.Value
			g := newTestGatewayWith(t, nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got.Store(r.URL.Path + " " + string(b))
				w.Header().Set("Content-Type", tc.ctype)
				_, _ = io.WriteString(w, tc.answer)
			}))
			resp, b := postPath(t, g, testSpeech.Path(), tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %.300q", resp.StatusCode, tc.status, b)
			}
			if tc.status != 200 {
				if !strings.Contains(string(b), `"error"`) {
					t.Fatalf("not an error JSON: %.300q", b)
				}
				return
			}
			if string(b) != tc.want || resp.Header.Get("Content-Type") != tc.ctype {
				t.Fatalf("client got %q (%d bytes), want %d bytes of %s", resp.Header.Get("Content-Type"), len(b), len(tc.want), tc.ctype)
			}
			if p, _ := got.Load().(string); !strings.HasPrefix(p, "/v1/test/speech {") {
				t.Fatalf("backend got %.100q", p)
			}
		})
	}
}
