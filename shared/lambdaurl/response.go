package lambdaurl

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"
)

// bufferSize matches net/http's per-response write buffer: small writes are
// coalesced until a Flush or until the buffer fills.
const bufferSize = 4 << 10

var errAfterReturn = errors.New("lambdaurl: write after the handler returned")

// commit is what the handler goroutine tells Handler once: the response to
// return to the Lambda runtime, or why there is none.
type commit struct {
	resp *events.LambdaFunctionURLStreamingResponse
	err  error
}

// responseWriter is the http.ResponseWriter the handler gets. Like
// net/http's, it is not safe for concurrent use and commits the status and
// headers at the first Flush, the first write that overflows its buffer, or
// the handler's return, whichever comes first; until then headers may still
// change and the Content-Type is sniffed from the first bytes when unset.
type responseWriter struct {
	method    string
	header    http.Header
	status    int // 0 until WriteHeader or the first Write
	sent      bool
	done      bool
	committed chan commit // buffered; receives exactly one value
	gone      <-chan struct{}
	pw        *io.PipeWriter
	bw        *bufio.Writer
}

var (
	_ http.ResponseWriter = (*responseWriter)(nil)
	_ http.Flusher        = (*responseWriter)(nil)
	_ io.StringWriter     = (*responseWriter)(nil)
)

func newResponseWriter(method string, pw *io.PipeWriter, gone <-chan struct{}) *responseWriter {
	rw := &responseWriter{
		method:    method,
		header:    make(http.Header),
		committed: make(chan commit, 1),
		gone:      gone,
		pw:        pw,
	}
	rw.bw = bufio.NewWriterSize(bodyWriter{rw}, bufferSize)
	return rw
}

func (rw *responseWriter) Header() http.Header { return rw.header }

// WriteHeader records the status. It panics on codes net/http rejects, and
// drops informational (1xx) codes, which a Function URL cannot send.
func (rw *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if rw.status != 0 || rw.done || (code < 200 && code != http.StatusSwitchingProtocols) {
		return
	}
	rw.status = code
}

func (rw *responseWriter) Write(p []byte) (int, error) {
	if err := rw.beforeWrite(); err != nil {
		return 0, err
	}
	if rw.method == http.MethodHead {
		return len(p), nil
	}
	return rw.bw.Write(p)
}

func (rw *responseWriter) WriteString(s string) (int, error) {
	if err := rw.beforeWrite(); err != nil {
		return 0, err
	}
	if rw.method == http.MethodHead {
		return len(s), nil
	}
	return rw.bw.WriteString(s)
}

func (rw *responseWriter) beforeWrite() error {
	if rw.done {
		return errAfterReturn
	}
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(rw.status) {
		return http.ErrBodyNotAllowed
	}
	return nil
}

// Flush implements http.Flusher.
func (rw *responseWriter) Flush() { _ = rw.FlushError() }

// FlushError sends the headers, if not yet sent, and every byte written so
// far into the response stream; http.ResponseController prefers it to Flush
// because it reports a response stream nobody reads any more.
func (rw *responseWriter) FlushError() error {
	if rw.done {
		return errAfterReturn
	}
	select {
	case <-rw.gone:
		return io.ErrClosedPipe
	default:
	}
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.bw.Buffered() == 0 {
		rw.commit(nil)
	}
	return rw.bw.Flush() // commits with the buffered bytes otherwise
}

// flushAll commits and sends everything a returned handler wrote; end
// then ends the stream (with err, or io.EOF when nil).
func (rw *responseWriter) flushAll() error {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	if rw.bw.Buffered() == 0 {
		rw.commit(nil)
	}
	return rw.bw.Flush()
}

func (rw *responseWriter) end(err error) {
	rw.done = true
	rw.pw.CloseWithError(err) // nil closes with io.EOF
}

// abort ends a response whose handler panicked: before the commit Handler
// returns err; after it the body ends with err, which the Lambda runtime
// reports as an error in the middle of the stream.
func (rw *responseWriter) abort(err error) {
	rw.done = true
	if !rw.sent {
		rw.sent = true
		rw.committed <- commit{err: err}
	}
	rw.pw.CloseWithError(err)
}

// commit hands the status and headers to Handler, once. first is the first
// chunk of the body, for Content-Type sniffing as net/http does it.
func (rw *responseWriter) commit(first []byte) {
	if rw.sent {
		return
	}
	rw.sent = true
	h := rw.header
	if _, haveType := h["Content-Type"]; !haveType && len(first) > 0 && h.Get("Transfer-Encoding") == "" && bodyAllowed(rw.status) {
		h.Set("Content-Type", http.DetectContentType(first))
	}
	resp := &events.LambdaFunctionURLStreamingResponse{StatusCode: rw.status}
	for k, vv := range h {
		switch {
		case len(vv) == 0, k == "Trailer", strings.HasPrefix(k, http.TrailerPrefix):
			// A nil value suppresses the header in net/http; Function URLs
			// have no trailers.
		case k == "Set-Cookie":
			resp.Cookies = append(resp.Cookies, vv...)
		default:
			if resp.Headers == nil {
				resp.Headers = make(map[string]string, len(h))
			}
			resp.Headers[k] = strings.Join(vv, ", ")
		}
	}
	rw.committed <- commit{resp: resp}
}

// bodyWriter sits under the bufio.Writer: the first bytes that leave the
// buffer commit the headers, then every write goes into the pipe the Lambda
// runtime reads, blocking until it has taken them.
type bodyWriter struct{ rw *responseWriter }

func (b bodyWriter) Write(p []byte) (int, error) {
	b.rw.commit(p)
	return b.rw.pw.Write(p)
}

func bodyAllowed(status int) bool {
	switch {
	case status >= 100 && status <= 199, status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}
