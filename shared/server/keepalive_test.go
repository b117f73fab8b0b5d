package server

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// keepaliveEvery sets a short keepalive (negative: off) and a first-token
// timeout for the test pool "p".
func keepaliveEvery(every, firstToken time.Duration) func(*Deps) {
	return func(d *Deps) {
		d.Streams = map[string]StreamPolicy{"p": {KeepaliveInterval: &every, FirstTokenTimeout: &firstToken}}
	}
}

// streamClient reads a gateway stream line by line as it arrives.
type streamClient struct {
	resp *http.Response
	r    *bufio.Reader
	all  strings.Builder
}

func openStream(t *testing.T, g *testGateway) *streamClient {
	t.Helper()
	resp, err := http.Post(g.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &streamClient{resp: resp, r: bufio.NewReader(resp.Body)}
}

// untilComments reads until n keepalive comments have arrived, failing on
// anything else.
func (c *streamClient) untilComments(t *testing.T, n int) {
	t.Helper()
	for seen := 0; seen < n; {
		line, err := c.r.ReadString('\n')
		c.all.WriteString(line)
		if err != nil {
			t.Fatalf("stream ended after %q: %v", c.all.String(), err)
		}
		switch line {
		case ": keepalive\n":
			seen++
		case "\n":
		default:
			t.Fatalf("got %q before %d keepalives", line, n)
		}
	}
}

func (c *streamClient) rest(t *testing.T) string {
	t.Helper()
	b, err := io.ReadAll(c.r)
	if err != nil {
		t.Fatal(err)
	}
	c.all.Write(b)
	return c.all.String()
}

// withoutComments is what an SSE client sees of a stream.
func withoutComments(s string) string {
	return strings.ReplaceAll(s, ": keepalive\n\n", "")
}

// slowFirstToken holds its first event until release is closed.
func slowFirstToken(release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // so net/http notices the gateway leaving
		w.Header().Set("Content-Type", "text/event-stream")
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, sseAnswer)
	}
}

// TestKeepaliveBeforeFirstToken: headers and a comment each interval while
// the backend thinks, then the backend's stream byte for byte.
func TestKeepaliveBeforeFirstToken(t *testing.T) {
	release := make(chan struct{})
	g := newTestGatewayWith(t, keepaliveEvery(30*time.Millisecond, 0), slowFirstToken(release))
	c := openStream(t, g)
	if c.resp.StatusCode != 200 || c.resp.Header.Get("Content-Type") != "text/event-stream" || c.resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("status %d headers %v", c.resp.StatusCode, c.resp.Header)
	}
	c.untilComments(t, 3)
	close(release)
	if got := withoutComments(c.rest(t)); got != sseAnswer {
		t.Fatalf("client saw %q, want the backend's stream %q", got, sseAnswer)
	}
	l := g.lastLog(t)
	if l["keepalives"].(float64) < 3 || l["first_keepalive_ms"].(float64) <= 0 || l["status"] != float64(200) {
		t.Fatalf("log %v", l)
	}
}

// TestKeepaliveMidStream: a gap between events is filled with comments.
func TestKeepaliveMidStream(t *testing.T) {
	release := make(chan struct{})
	events := strings.SplitAfter(sseAnswer, "\n\n")
	g := newTestGatewayWith(t, keepaliveEvery(30*time.Millisecond, 0), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, events[0])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, strings.Join(events[1:], ""))
	}))
	c := openStream(t, g)
	first, err := c.r.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("first line %q %v", first, err)
	}
	c.all.WriteString(first)
	if blank, _ := c.r.ReadString('\n'); blank != "\n" {
		t.Fatalf("event not ended: %q", blank)
	}
	c.all.WriteString("\n")
	c.untilComments(t, 2)
	close(release)
	if got := withoutComments(c.rest(t)); got != sseAnswer {
		t.Fatalf("client saw %q", got)
	}
}

// TestFailoverAfterKeepalive: comments are not content, so an endpoint
// that fails after some were sent is still replaced by the next one.
func TestFailoverAfterKeepalive(t *testing.T) {
	var calls atomic.Int32
	sawComment := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			select { // the first attempt fails once the client saw a comment
			case <-sawComment:
			case <-r.Context().Done():
			}
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		sseBackend(w, r)
	})
	g := newTestGatewayWith(t, keepaliveEvery(30*time.Millisecond, 0), h, h)
	c := openStream(t, g)
	c.untilComments(t, 1)
	close(sawComment)
	if got := withoutComments(c.rest(t)); got != sseAnswer {
		t.Fatalf("client saw %q, want the second endpoint's stream", got)
	}
	if l := g.lastLog(t); l["failover_after_headers"] != true || l["attempts"] != float64(2) {
		t.Fatalf("log %v", l)
	}
}

// TestFirstTokenTimeout: an endpoint that sent headers but no event in
// time is abandoned for the next; the last attempt is never cut by it.
func TestFirstTokenTimeout(t *testing.T) {
	t.Run("fails over", func(t *testing.T) {
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if calls.Add(1) == 1 {
				w.Header().Set("Content-Type", "text/event-stream")
				w.(http.Flusher).Flush()
				<-r.Context().Done() // headers, then nothing until abandoned
				return
			}
			sseBackend(w, r)
		})
		g := newTestGatewayWith(t, keepaliveEvery(-1, 50*time.Millisecond), h, h)
		resp, b := g.post(t, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
		if resp.StatusCode != 200 || string(b) != sseAnswer || calls.Load() != 2 {
			t.Fatalf("status %d calls %d body %q", resp.StatusCode, calls.Load(), b)
		}
	})
	t.Run("last attempt waits", func(t *testing.T) {
		release := make(chan struct{})
		// The keepalive interval is longer than the first-token timeout:
		// two comments prove the timeout passed without cutting.
		g := newTestGatewayWith(t, keepaliveEvery(60*time.Millisecond, 20*time.Millisecond), slowFirstToken(release))
		c := openStream(t, g)
		c.untilComments(t, 2)
		close(release)
		if got := withoutComments(c.rest(t)); got != sseAnswer {
			t.Fatalf("client saw %q", got)
		}
	})
}

// TestAllAttemptsFailAfterKeepalive: one SSE error event, never [DONE],
// never a hang.
func TestAllAttemptsFailAfterKeepalive(t *testing.T) {
	sawComment := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-sawComment:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	g := newTestGatewayWith(t, keepaliveEvery(30*time.Millisecond, 0), h, h)
	c := openStream(t, g)
	c.untilComments(t, 1)
	close(sawComment)
	got := withoutComments(c.rest(t))
	data := sseDataLines(got)
	if len(data) != 1 || !strings.Contains(data[0], `"code":"upstream_error"`) || strings.Contains(got, "[DONE]") {
		t.Fatalf("client saw %q, want one error event", got)
	}
	if l := g.lastLog(t); l["outcome"] != "upstream_error" {
		t.Fatalf("log %v", l)
	}
}

func sseDataLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "data: ") {
			out = append(out, strings.TrimPrefix(l, "data: "))
		}
	}
	return out
}

// TestMinRemaining: a request whose deadline is too near is refused whole.
func TestMinRemaining(t *testing.T) {
	g := newTestGatewayWith(t, func(d *Deps) { d.Lambda.MinRemaining = new(time.Hour) }, http.HandlerFunc(sseBackend))
	h := g.srv.Config.Handler
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", "/v1/chat/completions", strings.NewReader(streamBody))
	rec := newRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "deadline_too_near") {
		t.Fatalf("status %d %s", rec.Code, rec.Body)
	}
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
