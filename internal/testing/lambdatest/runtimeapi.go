// Package lambdatest holds test helpers for Lambda functions: an in-process
// implementation of the Lambda Runtime API that records streamed responses
// chunk by chunk as they arrive, a launcher for the AWS Lambda Runtime
// Interface Emulator (aws-lambda-rie), helpers that build and run a
// function binary, and the Function URL streaming framing (JSON prelude,
// eight NUL bytes, body).
//
// Every server listens on 127.0.0.1 only. Each helper comes twice: for a
// program (NewRuntimeAPI, StartProcess, NewEmulator, Build), returning an
// error and leaving the Close or Stop to the caller; and for a test
// (StartRuntimeAPI, StartFunction, StartEmulator, BuildTestBinary), a thin
// wrapper that fails the test on error and stops what it started with
// t.Cleanup.
package lambdatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Runtime API header names, as documented in
// https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html and
// https://docs.aws.amazon.com/lambda/latest/dg/runtimes-custom.html#runtimes-custom-response-streaming.
const (
	HeaderRequestID    = "Lambda-Runtime-Aws-Request-Id"
	HeaderDeadlineMS   = "Lambda-Runtime-Deadline-Ms"
	HeaderFunctionARN  = "Lambda-Runtime-Invoked-Function-Arn"
	HeaderTraceID      = "Lambda-Runtime-Trace-Id"
	HeaderResponseMode = "Lambda-Runtime-Function-Response-Mode"
	HeaderErrorType    = "Lambda-Runtime-Function-Error-Type"
	HeaderErrorBody    = "Lambda-Runtime-Function-Error-Body"
)

// FunctionARN is the invoked function ARN the RuntimeAPI reports.
const FunctionARN = "arn:aws:lambda:us-east-1:012345678912:function:function"

// DefaultTimeout is the invocation timeout Invoke uses for a zero deadline.
const DefaultTimeout = time.Minute

// RuntimeAPI is a small implementation of the Lambda Runtime API for tests:
// Invoke queues an event, the function under test fetches it from
// /runtime/invocation/next and posts its response, which the Invocation
// exposes chunk by chunk as the bytes arrive.
type RuntimeAPI struct {
	// Addr is host:port, the value for AWS_LAMBDA_RUNTIME_API.
	Addr string

	srv       *httptest.Server
	queue     chan *Invocation
	closing   chan struct{}
	closeOnce sync.Once
	seq       atomic.Int64

	mu         sync.Mutex
	byID       map[string]*Invocation
	initErrors []*Result
}

// NewRuntimeAPI starts a Runtime API on 127.0.0.1, port chosen by the
// system; Close stops it.
func NewRuntimeAPI() (*RuntimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lambdatest: runtime API: %w", err)
	}
	rt := &RuntimeAPI{
		queue:   make(chan *Invocation, 64),
		closing: make(chan struct{}),
		byID:    make(map[string]*Invocation),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", rt.serveNext)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", rt.serveResult)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", rt.serveResult)
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", rt.serveInitError)
	// What httptest.NewUnstartedServer builds, on a listener whose error
	// is returned rather than panicked on.
	rt.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	rt.srv.Start()
	rt.Addr = ln.Addr().String()
	return rt, nil
}

// StartRuntimeAPI is NewRuntimeAPI for a test: it stops the Runtime API
// when the test ends.
func StartRuntimeAPI(t testing.TB) *RuntimeAPI {
	t.Helper()
	rt, err := NewRuntimeAPI()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt
}

// Close ends the polls parked on /runtime/invocation/next, closes every
// connection and waits for the handlers. Calls after the first do nothing.
func (rt *RuntimeAPI) Close() {
	rt.closeOnce.Do(func() {
		close(rt.closing)
		rt.srv.CloseClientConnections()
		rt.srv.Close()
	})
}

// Env returns the environment entry that points a function at rt.
func (rt *RuntimeAPI) Env() string { return "AWS_LAMBDA_RUNTIME_API=" + rt.Addr }

// Invoke queues an invocation with the given event payload; the next call
// to /runtime/invocation/next receives it. A zero deadline means
// DefaultTimeout from now. It does not wait for the function; after Close
// it fails.
func (rt *RuntimeAPI) Invoke(ctx context.Context, event []byte, deadline time.Time) (*Invocation, error) {
	select {
	case <-rt.closing:
		return nil, errors.New("lambdatest: runtime API closed")
	default:
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(DefaultTimeout)
	}
	inv := &Invocation{
		ID:       fmt.Sprintf("00000000-0000-4000-8000-%012d", rt.seq.Add(1)),
		Event:    append([]byte(nil), event...),
		Deadline: deadline,
		update:   make(chan struct{}),
	}
	rt.mu.Lock()
	rt.byID[inv.ID] = inv
	rt.mu.Unlock()
	select {
	case rt.queue <- inv:
		return inv, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("lambdatest: queueing invocation: %w", ctx.Err())
	case <-rt.closing:
		return nil, errors.New("lambdatest: runtime API closed")
	}
}

// InitErrors returns what the function posted to /runtime/init/error.
func (rt *RuntimeAPI) InitErrors() []*Result {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]*Result(nil), rt.initErrors...)
}

func (rt *RuntimeAPI) serveNext(w http.ResponseWriter, r *http.Request) {
	select {
	case inv := <-rt.queue:
		h := w.Header()
		h.Set(HeaderRequestID, inv.ID)
		h.Set(HeaderDeadlineMS, strconv.FormatInt(inv.Deadline.UnixMilli(), 10))
		h.Set(HeaderFunctionARN, FunctionARN)
		h.Set(HeaderTraceID, "Root=1-00000000-000000000000000000000000;Sampled=0")
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(inv.Event)
	case <-r.Context().Done():
	case <-rt.closing:
		http.Error(w, "runtime API closing", http.StatusServiceUnavailable)
	}
}

// serveResult records a POST to /response or /error, reading the body as
// it arrives so a streamed response is seen chunk by chunk.
func (rt *RuntimeAPI) serveResult(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rt.mu.Lock()
	inv := rt.byID[id]
	rt.mu.Unlock()
	if inv == nil {
		writeRuntimeError(w, http.StatusBadRequest, "InvalidRequestID", "unknown request id "+id)
		return
	}
	endpoint := "response"
	if strings.HasSuffix(r.URL.Path, "/error") {
		endpoint = "error"
	}
	if !inv.begin(endpoint, r) {
		writeRuntimeError(w, http.StatusForbidden, "InvalidStateTransition", "invocation "+id+" already has a result")
		return
	}
	buf := make([]byte, 32<<10)
	var readErr error
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			inv.add(Chunk{Data: append([]byte(nil), buf[:n]...), At: time.Now()})
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			readErr = err
			break
		}
	}
	inv.end(r.Trailer, readErr)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"OK"}`)
}

func (rt *RuntimeAPI) serveInitError(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	res := &Result{Endpoint: "init/error", Header: r.Header.Clone(), Body: body, ReadErr: err}
	rt.mu.Lock()
	rt.initErrors = append(rt.initErrors, res)
	rt.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"OK"}`)
}

func writeRuntimeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"errorType": typ, "errorMessage": msg})
}

// Chunk is one read of a response body as the Runtime API received it.
type Chunk struct {
	Data []byte
	At   time.Time
}

// Result is how an invocation ended: what the function posted, and how.
type Result struct {
	// Endpoint is "response" or "error" (or "init/error").
	Endpoint string
	// Header is the POST's header: Content-Type, and for streamed
	// responses possibly Lambda-Runtime-Function-Response-Mode.
	Header http.Header
	// TransferEncoding is the POST's transfer coding; ["chunked"] for a
	// streamed response.
	TransferEncoding []string
	// Trailer carries Lambda-Runtime-Function-Error-Type and -Body when the
	// function failed in the middle of a streamed response.
	Trailer http.Header
	Body    []byte
	Chunks  []Chunk
	// ReadErr is set when the POST body broke off before its end.
	ReadErr error
}

// ErrorType returns the function error type the invocation reported: from
// the trailer of a streamed response, or for /error from its header or,
// as aws-lambda-go sends it, the errorType of its JSON body; "" if none.
func (r *Result) ErrorType() string {
	if v := r.Trailer.Get(HeaderErrorType); v != "" {
		return v
	}
	if r.Endpoint != "error" {
		return ""
	}
	if v := r.Header.Get(HeaderErrorType); v != "" {
		return v
	}
	var body struct {
		Type string `json:"errorType"`
	}
	_ = json.Unmarshal(r.Body, &body)
	return body.Type
}

// Invocation is one queued event and, once the function posts it, its
// result. Its methods are safe for concurrent use.
type Invocation struct {
	ID       string
	Event    []byte
	Deadline time.Time

	mu     sync.Mutex
	update chan struct{} // closed and replaced on every change
	begun  bool
	header *Result // set at begin
	chunks []Chunk
	ended  bool
}

func (inv *Invocation) changed() {
	close(inv.update)
	inv.update = make(chan struct{})
}

func (inv *Invocation) begin(endpoint string, r *http.Request) bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.begun {
		return false
	}
	inv.begun = true
	inv.header = &Result{
		Endpoint:         endpoint,
		Header:           r.Header.Clone(),
		TransferEncoding: r.TransferEncoding,
	}
	inv.changed()
	return true
}

func (inv *Invocation) add(c Chunk) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.chunks = append(inv.chunks, c)
	inv.changed()
}

func (inv *Invocation) end(trailer http.Header, readErr error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.header.Trailer = trailer.Clone()
	inv.header.ReadErr = readErr
	inv.ended = true
	inv.changed()
}

// wait blocks until ready reports true under the lock, or ctx ends.
func (inv *Invocation) wait(ctx context.Context, ready func() bool) error {
	for {
		inv.mu.Lock()
		ok, update := ready(), inv.update
		inv.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-update:
		case <-ctx.Done():
			return fmt.Errorf("lambdatest: invocation %s: %w", inv.ID, context.Cause(ctx))
		}
	}
}

// Chunk returns the i-th chunk of the posted body, waiting for it to
// arrive; io.EOF when the body ended with fewer chunks.
func (inv *Invocation) Chunk(ctx context.Context, i int) (Chunk, error) {
	err := inv.wait(ctx, func() bool { return len(inv.chunks) > i || inv.ended })
	if err != nil {
		return Chunk{}, err
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if i < len(inv.chunks) {
		return inv.chunks[i], nil
	}
	return Chunk{}, io.EOF
}

// Body returns a reader of the posted body that yields bytes as soon as
// the Runtime API has received them; its reads fail when ctx ends. Each
// call returns an independent reader from the start of the body.
func (inv *Invocation) Body(ctx context.Context) io.Reader {
	return &chunkReader{ctx: ctx, inv: inv}
}

// FirstBytes waits for the first byte of a streamed Function URL response
// and for the first byte of its body (after the prelude's eight NULs), and
// returns when the Runtime API received each: what a Function URL client
// would see as time to headers and time to first byte. It returns an error
// wrapping ErrNoPrelude when the response is not framed as a stream or
// ends before its body, as an /error post does.
func (inv *Invocation) FirstBytes(ctx context.Context) (head, body time.Time, err error) {
	var s preludeScanner
	ended := false
	for i := 0; ; i++ {
		c, err := inv.Chunk(ctx, i)
		if err == io.EOF {
			return head, body, fmt.Errorf("%w: invocation %s: body ended after %d bytes of prelude", ErrNoPrelude, inv.ID, len(s.head))
		}
		if err != nil {
			return head, body, err
		}
		if head.IsZero() {
			head = c.At
		}
		for _, b := range c.Data {
			if ended {
				return head, c.At, nil
			}
			if ended, err = s.scan(b); err != nil {
				return head, body, err
			}
		}
	}
}

// Wait blocks until the function has finished posting its result.
func (inv *Invocation) Wait(ctx context.Context) (*Result, error) {
	if err := inv.wait(ctx, func() bool { return inv.ended }); err != nil {
		return nil, err
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	res := *inv.header
	res.Chunks = append([]Chunk(nil), inv.chunks...)
	for _, c := range inv.chunks {
		res.Body = append(res.Body, c.Data...)
	}
	return &res, nil
}

type chunkReader struct {
	ctx context.Context
	inv *Invocation
	i   int // next chunk
	off int // offset into chunk i
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c, err := r.inv.Chunk(r.ctx, r.i)
	if err != nil {
		return 0, err
	}
	n := copy(p, c.Data[r.off:])
	r.off += n
	if r.off == len(c.Data) {
		r.i, r.off = r.i+1, 0
	}
	return n, nil
}
