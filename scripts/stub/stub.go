// Package stub is a model backend for tests and benchmarks. It answers the
// OpenAI, Azure OpenAI and vLLM path shapes (chat completions, completions,
// embeddings, models, and OpenAI's Responses API with stored responses),
// and Anthropic's Messages API, and streams like a loaded vLLM: the first
// token TTFT after the request arrives, then one token per Interval. What
// agents need answers as the real services do (schema.go): a request that
// offers tools gets a call of one (chat tool_calls, a Responses
// function_call item, a Messages tool_use block) until the conversation
// ends with the tool's result, then text; one that asks for structured
// output gets JSON that satisfies its schema. Faults (error statuses, hangs,
// dropped and stalled streams, reset connections) are injected per request
// by the FaultHeader, or for every request by Server.SetFault.
//
// It is built to be cheap because the benchmark drives 1,500 concurrent
// streams through it on a few cores: a chat or completion stream runs on
// its handler's goroutine with one timer, its events are pre-rendered per
// request, and an event costs a few appends of a template, one
// strconv.AppendInt, one write and one flush, with no allocation and no
// encoding/json. Responses API streams, off the benchmark's path, encode
// each event with encoding/json.
//
// What the stub received is kept for assertions: Server.LastRequest and
// Server.Requests (the last 64).
package stub

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Request headers that override the stream shape for one request, so an
// end-to-end test through the gateway can ask for a fast or short stream.
// Durations are Go durations; a negative one means no delay.
const (
	TTFTHeader     = "X-Stub-TTFT"
	IntervalHeader = "X-Stub-Interval"
	TokensHeader   = "X-Stub-Tokens"
)

// NameHeader carries Options.Name on every response, so a test through the
// gateway can tell which backend answered.
const NameHeader = "X-Stub-Name"

// Defaults of Options: a loaded vLLM serving a mid-sized model.
const (
	DefaultTTFT     = 90 * time.Millisecond
	DefaultInterval = 14 * time.Millisecond
	DefaultTokens   = 128
	DefaultModel    = "stub-model"
)

// maxBody caps the request body the stub reads; larger requests get 413.
const maxBody = 8 << 20

// Options configures a Server. The zero value is a loaded vLLM with no auth.
type Options struct {
	// TTFT is the delay from the request's arrival to the first event of
	// a stream. Zero means DefaultTTFT; negative means none.
	TTFT time.Duration
	// Interval is the delay between tokens. Zero means DefaultInterval;
	// negative means none.
	Interval time.Duration
	// Tokens is how many completion tokens a response has (fewer when the
	// request's max_tokens is smaller). Zero means DefaultTokens; negative
	// means none.
	Tokens int
	// PromptTokens is the reported usage.prompt_tokens. Zero means an
	// estimate from the request body: len(body)/4, at least 1.
	PromptTokens int
	// Name is sent as the NameHeader on every response; empty sends none.
	Name string
	// APIKey, when set, is required as "Authorization: Bearer <key>", or on
	// the Azure paths (/openai/...) also as "api-key: <key>", or on the
	// Messages API's paths also as "x-api-key: <key>"; other requests get
	// 401. Empty accepts any request.
	APIKey string
	// NonStreamDelay delays a non-streaming answer. Zero answers at once:
	// non-streaming requests measure the requests-per-second ceiling.
	NonStreamDelay time.Duration
	// Models is the list GET /v1/models returns, and the model of a
	// request that names none. Empty means []string{DefaultModel}.
	Models []string
	// Prose, when true, answers with readable English: words of a few
	// fixed sentences, one word a token, the starting sentence chosen by
	// a hash of the request body (the same request gets the same text).
	// False repeats " tok" per token, which tests count on.
	Prose bool
	// IgnoreMaxTokens makes the stub a backend that ignores the output cap
	// (max_tokens, max_completion_tokens, max_output_tokens): every answer
	// has Tokens tokens per choice, whatever the request asks.
	IgnoreMaxTokens bool
	// Step, when set, puts every stream in step mode: each event (role,
	// token, finish, usage and [DONE] alike) is written only after a
	// receive from Step, and TTFT and Interval are ignored. With several
	// streams, each receive releases one event of one of them. Response
	// headers go out without waiting. Emitted counts what was written.
	Step <-chan struct{}
}

// Server is the stub backend: an http.Handler. Create it with New.
type Server struct {
	opts    Options
	tokens  int
	created int64 // the "created" of the models in /v1/models
	wording *wording

	done      chan struct{}
	closeOnce sync.Once

	ids       atomic.Uint64
	requests  atomic.Int64
	http2     atomic.Int64
	streams   atomic.Int64
	active    atomic.Int64
	canceled  atomic.Int64
	completed atomic.Int64
	events    atomic.Int64
	prompt    atomic.Int64
	generated atomic.Int64

	bufs sync.Pool // of *streamBufs

	responses responseStore

	mu     sync.Mutex
	fault  Fault
	recent [historySize]RecordedRequest // a ring: the newest at (seen-1) % historySize
	seen   int                          // requests recorded
	kept   int                          // body bytes in recent
}

var _ http.Handler = (*Server)(nil)

// New returns a Server with opts, defaults filled in.
func New(opts Options) *Server {
	opts.TTFT = orDefault(opts.TTFT, DefaultTTFT)
	opts.Interval = orDefault(opts.Interval, DefaultInterval)
	if len(opts.Models) == 0 {
		opts.Models = []string{DefaultModel}
	}
	tokens := opts.Tokens
	switch {
	case tokens == 0:
		tokens = DefaultTokens
	case tokens < 0:
		tokens = 0
	}
	return &Server{
		opts:    opts,
		tokens:  tokens,
		created: time.Now().Unix(),
		wording: newWording(opts.Prose),
		done:    make(chan struct{}),
	}
}

func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Stats counts what the stub has served since New.
type Stats struct {
	Requests      int64 // every request, whatever its answer
	HTTP2         int64 // of Requests, those over HTTP/2: what the client negotiated by ALPN
	Streams       int64 // streaming responses started (status 200 sent)
	ActiveStreams int64 // streams now open
	Canceled      int64 // streams whose client went away (or Close) before the end
	Completed     int64 // streams that wrote data: [DONE], or a Responses stream's last event
	Events        int64 // SSE events written and flushed, all streams (as Emitted)
	// PromptTokens is the prompt tokens of every chat, completion and
	// Responses request answered (as their usage reports them), and
	// CompletionTokens the completion tokens the stub generated: whole
	// answers' in full, streams' as far as their token events were written
	// and flushed. Their sum is what a backend would bill.
	PromptTokens, CompletionTokens int64
}

// Stats returns the counters. Each is read atomically; together they are
// a snapshot only when no request is in flight.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:      s.requests.Load(),
		HTTP2:         s.http2.Load(),
		Streams:       s.streams.Load(),
		ActiveStreams: s.active.Load(),
		Canceled:      s.canceled.Load(),
		Completed:     s.completed.Load(),
		Events:        s.events.Load(),
		PromptTokens:  s.prompt.Load(),
		// CompletionTokens: see Stats.
		CompletionTokens: s.generated.Load(),
	}
}

// Emitted returns how many SSE events all streams have written and
// flushed; with Options.Step it tells a test which events are out.
func (s *Server) Emitted() int64 { return s.events.Load() }

// The credential a request carried, as RecordedRequest.Auth.
const (
	AuthNone   = ""
	AuthBearer = "bearer"
	AuthAPIKey = "api-key"
	// AuthXAPIKey is Anthropic's x-api-key header.
	AuthXAPIKey = "x-api-key"
)

// RecordedRequest is what the stub received, for asserting what the
// gateway forwarded.
type RecordedRequest struct {
	Method     string
	Path       string
	RawQuery   string
	Header     http.Header // a copy: the caller may change it
	Body       []byte      // a copy
	Deployment string      // the {deployment} of an Azure deployments path
	// Auth is the credential the request carried: AuthBearer, AuthAPIKey
	// or AuthNone. A request with both is AuthBearer.
	Auth string
}

// historySize is how many requests Requests returns at most, and
// historyBodies the most body bytes they keep together: older bodies
// beyond it are dropped (nil), the newest is always kept.
const (
	historySize   = 64
	historyBodies = 16 << 20
)

// LastRequest returns the most recent request, with every fault and error
// answer included; the zero value before the first.
func (s *Server) LastRequest() RecordedRequest {
	s.mu.Lock()
	var last RecordedRequest
	if s.seen > 0 {
		last = s.recent[(s.seen-1)%historySize]
	}
	s.mu.Unlock()
	return last.clone()
}

// Requests returns the most recent requests, oldest first: all of them up
// to the last 64, with every fault and error answer included, so that a
// test that sends several requests can check each (e.g. that no Responses
// request carried stream_options). Bodies are kept up to 16 MiB in all; an
// older request's Body beyond that is nil.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	n := min(s.seen, historySize)
	out := make([]RecordedRequest, n)
	for i := range out {
		out[i] = s.recent[(s.seen-n+i)%historySize]
	}
	s.mu.Unlock()
	for i := range out {
		out[i] = out[i].clone()
	}
	return out
}

// clone copies what the caller may change.
func (rec RecordedRequest) clone() RecordedRequest {
	rec.Header = rec.Header.Clone()
	rec.Body = bytes.Clone(rec.Body)
	return rec
}

// SetFault makes f apply to the requests that arrive after it, until the
// next SetFault (or for f.Times requests). A request carrying the
// FaultHeader uses that fault instead. SetFault(Fault{}) heals the stub.
func (s *Server) SetFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// Close aborts the connection of every response that is waiting (for the
// next token, a step, a Hang, a StallAfter, SlowHeaders or NonStreamDelay),
// now and later, so that an httptest.Server's Close or an http.Server's
// Shutdown returns at once. A client sees a transport error, never a
// cleanly ended response. Close is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
}

// ServeHTTP records the request, applies any fault, checks auth and
// answers per route.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	s.requests.Add(1)
	if r.ProtoMajor == 2 {
		s.http2.Add(1)
	}
	rt, found := parseRoute(r.URL.Path)
	body, readErr := readBody(w, r)
	s.record(r, body, credential(r), rt.deployment)
	if s.opts.Name != "" {
		w.Header().Set(NameHeader, s.opts.Name)
	}
	if readErr != nil {
		status, msg := http.StatusBadRequest, "stub: reading body: "+readErr.Error()
		if _, ok := errors.AsType[*http.MaxBytesError](readErr); ok {
			status = http.StatusRequestEntityTooLarge
		}
		writeError(w, status, msg, "invalid_request_error", "")
		return
	}
	f, err := s.faultFor(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "stub_bad_fault")
		return
	}
	shape, err := s.shapeFor(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "stub_bad_header")
		return
	}
	if !s.before(w, r, f, rt) {
		return
	}
	if f.SlowHeaders > 0 {
		arrived = time.Now()
	}

	switch {
	case !found:
		writeError(w, http.StatusNotFound, "stub: no route for "+r.URL.Path, "invalid_request_error", "unknown_url")
		return
	case !rt.allows(r.Method):
		w.Header().Set("Allow", rt.allow)
		writeError(w, http.StatusMethodNotAllowed, "stub: "+r.Method+" not allowed on "+r.URL.Path, "invalid_request_error", "method_not_supported")
		return
	case rt.deployment != "" && r.URL.Query().Get("api-version") == "":
		writeError(w, http.StatusBadRequest, "stub: missing required query parameter api-version", "invalid_request_error", "missing_api_version")
		return
	case !s.authorized(r, rt) && rt.anthropic:
		writeAnthropicError(w, http.StatusUnauthorized, "stub: invalid x-api-key")
		return
	case !s.authorized(r, rt):
		writeError(w, http.StatusUnauthorized, "stub: incorrect API key provided", "invalid_request_error", "invalid_api_key")
		return
	}

	switch rt.kind {
	case kindHealth:
		w.WriteHeader(http.StatusOK)
	case kindModels:
		s.models(w)
	case kindEmbeddings:
		s.embeddings(w, body, rt)
	case kindResponses:
		s.createResponse(w, r, body, rt, f, shape, arrived)
	case kindResponse:
		s.response(w, r, rt, f)
	case kindResponseCancel:
		s.cancelResponse(w, rt)
	case kindResponseInputItems:
		s.inputItems(w, r, rt)
	case kindMessages:
		s.messages(w, r, body, f, shape, arrived)
	case kindCountTokens:
		s.countTokens(w, body)
	case kindResponsesCompact:
		s.compactResponse(w, body)
	case kindResponsesInput:
		writeJSON(w, http.StatusOK, map[string]any{"object": "response.input_tokens", "input_tokens": s.promptTokens(body)})
	default:
		s.complete(w, r, body, rt, f, shape, arrived)
	}
}

// before applies the faults that strike before the response: Close, Hang,
// SlowHeaders and Status. It reports whether the request goes on.
func (s *Server) before(w http.ResponseWriter, r *http.Request, f Fault, rt route) bool {
	switch {
	case f.Close:
		resetConn(w)
		return false
	case f.Hang:
		s.hold(r)
		return false
	}
	if f.SlowHeaders > 0 {
		t := time.NewTimer(f.SlowHeaders)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false
		case <-s.done:
			panic(http.ErrAbortHandler)
		}
	}
	if f.Status != 0 {
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", retryAfterValue(f.RetryAfter))
		}
		typ, code := "server_error", ""
		switch {
		case f.Status == http.StatusTooManyRequests:
			typ, code = "requests", "rate_limit_exceeded"
		case f.Status < 500:
			typ = "invalid_request_error"
		}
		if rt.anthropic {
			writeAnthropicError(w, f.Status, "stub: injected fault: status "+strconv.Itoa(f.Status))
			return false
		}
		writeError(w, f.Status, "stub: injected fault: status "+strconv.Itoa(f.Status), typ, code)
		return false
	}
	return true
}

// hold blocks until the client goes away; on Close it aborts the
// connection so that the client sees an error, not an empty 200.
func (s *Server) hold(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-s.done:
		panic(http.ErrAbortHandler)
	}
}

// resetConn hijacks the connection and closes it with SO_LINGER 0, so the
// peer gets a TCP RST before any response byte. Where hijacking is not
// possible (HTTP/2), it aborts the handler, which resets the stream.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if l, ok := conn.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0)
	}
	_ = conn.Close()
}

func (s *Server) faultFor(r *http.Request) (Fault, error) {
	if v, ok := r.Header[FaultHeader]; ok {
		return ParseFault(strings.Join(v, ","))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fault
	if s.fault.Times > 0 {
		s.fault.Times--
		if s.fault.Times == 0 {
			s.fault = Fault{}
		}
	}
	return f, nil
}

// shape is the timing and length of one response.
type shape struct {
	ttft, interval time.Duration
	tokens         int
}

func (s *Server) shapeFor(r *http.Request) (shape, error) {
	sh := shape{ttft: s.opts.TTFT, interval: s.opts.Interval, tokens: s.tokens}
	for _, h := range []struct {
		name string
		d    *time.Duration
	}{{TTFTHeader, &sh.ttft}, {IntervalHeader, &sh.interval}} {
		if v := r.Header.Get(h.name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return shape{}, errors.New("stub: " + h.name + ": " + err.Error())
			}
			*h.d = max(d, 0)
		}
	}
	if v := r.Header.Get(TokensHeader); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<20 {
			return shape{}, errors.New("stub: " + TokensHeader + ": want 0 to 1048576, got " + strconv.Quote(v))
		}
		sh.tokens = n
	}
	return sh, nil
}

func (s *Server) record(r *http.Request, body []byte, auth, deployment string) {
	rec := RecordedRequest{
		Method:     r.Method,
		Path:       r.URL.Path,
		RawQuery:   r.URL.RawQuery,
		Header:     r.Header.Clone(),
		Body:       body,
		Deployment: deployment,
		Auth:       auth,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := &s.recent[s.seen%historySize]
	s.kept += len(rec.Body) - len(slot.Body)
	*slot = rec
	s.seen++
	// Drop the oldest bodies past historyBodies, never the newest.
	for i := max(s.seen-historySize, 0); s.kept > historyBodies && i < s.seen-1; i++ {
		old := &s.recent[i%historySize]
		s.kept -= len(old.Body)
		old.Body = nil
	}
}

// credential returns which credential r carries, for RecordedRequest.Auth.
func credential(r *http.Request) string {
	switch {
	case r.Header.Get("Authorization") != "":
		return AuthBearer
	case r.Header.Get("api-key") != "":
		return AuthAPIKey
	case r.Header.Get("x-api-key") != "":
		return AuthXAPIKey
	}
	return AuthNone
}

// authorized reports whether r carries Options.APIKey: as a bearer token,
// or on the Azure paths also as the api-key header.
func (s *Server) authorized(r *http.Request, rt route) bool {
	if s.opts.APIKey == "" {
		return true
	}
	want := []byte(s.opts.APIKey)
	// The scheme name is case-insensitive (RFC 9110 §11.1).
	if v := r.Header.Get("Authorization"); len(v) > 7 && strings.EqualFold(v[:7], "bearer ") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(v[7:])), want) == 1 {
		return true
	}
	if rt.anthropic {
		return subtle.ConstantTimeCompare([]byte(r.Header.Get("x-api-key")), want) == 1
	}
	return rt.azure && subtle.ConstantTimeCompare([]byte(r.Header.Get("api-key")), want) == 1
}
