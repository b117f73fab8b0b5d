package server

// Nothing of a backend's answer reaches a caller unless the gateway
// means it to.

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestJSONAnswerChecked: a non-streaming success that is not the JSON the
// operation returns, or that ends early, is a backend failure: the next
// endpoint answers, and with none left the caller gets 502
// upstream_bad_response, never a 200 with a page or half a JSON object.
func TestJSONAnswerChecked(t *testing.T) {
	good := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	bad := map[string]http.HandlerFunc{
		"html page": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>sign in</html>")
		},
		"SSE body to a JSON request": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[]}\n\ndata: [DONE]\n\n")
		},
		"shorter than its Content-Length": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "200")
			_, _ = io.WriteString(w, `{"choices":[{"message":`)
		},
		"half a JSON object": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"o`)
		},
	}
	for name, h := range bad {
		t.Run(name+", alone", func(t *testing.T) {
			g := newTestGateway(t, h)
			resp, b := g.post(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 502 || errorCode(t, b) != "upstream_bad_response" {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
		})
		t.Run(name+", then a good endpoint", func(t *testing.T) {
			calls := 0
			first := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls++; h(w, r) })
			g := newTestGatewayWith(t, func(d *Deps) { d.Dispatch.MaxAttempts = 2 }, first, good)
			// Failover order is random: the bad endpoint is tried first in
			// about half the requests; every request must succeed.
			for i := range 6 {
				resp, b := g.post(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
				if resp.StatusCode != 200 || !strings.Contains(string(b), `"content":"ok"`) {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
				}
			}
		})
	}
}

// TestNothingAfterDone: events a backend sends after data: [DONE] never
// reach the client.
func TestNothingAfterDone(t *testing.T) {
	g := newTestGateway(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sseAnswer+"data: {\"choices\":[{\"delta\":{\"content\":\"smuggled\"}}]}\n\ndata: [DONE]\n\n")
	}))
	resp, b := g.post(t, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || strings.Contains(string(b), "smuggled") || strings.Count(string(b), "[DONE]") != 1 {
		t.Fatalf("client got %q", b)
	}
	if l := g.lastLog(t); !strings.Contains(l["error"].(string), "after the terminal event") {
		t.Fatalf("log %v", l)
	}
}

// TestCommentsDoNotHoldAStream: after its first event, a backend that
// sends only comments is cut after stream_idle_timeout, however often it
// sends them.
func TestCommentsDoNotHoldAStream(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	g := newTestGatewayWith(t, func(d *Deps) { d.Dispatch.StreamIdleTimeout = 400 * time.Millisecond }, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(w, ": thinking "+strconv.Itoa(i)+"\n\n"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}))
	start := time.Now()
	resp, b := g.post(t, streamBody)
	took := time.Since(start)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"code":"upstream_stream_idle"`) {
		t.Fatalf("status %d: %.300s", resp.StatusCode, b)
	}
	// Cut at the idle bound, not held by the comments (generous: a busy machine).
	if took > 10*time.Second {
		t.Fatalf("the stream lasted %s with a 400ms idle bound", took)
	}
}
