// Package lambdaurl serves an http.Handler behind an AWS Lambda Function URL
// in RESPONSE_STREAM invoke mode, so the same handler runs as an HTTP server
// or as a Lambda function.
//
// It translates each Function URL event into an *http.Request and streams
// the handler's response back through the Lambda Runtime API. Unlike
// github.com/aws/aws-lambda-go/lambdaurl, the http.ResponseWriter it hands
// to the handler implements http.Flusher (so http.NewResponseController
// works), buffers small writes like net/http does, and sends every Flush to
// the client at once: server-sent events reach the Function URL client one
// by one. Binaries that use it should be built with -tags lambda.norpc.
package lambdaurl

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/llmgw/gateway/shared/problem"
)

// DefaultDeadlineMargin is the DeadlineMargin used when Settings leaves it zero.
const DefaultDeadlineMargin = 2 * time.Second

// Settings is the Lambda host's settings as the config file's lambda
// section writes them (their yaml names). The zero value works.
type Settings struct {
	// DeadlineMargin is how long before the Lambda invocation deadline the
	// request context expires, so the handler can cancel its upstream work
	// and end the response cleanly (for SSE: an error event) before Lambda
	// freezes the function mid-write. Zero means DefaultDeadlineMargin; a
	// negative value (which the config file cannot write) gives the
	// request the Lambda deadline itself. A margin larger than the time
	// left makes the request start already expired.
	DeadlineMargin time.Duration `yaml:"deadline_margin" json:"deadline_margin"`
}

// Check reports every problem with s under at, by the config file's
// field names.
func (s Settings) Check(at problem.At) {
	problem.NotNegative(at, "deadline_margin", s.DeadlineMargin)
}

// Options configures Handler and Start. The zero value works.
type Options struct {
	// Settings is what the config file sets of the host.
	Settings

	// ErrorLog receives handler panics, as http.Server.ErrorLog does.
	// Nil means the log package's standard logger.
	ErrorLog *log.Logger

	// AfterResponse, when set, runs after the handler returned and every
	// byte of its response reached the response stream, before the stream
	// ends: the invocation, and so the sandbox, is not frozen until it
	// returns, so telemetry flushed here is exported. ctx is
	// the invocation's (Lambda's own deadline); the caller bounds it
	// further. The client has its whole answer; only the stream's end
	// waits.
	AfterResponse func(ctx context.Context)
}

func (o Options) margin() time.Duration {
	if o.DeadlineMargin == 0 {
		return DefaultDeadlineMargin
	}
	return max(o.DeadlineMargin, 0)
}

func (o Options) logf(format string, args ...any) {
	if o.ErrorLog != nil {
		o.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// PanicError is the error an invocation ends with when the handler
// panicked: returned from the Lambda handler (so Lambda reports errorType
// "PanicError") when the panic came before the response was committed, or
// ending the response stream, which the Lambda runtime reports as an error
// in the middle of the stream, when it came after.
type PanicError struct {
	Value any // what the handler panicked with
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("lambdaurl: handler panicked: %v", e.Value)
}

type eventContextKey struct{}

// EventFromContext returns the Function URL event a request was made from,
// for handlers that need Lambda-only details such as requestContext.requestId.
func EventFromContext(ctx context.Context) (*events.LambdaFunctionURLRequest, bool) {
	ev, ok := ctx.Value(eventContextKey{}).(*events.LambdaFunctionURLRequest)
	return ev, ok
}

// Start serves h as a Lambda function behind a Function URL in
// RESPONSE_STREAM mode. It blocks, and exits the process when the Lambda
// Runtime API fails or AWS_LAMBDA_RUNTIME_API is unset (lambda.Start's
// behaviour).
func Start(h http.Handler, opts Options) {
	lambda.Start(Handler(h, opts))
}

// Handler returns a Lambda handler that serves Function URL events with h.
//
// It returns the streaming response as soon as the handler commits its
// headers (first Flush, a write that fills the buffer, or return), while the
// handler keeps writing from its own goroutine; the Lambda runtime copies the
// body to the Runtime API as it is produced. The handler goroutine always
// ends the body: normally with EOF, after a panic with a *PanicError.
func Handler(h http.Handler, opts Options) func(ctx context.Context, ev *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
	return func(ctx context.Context, ev *events.LambdaFunctionURLRequest) (*events.LambdaFunctionURLStreamingResponse, error) {
		if ev == nil {
			return nil, errors.New("lambdaurl: nil Function URL event")
		}
		reqCtx, cancel := requestContext(ctx, opts.margin())
		reqCtx = context.WithValue(reqCtx, eventContextKey{}, ev)
		req, err := newRequest(reqCtx, ev)
		if err != nil {
			cancel()
			return nil, err
		}

		pr, pw := io.Pipe()
		body := &streamBody{pr: pr, gone: make(chan struct{})}
		rw := newResponseWriter(req.Method, pw, body.gone)
		go serve(ctx, h, rw, req, cancel, opts)

		select {
		case c := <-rw.committed:
			if c.err != nil {
				body.closeWithError(c.err)
				return nil, c.err
			}
			c.resp.Body = body
			return c.resp, nil
		case <-ctx.Done():
			// Lambda's own deadline passed with nothing committed: unblock
			// the handler's writes and let the invocation fail.
			body.closeWithError(ctx.Err())
			return nil, fmt.Errorf("lambdaurl: no response before the invocation ended: %w", ctx.Err())
		}
	}
}

// serve runs the handler and always ends the response: it commits headers
// if the handler did not, flushes, and closes the body pipe, so the Lambda
// runtime's read of the body ends and no goroutine is left waiting.
func serve(ctx context.Context, h http.Handler, rw *responseWriter, req *http.Request, cancel context.CancelFunc, opts Options) {
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			err := &PanicError{Value: v}
			if v != http.ErrAbortHandler {
				opts.logf("lambdaurl: panic serving %s %s: %v", req.Method, req.URL.RequestURI(), v)
			}
			if opts.AfterResponse != nil {
				opts.AfterResponse(ctx)
			}
			rw.abort(err)
			return
		}
		err := rw.flushAll()
		if opts.AfterResponse != nil {
			opts.AfterResponse(ctx)
		}
		rw.end(err)
	}()
	h.ServeHTTP(rw, req)
}

// streamBody is the response body the Lambda runtime reads. The runtime
// closes it after the invocation (or when posting the response failed);
// gone then tells the handler's Flush that nobody reads any more.
type streamBody struct {
	pr   *io.PipeReader
	gone chan struct{}
	once sync.Once
}

func (b *streamBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *streamBody) Close() error { return b.closeWithError(nil) }

func (b *streamBody) closeWithError(err error) error {
	b.once.Do(func() { close(b.gone) })
	return b.pr.CloseWithError(err)
}

func requestContext(ctx context.Context, margin time.Duration) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || margin <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline.Add(-margin))
}

// newRequest translates a Function URL event (payload format 2.0) into the
// request net/http's server would have built for the same HTTP request.
func newRequest(ctx context.Context, ev *events.LambdaFunctionURLRequest) (*http.Request, error) {
	method := ev.RequestContext.HTTP.Method
	if method == "" {
		method = http.MethodGet
	}
	requestURI := ev.RawPath
	if requestURI == "" {
		requestURI = "/"
	}
	if ev.RawQueryString != "" {
		requestURI += "?" + ev.RawQueryString
	}
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return nil, fmt.Errorf("lambdaurl: bad request path %q: %w", requestURI, err)
	}

	var body io.Reader = strings.NewReader(ev.Body)
	size := len(ev.Body)
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, fmt.Errorf("lambdaurl: decoding base64 body: %w", err)
		}
		body, size = bytes.NewReader(b), len(b)
	}

	req := (&http.Request{
		Method:        method,
		URL:           u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header, len(ev.Headers)+1),
		Body:          http.NoBody,
		ContentLength: int64(size),
		Host:          ev.RequestContext.DomainName,
		RequestURI:    requestURI,
	}).WithContext(ctx)
	if size > 0 {
		req.Body = io.NopCloser(body)
	}
	// Function URLs join repeated headers with commas, which is the same
	// field value (RFC 9110 section 5.3), so each arrives as one value.
	for k, v := range ev.Headers {
		req.Header.Add(k, v)
	}
	if host := req.Header.Get("Host"); host != "" {
		req.Host = host
	}
	req.Header.Del("Host") // net/http moves Host out of the header map.
	// Function URLs move Cookie headers into the cookies list.
	if len(ev.Cookies) > 0 {
		cookies := strings.Join(ev.Cookies, "; ")
		if c := req.Header.Get("Cookie"); c != "" {
			cookies = c + "; " + cookies
		}
		req.Header.Set("Cookie", cookies)
	}
	if ip := ev.RequestContext.HTTP.SourceIP; ip != "" {
		// net/http's RemoteAddr is host:port; Lambda does not say the port.
		req.RemoteAddr = net.JoinHostPort(ip, "0")
	}
	return req, nil
}
