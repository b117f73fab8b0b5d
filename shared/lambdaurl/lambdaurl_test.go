package lambdaurl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
	"github.com/llmgw/gateway/shared/lambdaurl"
)

// waitTimeout bounds every wait in these tests; it only turns a hang into
// a failure, so it is generous for a busy machine.
const waitTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// captured is what a handler saw of its request.
type captured struct {
	req  *http.Request
	body []byte
}

func capture(t *testing.T, ev *events.LambdaFunctionURLRequest) captured {
	t.Helper()
	got := make(chan captured, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading body: %v", err)
		}
		got <- captured{r, b}
	})
	resp, err := lambdaurl.Handler(h, lambdaurl.Options{})(testContext(t), ev)
	if err != nil {
		t.Fatalf("Handler: %v", err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return <-got
}

func TestRequestMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		ev    events.LambdaFunctionURLRequest
		check func(t *testing.T, c captured)
	}{
		{
			name: "method path query",
			ev: events.LambdaFunctionURLRequest{
				RawPath: "/v1/chat/completions", RawQueryString: "a=1&b=%2F&a=2",
				RequestContext: events.LambdaFunctionURLRequestContext{HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{Method: "POST"}},
			},
			check: func(t *testing.T, c captured) {
				r := c.req
				if r.Method != "POST" || r.URL.Path != "/v1/chat/completions" || r.URL.RawQuery != "a=1&b=%2F&a=2" {
					t.Errorf("got %s %s ? %s", r.Method, r.URL.Path, r.URL.RawQuery)
				}
				if r.RequestURI != "/v1/chat/completions?a=1&b=%2F&a=2" {
					t.Errorf("RequestURI = %q", r.RequestURI)
				}
				if q := r.URL.Query(); !slices.Equal(q["a"], []string{"1", "2"}) || q.Get("b") != "/" {
					t.Errorf("Query() = %v", q)
				}
			},
		},
		{
			name: "escaped path kept raw",
			ev:   events.LambdaFunctionURLRequest{RawPath: "/a%2Fb/c%20d"},
			check: func(t *testing.T, c captured) {
				if c.req.URL.EscapedPath() != "/a%2Fb/c%20d" || c.req.URL.Path != "/a/b/c d" {
					t.Errorf("EscapedPath %q Path %q", c.req.URL.EscapedPath(), c.req.URL.Path)
				}
			},
		},
		{
			name: "defaults: GET and slash",
			ev:   events.LambdaFunctionURLRequest{},
			check: func(t *testing.T, c captured) {
				if c.req.Method != http.MethodGet || c.req.URL.Path != "/" || c.req.ContentLength != 0 || c.req.Body != http.NoBody {
					t.Errorf("got %s %q len %d", c.req.Method, c.req.URL.Path, c.req.ContentLength)
				}
			},
		},
		{
			name: "headers, comma-joined multi-value, host",
			ev: events.LambdaFunctionURLRequest{
				Headers:        map[string]string{"content-type": "application/json", "x-multi": "a,b", "host": "fn.lambda-url.eu-west-1.on.aws", "authorization": "Bearer t"},
				RequestContext: events.LambdaFunctionURLRequestContext{DomainName: "other.example"},
			},
			check: func(t *testing.T, c captured) {
				h := c.req.Header
				if h.Get("Content-Type") != "application/json" || h.Get("Authorization") != "Bearer t" {
					t.Errorf("header = %v", h)
				}
				if got := h.Values("X-Multi"); !slices.Equal(got, []string{"a,b"}) {
					t.Errorf("X-Multi = %q", got)
				}
				if c.req.Host != "fn.lambda-url.eu-west-1.on.aws" || h.Get("Host") != "" {
					t.Errorf("Host = %q, header Host = %q", c.req.Host, h.Get("Host"))
				}
			},
		},
		{
			name: "host from domain without host header",
			ev:   events.LambdaFunctionURLRequest{RequestContext: events.LambdaFunctionURLRequestContext{DomainName: "abc.lambda-url.us-east-1.on.aws"}},
			check: func(t *testing.T, c captured) {
				if c.req.Host != "abc.lambda-url.us-east-1.on.aws" {
					t.Errorf("Host = %q", c.req.Host)
				}
			},
		},
		{
			name: "cookies to Cookie header",
			ev:   events.LambdaFunctionURLRequest{Cookies: []string{"a=1", "b=two"}},
			check: func(t *testing.T, c captured) {
				if got := c.req.Header.Get("Cookie"); got != "a=1; b=two" {
					t.Errorf("Cookie = %q", got)
				}
				if ck, err := c.req.Cookie("b"); err != nil || ck.Value != "two" {
					t.Errorf("Cookie(b) = %v, %v", ck, err)
				}
			},
		},
		{
			name: "plain body",
			ev:   events.LambdaFunctionURLRequest{Body: `{"model":"m"}`},
			check: func(t *testing.T, c captured) {
				if string(c.body) != `{"model":"m"}` || c.req.ContentLength != 13 {
					t.Errorf("body %q len %d", c.body, c.req.ContentLength)
				}
			},
		},
		{
			name: "base64 body",
			ev:   events.LambdaFunctionURLRequest{Body: base64.StdEncoding.EncodeToString([]byte{0, 0xff, 'x'}), IsBase64Encoded: true},
			check: func(t *testing.T, c captured) {
				if !bytes.Equal(c.body, []byte{0, 0xff, 'x'}) || c.req.ContentLength != 3 {
					t.Errorf("body %q len %d", c.body, c.req.ContentLength)
				}
			},
		},
		{
			name: "source ip v4",
			ev:   events.LambdaFunctionURLRequest{RequestContext: events.LambdaFunctionURLRequestContext{HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{SourceIP: "203.0.113.7"}}},
			check: func(t *testing.T, c captured) {
				if c.req.RemoteAddr != "203.0.113.7:0" {
					t.Errorf("RemoteAddr = %q", c.req.RemoteAddr)
				}
			},
		},
		{
			name: "source ip v6",
			ev:   events.LambdaFunctionURLRequest{RequestContext: events.LambdaFunctionURLRequestContext{HTTP: events.LambdaFunctionURLRequestContextHTTPDescription{SourceIP: "2001:db8::1"}}},
			check: func(t *testing.T, c captured) {
				if c.req.RemoteAddr != "[2001:db8::1]:0" {
					t.Errorf("RemoteAddr = %q", c.req.RemoteAddr)
				}
			},
		},
		{
			name: "event in context",
			ev:   events.LambdaFunctionURLRequest{RequestContext: events.LambdaFunctionURLRequestContext{RequestID: "req-1"}},
			check: func(t *testing.T, c captured) {
				ev, ok := lambdaurl.EventFromContext(c.req.Context())
				if !ok || ev.RequestContext.RequestID != "req-1" {
					t.Errorf("EventFromContext = %v, %v", ev, ok)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.check(t, capture(t, &tt.ev))
		})
	}
}

func TestBadEvent(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler called") })
	for name, ev := range map[string]*events.LambdaFunctionURLRequest{
		"nil":        nil,
		"bad base64": {Body: "!!!", IsBase64Encoded: true},
		"bad path":   {RawPath: "no-slash"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := lambdaurl.Handler(h, lambdaurl.Options{})(testContext(t), ev); err == nil {
				t.Error("no error")
			}
		})
	}
}

// TestSameRequestBothHosts sends one request to net/http's server and,
// as the Function URL event lambdatest.URLEvent builds for it, through
// Handler, and checks the handler sees the same request.
func TestSameRequestBothHosts(t *testing.T) {
	t.Parallel()
	seen := make(chan captured, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- captured{r, b}
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	for _, tc := range []struct{ name, method, target, body string }{
		{"get with query", "GET", "/v1/models?x=1&y=%2F", ""},
		{"post json", "POST", "/v1/chat/completions", `{"model":"m","stream":true}`},
		{"post binary", "PUT", "/blob", "\x00\xff\xfe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			newReq := func() *http.Request {
				r, err := http.NewRequest(tc.method, srv.URL+tc.target, strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				r.Header.Set("Authorization", "Bearer tok")
				r.Header.Add("X-Multi", "a")
				r.Header.Add("X-Multi", "b")
				r.Header.Set("Cookie", "s=1; t=2")
				return r
			}
			resp, err := srv.Client().Do(newReq())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			viaHTTP := <-seen

			ev, err := lambdatest.URLEvent(newReq())
			if err != nil {
				t.Fatal(err)
			}
			viaLambda := capture(t, &ev)

			a, b := viaHTTP.req, viaLambda.req
			if a.Method != b.Method || a.RequestURI != b.RequestURI || a.URL.String() != b.URL.String() || a.Host != b.Host || a.ContentLength != b.ContentLength {
				t.Errorf("http: %s %s %s host %s len %d\nlambda: %s %s %s host %s len %d",
					a.Method, a.RequestURI, a.URL, a.Host, a.ContentLength, b.Method, b.RequestURI, b.URL, b.Host, b.ContentLength)
			}
			if !bytes.Equal(viaHTTP.body, viaLambda.body) {
				t.Errorf("body http %q lambda %q", viaHTTP.body, viaLambda.body)
			}
			for _, k := range []string{"Authorization", "Cookie", "Content-Type"} {
				if a.Header.Get(k) != b.Header.Get(k) {
					t.Errorf("%s: http %q lambda %q", k, a.Header.Get(k), b.Header.Get(k))
				}
			}
			// A Function URL joins repeated headers; the values survive as one list.
			if got, want := strings.Join(b.Header.Values("X-Multi"), ","), strings.Join(a.Header.Values("X-Multi"), ","); got != want {
				t.Errorf("X-Multi: http %q lambda %q", want, got)
			}
		})
	}
}

// serve runs h on ev in process and returns the parsed streaming response,
// read through the response's own framing.
func serve(t *testing.T, h http.Handler, ev *events.LambdaFunctionURLRequest) (*lambdatest.Prelude, []byte) {
	t.Helper()
	if ev == nil {
		ev = &events.LambdaFunctionURLRequest{}
	}
	resp, err := lambdaurl.Handler(h, lambdaurl.Options{})(testContext(t), ev)
	if err != nil {
		t.Fatalf("Handler: %v", err)
	}
	if got := resp.ContentType(); got != lambdatest.StreamingContentType {
		t.Errorf("ContentType() = %q", got)
	}
	prelude, body, err := lambdatest.ParseStreamingResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return prelude, b
}

func TestResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		h           http.HandlerFunc
		wantStatus  int
		wantHeaders map[string]string
		wantCookies []string
		wantBody    string
	}{
		{
			name:        "nothing written",
			h:           func(http.ResponseWriter, *http.Request) {},
			wantStatus:  200,
			wantHeaders: map[string]string{},
		},
		{
			name:        "status only",
			h:           func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) },
			wantStatus:  418,
			wantHeaders: map[string]string{},
		},
		{
			name: "json error with status",
			h: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"error":{}}`)
			},
			wantStatus:  429,
			wantHeaders: map[string]string{"Content-Type": "application/json", "Retry-After": "3"},
			wantBody:    `{"error":{}}`,
		},
		{
			name: "set-cookie to cookies, multi-value joined",
			h: func(w http.ResponseWriter, _ *http.Request) {
				http.SetCookie(w, &http.Cookie{Name: "a", Value: "1"})
				http.SetCookie(w, &http.Cookie{Name: "b", Value: "2", HttpOnly: true})
				w.Header().Add("Vary", "Origin")
				w.Header().Add("Vary", "Accept")
				w.Header().Set("Content-Type", "text/plain")
				w.Write([]byte("ok"))
			},
			wantStatus:  200,
			wantHeaders: map[string]string{"Vary": "Origin, Accept", "Content-Type": "text/plain"},
			wantCookies: []string{"a=1", "b=2; HttpOnly"},
			wantBody:    "ok",
		},
		{
			name:        "content type sniffed like net/http",
			h:           func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("<!DOCTYPE html><p>")) },
			wantStatus:  200,
			wantHeaders: map[string]string{"Content-Type": "text/html; charset=utf-8"},
			wantBody:    "<!DOCTYPE html><p>",
		},
		{
			name: "nil content type suppresses sniffing",
			h: func(w http.ResponseWriter, _ *http.Request) {
				w.Header()["Content-Type"] = nil
				w.Write([]byte("<html>"))
			},
			wantStatus:  200,
			wantHeaders: map[string]string{},
			wantBody:    "<html>",
		},
		{
			name: "headers changed after commit are not sent",
			h: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Before", "1")
				w.(http.Flusher).Flush()
				w.Header().Set("X-After", "1")
				w.Write([]byte("x"))
			},
			wantStatus:  200,
			wantHeaders: map[string]string{"X-Before": "1"},
			wantBody:    "x",
		},
		{
			name: "204 has no body",
			h: func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNoContent)
				if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrBodyNotAllowed) {
					t.Errorf("Write after 204: %v", err)
				}
			},
			wantStatus:  204,
			wantHeaders: map[string]string{},
		},
		{
			name:   "HEAD drops the body",
			method: "HEAD",
			h: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				if n, err := w.Write([]byte("abc")); n != 3 || err != nil {
					t.Errorf("Write on HEAD = %d, %v", n, err)
				}
			},
			wantStatus:  200,
			wantHeaders: map[string]string{"Content-Type": "text/plain"},
		},
		{
			name: "informational status dropped, trailers dropped",
			h: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Trailer", "X-T")
				w.WriteHeader(http.StatusEarlyHints)
				w.WriteHeader(http.StatusCreated)
				w.WriteHeader(http.StatusAccepted) // superfluous, ignored
				w.Header().Set(http.TrailerPrefix+"X-U", "1")
				w.Header().Set("Content-Type", "text/plain")
				w.Write([]byte("made"))
			},
			wantStatus:  201,
			wantHeaders: map[string]string{"Content-Type": "text/plain"},
			wantBody:    "made",
		},
		{
			name: "large body beyond the buffer",
			h: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				for range 100 {
					io.WriteString(w, strings.Repeat("x", 999)+"\n")
				}
			},
			wantStatus:  200,
			wantHeaders: map[string]string{"Content-Type": "text/plain"},
			wantBody:    strings.Repeat(strings.Repeat("x", 999)+"\n", 100),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := &events.LambdaFunctionURLRequest{}
			ev.RequestContext.HTTP.Method = tt.method
			prelude, body := serve(t, tt.h, ev)
			if prelude.StatusCode != tt.wantStatus {
				t.Errorf("status = %d, want %d", prelude.StatusCode, tt.wantStatus)
			}
			headers := prelude.Headers
			if headers == nil {
				headers = map[string]string{}
			}
			if !reflect.DeepEqual(headers, tt.wantHeaders) {
				t.Errorf("headers = %v, want %v", headers, tt.wantHeaders)
			}
			if !slices.Equal(prelude.Cookies, tt.wantCookies) {
				t.Errorf("cookies = %q, want %q", prelude.Cookies, tt.wantCookies)
			}
			if string(body) != tt.wantBody {
				t.Errorf("body = %.80q (len %d), want %.80q (len %d)", body, len(body), tt.wantBody, len(tt.wantBody))
			}
		})
	}
}

func TestInvalidStatusPanicsLikeNetHTTP(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(0) })
	_, err := lambdaurl.Handler(h, lambdaurl.Options{ErrorLog: log.New(io.Discard, "", 0)})(testContext(t), &events.LambdaFunctionURLRequest{})
	var pe *lambdaurl.PanicError
	if !errors.As(err, &pe) || !strings.Contains(pe.Error(), "invalid WriteHeader code 0") {
		t.Errorf("err = %v, want PanicError about the code", err)
	}
}

// TestFlushDeliversEachEvent proves, in process, that every Flush hands its
// bytes to the reader the Lambda runtime copies from, before the handler
// writes anything more: the handler cannot write event k+1 until the test,
// having read event k, opens its gate.
func TestFlushDeliversEachEvent(t *testing.T) {
	t.Parallel()
	const n = 5
	gates := make([]chan struct{}, n)
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	done := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range n {
			select {
			case <-gates[i]:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
			if err := rc.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
				return
			}
		}
	})
	ctx := testContext(t)
	close(gates[0])
	resp, err := lambdaurl.Handler(h, lambdaurl.Options{})(ctx, &events.LambdaFunctionURLRequest{})
	if err != nil {
		t.Fatal(err)
	}
	prelude, body, err := lambdatest.ParseStreamingResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	if prelude.Headers["Content-Type"] != "text/event-stream" {
		t.Errorf("prelude = %+v", prelude)
	}
	events := bufio.NewReader(body)
	for i := range n {
		ev, err := readEvent(events)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := "data: " + string(rune('a'+i)) + "\n\n"; ev != want {
			t.Fatalf("event %d = %q, want %q", i, ev, want)
		}
		if i+1 < n {
			close(gates[i+1]) // only now may the handler produce the next event
		}
	}
	if _, err := events.ReadByte(); err != io.EOF {
		t.Errorf("after the last event: %v, want EOF", err)
	}
	<-done
}

// readEvent reads one SSE event (up to a blank line).
func readEvent(r *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		line, err := r.ReadString('\n')
		sb.WriteString(line)
		if err != nil {
			return sb.String(), err
		}
		if line == "\n" {
			return sb.String(), nil
		}
	}
}

func TestDeadlineMargin(t *testing.T) {
	t.Parallel()
	lambdaDeadline := time.Now().Add(10 * time.Minute).Truncate(time.Millisecond)
	tests := []struct {
		name   string
		margin time.Duration
		want   time.Time
	}{
		{"default", 0, lambdaDeadline.Add(-lambdaurl.DefaultDeadlineMargin)},
		{"custom", 5 * time.Second, lambdaDeadline.Add(-5 * time.Second)},
		{"negative keeps lambda deadline", -1, lambdaDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan time.Time, 1)
			h := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				d, _ := r.Context().Deadline()
				got <- d
			})
			ctx, cancel := context.WithDeadline(t.Context(), lambdaDeadline)
			defer cancel()
			resp, err := lambdaurl.Handler(h, lambdaurl.Options{Settings: lambdaurl.Settings{DeadlineMargin: tt.margin}})(ctx, &events.LambdaFunctionURLRequest{})
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			if d := <-got; !d.Equal(tt.want) {
				t.Errorf("request deadline = %v, want %v", d, tt.want)
			}
		})
	}
}

// TestDeadlineEndsStreamCleanly shows what the margin is for: the handler
// sees its context end first and finishes its stream with a final event,
// while the invocation (the Lambda deadline) is still alive.
func TestDeadlineEndsStreamCleanly(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		io.WriteString(w, "event: error\ndata: "+r.Context().Err().Error()+"\n\n")
	})
	// The request deadline is already past; the Lambda deadline is far.
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	resp, err := lambdaurl.Handler(h, lambdaurl.Options{Settings: lambdaurl.Settings{DeadlineMargin: waitTimeout}})(ctx, &events.LambdaFunctionURLRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "data: 1\n\nevent: error\ndata: context deadline exceeded\n\n"; string(b) != want {
		t.Errorf("body = %q, want %q", b, want)
	}
	if ctx.Err() != nil {
		t.Error("invocation context ended; the margin did not fire first")
	}
}

func TestPanic(t *testing.T) {
	t.Parallel()
	t.Run("before commit returns the error", func(t *testing.T) {
		t.Parallel()
		var logged bytes.Buffer
		h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("buffered, never sent"))
			panic("boom")
		})
		resp, err := lambdaurl.Handler(h, lambdaurl.Options{ErrorLog: log.New(&logged, "", 0)})(testContext(t), &events.LambdaFunctionURLRequest{RawPath: "/p"})
		var pe *lambdaurl.PanicError
		if !errors.As(err, &pe) || pe.Value != "boom" || resp != nil {
			t.Errorf("Handler = %v, %v; want PanicError(boom)", resp, err)
		}
		if !strings.Contains(logged.String(), "panic serving GET /p: boom") {
			t.Errorf("log = %q", logged.String())
		}
	})
	t.Run("after commit ends the stream with the error", func(t *testing.T) {
		t.Parallel()
		h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Write([]byte("data: 1\n\n"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		})
		var logged bytes.Buffer
		resp, err := lambdaurl.Handler(h, lambdaurl.Options{ErrorLog: log.New(&logged, "", 0)})(testContext(t), &events.LambdaFunctionURLRequest{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		var pe *lambdaurl.PanicError
		if string(b) != "data: 1\n\n" || !errors.As(err, &pe) || pe.Value != http.ErrAbortHandler {
			t.Errorf("body %q, err %v; want the first event then PanicError", b, err)
		}
		if logged.Len() != 0 {
			t.Errorf("ErrAbortHandler logged: %q", logged.String())
		}
	})
}

// TestReaderGone checks that when the runtime stops reading (the response
// stream closed), the handler's writes fail instead of blocking, so the
// handler goroutine ends.
func TestReaderGone(t *testing.T) {
	t.Parallel()
	flushErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.(http.Flusher).Flush() // commit
		chunk := []byte(strings.Repeat("x", 100))
		for {
			w.Write(chunk)
			if err := http.NewResponseController(w).Flush(); err != nil {
				flushErr <- err
				return
			}
		}
	})
	resp, err := lambdaurl.Handler(h, lambdaurl.Options{})(testContext(t), &events.LambdaFunctionURLRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 50)); err != nil {
		t.Fatal(err)
	}
	if err := resp.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-flushErr:
		if !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("Flush error = %v, want io.ErrClosedPipe", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("handler still writing after the reader closed")
	}
}

// TestInvocationEndsBeforeCommit: Lambda's own deadline ends the invocation
// while the handler has committed nothing; Handler returns, and the
// handler's later writes fail rather than block.
func TestInvocationEndsBeforeCommit(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	writeErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		<-release // ignores its context, as a buggy handler might
		writeErr <- http.NewResponseController(w).Flush()
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := lambdaurl.Handler(h, lambdaurl.Options{})(ctx, &events.LambdaFunctionURLRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Handler error = %v, want context.Canceled", err)
	}
	close(release)
	if err := <-writeErr; err == nil {
		t.Error("Flush after the invocation ended succeeded")
	}
}

func TestWriteAfterReturn(t *testing.T) {
	t.Parallel()
	var saved http.ResponseWriter
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { saved = w })
	resp, err := lambdaurl.Handler(h, lambdaurl.Options{})(testContext(t), &events.LambdaFunctionURLRequest{})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) // EOF: the handler has returned
	if _, err := saved.Write([]byte("late")); err == nil {
		t.Error("Write after return succeeded")
	}
}

// BenchmarkEventFlush measures the per-event cost of the Lambda response
// path: one write and one flush of an SSE event into the response stream,
// drained by a reader as the Lambda runtime would.
func BenchmarkEventFlush(b *testing.B) {
	event := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for range b.N {
			w.Write(event)
			rc.Flush()
		}
	})
	b.ReportAllocs()
	b.SetBytes(int64(len(event)))
	b.ResetTimer()
	resp, err := lambdaurl.Handler(h, lambdaurl.Options{})(context.Background(), &events.LambdaFunctionURLRequest{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp); err != nil {
		b.Fatal(err)
	}
}
