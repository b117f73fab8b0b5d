package server

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestOutcomeAfterTerminalEvent: a stream whose terminal event reached the
// client is logged ok, even when the client hangs up before the backend's
// body ends (Codex closes right after response.completed; the relay then
// reads the backend's chunked terminator on a cancelled request). It was
// once logged client_gone. Every streaming operation is driven the same
// way.
func TestOutcomeAfterTerminalEvent(t *testing.T) {
	tests := []struct {
		name, path, body, stream, last string
	}{
		{"chat", "/v1/chat/completions", streamBody, sseAnswer, "data: [DONE]"},
		{"completions", "/v1/completions", `{"model":"m","stream":true,"prompt":"hi"}`,
			"data: {\"choices\":[{\"text\":\"hello\"}]}\n\ndata: [DONE]\n\n", "data: [DONE]"},
		{"responses", "/v1/responses", `{"model":"m","stream":true,"input":"hi","store":false}`,
			"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\"}}\n\n" +
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"x\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1,\"total_tokens\":4}}}\n\n",
			"event: response.completed"},
		{"messages", "/v1/messages", `{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			"event: message_stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The backend sends the whole stream, then holds its body open
			// (as a slow chunked terminator would) until the gateway gives
			// up on it.
			backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = w.Write([]byte(tt.stream))
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-time.After(30 * time.Second):
				}
			})
			b := httptest.NewServer(backend)
			t.Cleanup(b.Close)
			g := gatewayOnKind(t, "vllm", nil, b.URL)
			req, err := http.NewRequest(http.MethodPost, g.srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended before %q: %v", tt.last, err)
				}
				if strings.HasPrefix(line, tt.last) {
					break
				}
			}
			resp.Body.Close() // hang up right after the terminal event
			l := g.lastLog(t)
			if l["outcome"] != "ok" {
				t.Fatalf("outcome %v for a stream whose terminal event reached the client (log %v)", l["outcome"], l)
			}
		})
	}
}
