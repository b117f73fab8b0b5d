package main

// Robustness end to end: hundreds of concurrent streams, a backend that
// fails at every moment of a request, clients that vanish, dawdle or lie,
// header injection, and shutdown with a stream open. The rule every test
// enforces is the client's: an answer is a complete stream ending in
// [DONE], a complete JSON body, or a clean OpenAI error (JSON before the
// first byte, an SSE error event after it) — never a hang, a fake [DONE],
// or a truncated body that reads as complete.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
)

// robustClient is a client of its own (not http.DefaultClient, whose two
// idle connections per host would serialise a load test), with a bound
// that turns a hang into a failure instead of a stuck test.
func robustClient(conns int) *http.Client {
	return &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConnsPerHost: conns,
			DisableCompression:  true,
		},
	}
}

func (g *gw) request(c *http.Client, ctx context.Context, path, token, body string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.Do(req)
}

// verdict is how one response ended, as a client sees it.
type verdict struct {
	status int
	kind   string // sse_done, sse_error, json_ok, json_error
	code   string // the error's code: the JSON error's, or the last SSE error event's
	events int    // SSE events before the first error event, [DONE] excluded
	errors int    // SSE error events
	body   []byte
}

func (v verdict) String() string {
	return fmt.Sprintf("%d %s code=%q events=%d errors=%d body=%.300q", v.status, v.kind, v.code, v.events, v.errors, v.body)
}

// judge reads resp to the end and fails t on anything a client could not
// tell from a good answer or a clean error: a hang, a body that fails to
// read, a stream without [DONE] or an error event, a [DONE] after an
// error, a 200 whose JSON is cut.
func judge(t *testing.T, resp *http.Response) verdict {
	t.Helper()
	defer resp.Body.Close()
	b, rerr := io.ReadAll(resp.Body)
	v := verdict{status: resp.StatusCode, body: b}
	if rerr != nil {
		if errors.Is(rerr, context.DeadlineExceeded) || strings.Contains(rerr.Error(), "Client.Timeout") {
			t.Fatalf("the response hung: %v after %q", rerr, b)
		}
		t.Fatalf("status %d, body read failed (%v) after %d bytes (Content-Length %q): a client cannot read this answer: %q",
			resp.StatusCode, rerr, len(b), resp.Header.Get("Content-Length"), b)
	}
	if isEventStream(resp.Header) {
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("SSE with status %d", resp.StatusCode)
		}
		if !bytes.HasSuffix(b, []byte("\n\n")) {
			t.Fatalf("stream does not end at an event boundary: %q", b)
		}
		data := sseData(b)
		if len(data) == 0 {
			t.Fatalf("an SSE 200 with no event at all: a client cannot tell it from an empty answer: %q", b)
		}
		for i, d := range data {
			if d == "[DONE]" {
				if i != len(data)-1 || v.errors > 0 {
					t.Fatalf("[DONE] at event %d of %d after %d error events: %q", i, len(data), v.errors, b)
				}
				v.kind = "sse_done"
				return v
			}
			var ev struct {
				Error *struct {
					Message, Type string
					Code          *string
				}
			}
			if err := json.Unmarshal([]byte(d), &ev); err != nil {
				t.Fatalf("event %d is not JSON: %q", i, d)
			}
			if ev.Error != nil {
				if ev.Error.Message == "" || ev.Error.Type == "" || ev.Error.Code == nil {
					t.Fatalf("error event lacks message/type/code: %s", d)
				}
				v.errors++
				v.code = *ev.Error.Code
				continue
			}
			if v.errors > 0 {
				t.Fatalf("a chunk after an error event: %q", b)
			}
			v.events++
		}
		if v.errors == 0 {
			t.Fatalf("stream ended with neither [DONE] nor an error event: a client takes it for complete: %q", b)
		}
		if v.errors > 1 {
			t.Fatalf("%d error events: the contract is one: %q", v.errors, b)
		}
		v.kind = "sse_error"
		return v
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("status %d content-type %q: %q", resp.StatusCode, ct, b)
	}
	if resp.StatusCode == http.StatusOK {
		if !json.Valid(b) {
			t.Fatalf("a 200 whose JSON body is truncated or invalid, read without error (Content-Length %q): %q",
				resp.Header.Get("Content-Length"), b)
		}
		v.kind = "json_ok"
		return v
	}
	var e struct {
		Error *struct {
			Message, Type string
			Code          *string
		}
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("status %d is not an OpenAI error: %q", resp.StatusCode, b)
	}
	v.kind = "json_error"
	if e.Error.Code != nil { // OpenAI sends null for some errors
		v.code = *e.Error.Code
	}
	return v
}

// checkStream checks a good stream byte for byte in content: the role
// chunk, tokens chunks of " tok" in order, the finish chunk, [DONE], one id
// throughout, and nothing else.
func checkStream(b []byte, tokens int) error {
	data := sseData(b)
	if want := tokens + 3; len(data) != want {
		return fmt.Errorf("%d events, want %d", len(data), want)
	}
	if !bytes.HasSuffix(b, []byte("\n\ndata: [DONE]\n\n")) || bytes.Count(b, []byte("\n\n")) != len(data) {
		return fmt.Errorf("framing: %q", b)
	}
	var id string
	for i, d := range data[:len(data)-1] {
		var c struct {
			ID      string
			Object  string
			Usage   json.RawMessage
			Choices []struct {
				Delta struct {
					Role    string
					Content *string
				}
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if i == 0 {
			id = c.ID
		}
		if c.ID != id || c.Object != "chat.completion.chunk" || len(c.Choices) != 1 || (len(c.Usage) > 0 && string(c.Usage) != "null") {
			return fmt.Errorf("event %d: %s", i, d)
		}
		ch := c.Choices[0]
		switch {
		case i == 0:
			if ch.Delta.Role != "assistant" {
				return fmt.Errorf("first event is not the role: %s", d)
			}
		case i <= tokens:
			if ch.Delta.Content == nil || *ch.Delta.Content != " tok" || ch.FinishReason != nil {
				return fmt.Errorf("token %d: %s", i, d)
			}
		default:
			if ch.FinishReason == nil || *ch.FinishReason != "stop" {
				return fmt.Errorf("finish: %s", d)
			}
		}
	}
	return nil
}

// serverGoroutines counts goroutines inside the gateway's request path.
func serverGoroutines() (int, string) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var sample string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "shared/server/listener.(*Listener).Accept") {
			continue // the accept loop, not a request
		}
		if strings.Contains(g, "shared/server/listener.(*conn).Read") && !strings.Contains(g, "shared/server.(*Server)") {
			continue // net/http waiting on a connection for its next request, not in a handler
		}
		if strings.Contains(g, "llmgw/gateway/shared/server.") || strings.Contains(g, "llmgw/gateway/shared/sse.") {
			n++
			if sample == "" {
				sample = g
			}
		}
	}
	return n, sample
}

// settledGoroutines waits until runtime.NumGoroutine stops falling and
// returns it.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for i := 0; i < 40; i++ {
		time.Sleep(50 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n && i >= 4 {
			return m
		}
		n = min(n, m)
	}
	return n
}

// quiesce closes every keep-alive connection around g (the client's to the
// gateway, the gateway's to its stubs), so that what goroutines remain are
// the ones nobody is using.
func (g *gw) quiesce(c *http.Client) int {
	c.CloseIdleConnections()
	for _, srv := range g.stubSrvs {
		srv.CloseClientConnections()
	}
	return settledGoroutines()
}

// TestRobustConcurrentStreams: 300 streams at once through one gateway all
// arrive whole, and nothing is left behind: once the keep-alive
// connections are closed, the goroutine count is back near where it was
// before the load, and no goroutine is left in the request path.
func TestRobustConcurrentStreams(t *testing.T) {
	const streams, tokens = 300, 20
	g := startGateway(t, options{requests: 100000,
		stubOpts: stub.Options{Tokens: tokens, TTFT: 5 * time.Millisecond, Interval: 2 * time.Millisecond}})
	c := robustClient(streams)
	tok := g.token("contoso")

	wave := func(n int) {
		t.Helper()
		start := make(chan struct{})
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp, err := g.request(c, context.Background(), "/v1/chat/completions", tok, streamBody)
				if err != nil {
					errs <- err
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				switch {
				case err != nil:
					errs <- fmt.Errorf("read: %w after %q", err, b)
				case resp.StatusCode != http.StatusOK:
					errs <- fmt.Errorf("status %d: %s", resp.StatusCode, b)
				default:
					if err := checkStream(b, tokens); err != nil {
						errs <- err
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		failed := 0
		for err := range errs {
			if failed++; failed <= 5 {
				t.Error(err)
			}
		}
		if failed > 0 {
			t.Fatalf("%d of %d streams failed", failed, n)
		}
	}

	wave(1) // warm: JWKS, pools, the limiter
	base := g.quiesce(c)
	wave(streams)
	eventually(t, "the stub's streams to end", func() bool { return g.Stubs[0].Stats().ActiveStreams == 0 })
	// A leak never drains, however long the wait; a busy machine only
	// makes the goroutines of 300 closed connections end later. So the
	// checks wait, generously, for the counts to come down rather than
	// judging them at a fixed moment. A stack dump stops the world: poll
	// it gently.
	deadline := time.Now().Add(time.Minute)
	for {
		n, sample := serverGoroutines()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still in the gateway's request path a minute after the load, e.g.:\n%s", n, sample)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := g.Stubs[0].Stats(); st.Completed != streams+1 || st.Canceled != 0 || st.ActiveStreams != 0 {
		t.Fatalf("stub stats %+v", st)
	}
	// A leak of one goroutine per stream would add 300; a tenth of the
	// streams is noise (the runtime's and the test's own).
	after := g.quiesce(c)
	for after > base+streams/10 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before the load, %d a minute after: a leak\n%s", base, after, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(200 * time.Millisecond)
		after = g.quiesce(c)
	}
	t.Logf("goroutines: %d before the load, %d after", base, after)
}

// faultCase is one moment at which the backend fails.
type faultCase struct {
	name   string
	fault  string // stub.ParseFault syntax
	stream bool
	// before says the fault strikes before the backend's first event (its
	// headers, or a stream that ends or stalls before any event): with a
	// second endpoint the gateway must fail over to it. Only comments and
	// headers have reached the client then, never content.
	before bool
	// What the client gets with only the faulty endpoint (see verdict).
	kind   string
	status int
	code   string
	events int // SSE events before the error
}

var faultCases = []faultCase{
	// Before the response headers: a clean JSON error, or failover.
	{name: "reset before headers", fault: "close", stream: true, before: true, kind: "json_error", status: 502, code: "upstream_unreachable"},
	{name: "hang past header timeout", fault: "hang", stream: true, before: true, kind: "json_error", status: 504, code: "upstream_timeout"},
	{name: "slow headers past header timeout", fault: "slow_headers=8s", stream: true, before: true, kind: "json_error", status: 504, code: "upstream_timeout"},
	{name: "slow headers within header timeout", fault: "slow_headers=20ms", stream: true, kind: "sse_done", status: 200},
	{name: "500", fault: "status=500", stream: true, before: true, kind: "json_error", status: 502, code: "upstream_error"},
	{name: "502", fault: "status=502", stream: true, before: true, kind: "json_error", status: 502, code: "upstream_error"},
	{name: "503", fault: "status=503", stream: true, before: true, kind: "json_error", status: 502, code: "upstream_error"},
	{name: "429", fault: "status=429", stream: true, before: true, kind: "json_error", status: 429, code: "upstream_rate_limited"},
	{name: "429 with Retry-After", fault: "status=429,retry_after=7", stream: true, before: true, kind: "json_error", status: 429, code: "upstream_rate_limited"},
	{name: "400 is the caller's", fault: "status=400", stream: true, kind: "json_error", status: 400},
	// After the headers: the client already has a 200, so an SSE error event;
	// before the first event another endpoint may still serve it.
	{name: "drop right after headers", fault: "drop_after=0", stream: true, before: true, kind: "sse_error", status: 200, code: "upstream_stream_error"},
	{name: "drop after 1 event", fault: "drop_after=1", stream: true, kind: "sse_error", status: 200, code: "upstream_stream_error", events: 1},
	{name: "drop after 5 events", fault: "drop_after=5", stream: true, kind: "sse_error", status: 200, code: "upstream_stream_error", events: 5},
	// The backend's own error event is relayed as it is, and is the only one.
	{name: "error event right after headers", fault: "error_after=0", stream: true, kind: "sse_error", status: 200, code: "stub_error"},
	{name: "error event after 3", fault: "error_after=3", stream: true, kind: "sse_error", status: 200, code: "stub_error", events: 3},
	{name: "stall right after headers", fault: "stall_after=0", stream: true, before: true, kind: "sse_error", status: 200, code: "upstream_stream_idle"},
	{name: "stall after 3", fault: "stall_after=3", stream: true, kind: "sse_error", status: 200, code: "upstream_stream_idle", events: 3},
	// Non-streaming.
	{name: "json 503", fault: "status=503", before: true, kind: "json_error", status: 502, code: "upstream_error"},
	{name: "json hang", fault: "hang", before: true, kind: "json_error", status: 504, code: "upstream_timeout"},
	// The stub declares the full Content-Length, sends half the JSON and
	// aborts. The body fits the gateway's buffer, so nothing has reached
	// the client: a clean 502, never a 200 whose body reads cleanly (nor a
	// 502 whose body fails to read).
	{name: "json body cut in half", fault: "drop_after=1", kind: "json_error", status: 502, code: "upstream_bad_response"},
	// Half the JSON, then silence: the gateway must not wait forever.
	{name: "json body stalls", fault: "stall_after=1", kind: "json_error", status: 504, code: "upstream_timeout"},
}

// faultUpstream: timeouts short enough for a test, long enough that a
// healthy stub on a busy machine never meets them.
const faultUpstream = "upstream: {max_attempts: 3, header_timeout: 2s, response_timeout: 2s, default_cooldown: 1h, max_cooldown: 1h, stream_idle_timeout: 1s}\n"

// TestRobustUpstreamFaults: with one endpoint, every fault gives the client
// a clean error of the right kind, promptly; with two, a fault before the
// response headers fails over and one after them does not.
func TestRobustUpstreamFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range faultCases {
		t.Run("single/"+tc.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, options{upstreamCfg: faultUpstream})
			body := chatBody
			if tc.stream {
				body = streamBody
			}
			// Every fault here ends within seconds (header timeout 2s, idle
			// timeout 1s): 15s means the gateway waits for ever.
			c := robustClient(1)
			c.Timeout = 15 * time.Second
			resp, err := g.request(c, context.Background(), "/v1/chat/completions", g.token("contoso"), body, stub.FaultHeader, tc.fault)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			v := judge(t, resp)
			if v.kind != tc.kind || v.status != tc.status || (tc.code != "" && v.code != tc.code) || (v.kind == "sse_error" && v.events != tc.events) {
				t.Fatalf("got %v\nwant %s %d code=%q events=%d", v, tc.kind, tc.status, tc.code, tc.events)
			}
			if tc.fault == "status=429,retry_after=7" && resp.Header.Get("Retry-After") != "7" {
				t.Fatalf("backend's Retry-After not passed on: %q", resp.Header.Get("Retry-After"))
			}
			if n := g.Stubs[0].Stats().Requests; n != 1 {
				t.Fatalf("one endpoint, %d backend requests", n)
			}
			eventually(t, "the backend stream to end", func() bool { return g.Stubs[0].Stats().ActiveStreams == 0 })
		})
	}
	for _, tc := range faultCases {
		if !tc.stream {
			continue
		}
		t.Run("failover/"+tc.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, options{stubs: 2, upstreamCfg: faultUpstream})
			f, err := stub.ParseFault(tc.fault)
			if err != nil {
				t.Fatal(err)
			}
			c := robustClient(2)
			tok := g.token("contoso")
			if !tc.before {
				// Both fail the same way, so whichever is tried first fails
				// after its headers: the gateway must not try the other.
				g.Stubs[0].SetFault(f)
				g.Stubs[1].SetFault(f)
				resp, err := g.request(c, context.Background(), "/v1/chat/completions", tok, streamBody)
				if err != nil {
					t.Fatal(err)
				}
				v := judge(t, resp)
				if v.kind != tc.kind || (v.kind == "sse_error" && v.events != tc.events) {
					t.Fatalf("got %v", v)
				}
				if n := g.Stubs[0].Stats().Requests + g.Stubs[1].Stats().Requests; n != 1 {
					t.Fatalf("%d backend requests: a retry after the client's first byte", n)
				}
				return
			}
			// Only stub 0 is faulty; ask until the weighted draw has tried
			// it once: every answer must be whole, from stub 1.
			bad, good := g.Stubs[0], g.Stubs[1]
			bad.SetFault(f)
			for i := 0; bad.Stats().Requests == 0; i++ {
				if i == 60 {
					t.Fatal("the faulty endpoint was never drawn")
				}
				resp, err := g.request(c, context.Background(), "/v1/chat/completions", tok, streamBody)
				if err != nil {
					t.Fatal(err)
				}
				if v := judge(t, resp); v.kind != "sse_done" {
					t.Fatalf("request %d: %v", i, v)
				}
			}
			if n := bad.Stats().Requests; n != 1 {
				t.Fatalf("faulty endpoint got %d requests", n)
			}
			if good.Stats().Completed == 0 {
				t.Fatal("healthy endpoint served nothing")
			}
		})
	}
}

// TestRobustClientDisconnects: many clients that vanish mid-stream cancel
// exactly their backend streams, and nothing stays open.
func TestRobustClientDisconnects(t *testing.T) {
	t.Parallel()
	const n = 50
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 5000, Interval: 5 * time.Millisecond}})
	c := robustClient(n)
	tok := g.token("contoso")
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, n)
	ids := make([]string, n)
	errs := make(chan error, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := g.request(c, ctx, "/v1/chat/completions", tok, streamBody)
			if err != nil {
				errs <- err
				return
			}
			ids[i] = resp.Header.Get("X-Request-Id")
			r := bufio.NewReader(resp.Body)
			for k := 0; k < 3; k++ { // a few events in: mid-stream
				if _, err := readEvent(r); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := g.Stubs[0].Stats(); st.ActiveStreams != n {
		t.Fatalf("%d streams open, want %d", st.ActiveStreams, n)
	}
	for _, cancel := range cancels {
		cancel()
	}
	eventually(t, "every backend stream cancelled", func() bool {
		st := g.Stubs[0].Stats()
		return st.Canceled == n && st.ActiveStreams == 0
	})
	if st := g.Stubs[0].Stats(); st.Completed != 0 || st.Streams != n {
		t.Fatalf("stub stats %+v", st)
	}
	// The access-log line is written as a handler returns: every one did.
	for _, id := range ids {
		if l := g.accessLog(id); l["outcome"] != "client_gone" {
			t.Fatalf("access log outcome %v for a vanished client", l["outcome"])
		}
	}
}

// rawConn dials the gateway for hand-written HTTP/1.1.
func (g *gw) rawConn(t *testing.T) net.Conn {
	t.Helper()
	u, err := url.Parse(g.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRobustSlowClient: a client that sends its request slowly does not
// hold a connection and a goroutine forever.
func TestRobustSlowClient(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{extra: "body_read_timeout: 1s\n"})
	tok := g.token("contoso")
	// The server's ReadHeaderTimeout is 10s; allow twice that.
	const bound = 20 * time.Second
	t.Run("headers never finish", func(t *testing.T) {
		t.Parallel()
		conn := g.rawConn(t)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n", tok)
		_ = conn.SetReadDeadline(time.Now().Add(bound))
		_, err := io.ReadAll(conn)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the gateway still holds a connection whose headers never finished after %s", bound)
		}
	})
	t.Run("body never finishes", func(t *testing.T) {
		t.Parallel()
		conn := g.rawConn(t)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":", tok)
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(bound))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("an authenticated client that never finishes its body holds a connection and a handler past %s", bound)
		}
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		// body_read_timeout is 1s here, the default 10s: 8s apart.
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("answered after %v: config body_read_timeout (1s) is not applied", d)
		}
		if !resp.Close {
			t.Errorf("a connection with half a body unread is kept alive")
		}
		openAIError(t, resp, http.StatusRequestTimeout, "request_timeout")
	})
	t.Run("Content-Length larger than the body", func(t *testing.T) {
		t.Parallel()
		conn := g.rawConn(t)
		body := chatBody
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			tok, len(body)+100, body)
		_ = conn.(*net.TCPConn).CloseWrite() // the client is done sending
		_ = conn.SetReadDeadline(time.Now().Add(bound))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		openAIError(t, resp, http.StatusBadRequest, "invalid_body")
	})
	t.Run("Content-Length smaller than the body", func(t *testing.T) {
		t.Parallel()
		conn := g.rawConn(t)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n%s",
			tok, chatBody)
		_ = conn.SetReadDeadline(time.Now().Add(bound))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no response: %v", err)
		}
		openAIError(t, resp, http.StatusBadRequest, "invalid_json")
		if g.Stubs[0].Stats().Requests != 0 {
			t.Fatal("a cut body reached the backend")
		}
	})
}

// TestRobustOversizeChunkedBody: a body with no Content-Length is capped as
// it is read: 413, not a buffered 2 MiB and not a hang.
func TestRobustOversizeChunkedBody(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{})
	tok := g.token("contoso")
	c := robustClient(1)
	for i := 0; i < 3; i++ {
		body := io.MultiReader(strings.NewReader(`{"model":"llama","messages":[],"x":"`),
			strings.NewReader(strings.Repeat("a", 2<<20)), strings.NewReader(`"}`))
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", body)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		openAIError(t, resp, http.StatusRequestEntityTooLarge, "request_too_large")
	}
	if g.Stubs[0].Stats().Requests != 0 {
		t.Fatal("an oversize body reached the backend")
	}
}

// TestRobustHeaderInjection: what a caller puts in headers cannot forge the
// request id or a backend credential.
func TestRobustHeaderInjection(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{})
	tok := g.token("contoso")
	c := robustClient(1)
	tests := []struct {
		name, body string
		azure      bool
	}{
		{"vllm stream", streamBody, false},
		{"vllm json", chatBody, false},
		{"azure json", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := g.request(c, context.Background(), "/v1/chat/completions", tok, tt.body,
				"X-Request-Id", "evil", "Api-Key", "caller-key", "Proxy-Authorization", "Basic evil", "Cookie", "a=b",
				"Connection", "X-Drop-Me", "X-Drop-Me", "1", "Forwarded", "for=6.6.6.6")
			if err != nil {
				t.Fatal(err)
			}
			v := judge(t, resp)
			if v.kind != "sse_done" && v.kind != "json_ok" {
				t.Fatalf("got %v", v)
			}
			id := resp.Header.Get("X-Request-Id")
			if id == "" || id == "evil" || len(resp.Header.Values("X-Request-Id")) != 1 {
				t.Fatalf("response X-Request-Id %q", resp.Header.Values("X-Request-Id"))
			}
			if l := g.accessLog(id); l["request_id"] != id {
				t.Fatalf("log %v", l)
			}
			if strings.Contains(g.logs.String(), `"request_id":"evil"`) {
				t.Fatal("the caller's request id reached the log")
			}
			last := g.Stubs[0].LastRequest()
			if got := last.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != id {
				t.Fatalf("backend X-Request-Id %q, want the gateway's %q", got, id)
			}
			for _, h := range []string{"Proxy-Authorization", "Cookie", "X-Drop-Me", "Forwarded"} {
				if last.Header.Get(h) != "" {
					t.Fatalf("%s reached the backend", h)
				}
			}
			if tt.azure {
				if got := last.Header.Values("Api-Key"); len(got) != 1 || got[0] != backendKey {
					t.Fatalf("azure backend api-key %q: the caller's must not reach it", got)
				}
			} else if last.Header.Get("Api-Key") != "" {
				t.Fatalf("the caller's api-key reached the backend")
			}
		})
	}
}

// TestRobustGracefulShutdown: SIGTERM (run's context ending) with a stream
// open: no new connections, the open stream runs to [DONE], then run
// returns nil.
func TestRobustGracefulShutdown(t *testing.T) {
	t.Parallel()
	step := make(chan struct{})
	g := startGateway(t, options{stubOpts: stub.Options{Step: step, Tokens: 5}})
	stop := make(chan struct{})
	defer close(stop)
	release := func(n int) {
		for i := 0; i < n; i++ {
			select {
			case step <- struct{}{}:
			case <-stop:
				return
			case <-time.After(10 * time.Second):
				t.Errorf("the stub stopped asking for events")
				return
			}
		}
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := g.request(robustClient(1), ctx, "/v1/chat/completions", g.token("contoso"), streamBody)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	headers := time.Since(t0)
	release(1)
	released := time.Since(t0)
	if ev, err := readEvent(r); err != nil || !strings.Contains(ev, `"role":"assistant"`) {
		t.Fatalf("first event %q %v (headers after %v, step taken after %v, read after %v); stub %+v",
			ev, err, headers, released, time.Since(t0), g.Stubs[0].Stats())
	}

	g.Stop()
	u, _ := url.Parse(g.URL)
	eventually(t, "the listener to close", func() bool {
		conn, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case <-g.Exited:
		t.Fatal("run returned with a stream open")
	default:
	}

	// Role, 5 tokens, finish, usage (injected, stripped), [DONE]: 8 more.
	go release(8)
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("the open stream was cut by shutdown: %v after %q", err, rest)
	}
	if !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) || strings.Count(string(rest), " tok") != 5 {
		t.Fatalf("the open stream did not complete: %q", rest)
	}
	select {
	case <-g.Exited:
		if g.RunErr != nil {
			t.Fatalf("run: %v", g.RunErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the last stream ended")
	}
	if !strings.Contains(g.logs.String(), `"msg":"shutting down"`) {
		t.Fatal("no shutdown log line")
	}
}

func isEventStream(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream")
}
