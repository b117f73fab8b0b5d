package server

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/upstream"
)

// proxy returns the handler for one proxied OpenAI operation. The request
// path reads top to bottom in serveProxy; each step is a call into the
// package that owns it.
func (s *Server) proxy(op upstream.Operation) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.serveProxy(w, r, op, "") }
}

func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, op upstream.Operation, deployment string) {
	rec := s.begin(w, r)
	defer s.finish(w, rec)
	rec.op = op
	ctx := r.Context()
	if dl, ok := ctx.Deadline(); ok && s.MinRemaining > 0 && dl.Sub(s.Now()) < s.MinRemaining {
		// Lambda: the invocation ends before a request could; refuse it
		// whole rather than start it and cut it.
		s.fail(w, rec, serverErrorRetry(http.StatusServiceUnavailable, "deadline_too_near",
			"this invocation has too little time left to serve the request; retry", time.Second))
		return
	}

	// 1. Authenticate: JWT against the issuer's cached JWKS. Nothing of a
	// caller without a valid token is read, not even its body.
	p, err := s.Auth.Verify(ctx, r.Header.Get("Authorization"))
	if err != nil {
		s.fail(w, rec, authError(err))
		return
	}
	rec.tenant, rec.subject = p.Tenant, p.Subject

	// 2. Tenant: the in-process table from config.
	t := s.Tenants.Lookup(p.Tenant)
	if t == nil {
		s.fail(w, rec, tenantNotAllowed(p.Tenant))
		return
	}
	rec.tenantName = t.Name

	// 3. Read: a capped body, bounded in time.
	bufp := bodyPool.Get().(*[]byte)
	held := true // the client's body is released once the backend has its copy
	defer func() {
		if held {
			putBody(bufp)
		}
	}()
	// A client that never finishes its body must not hold a handler: bound
	// the read, then clear the deadline so a long stream is not cut.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.BodyReadTimeout)) // not supported on Lambda: the event holds the body
	raw, aerr := readBody(r, s.MaxBodyBytes, (*bufp)[:0])
	*bufp = raw
	if aerr != nil {
		// The deadline stays: net/http would otherwise wait for the rest of
		// the body after the handler returns. The connection is not reused.
		w.Header().Set("Connection", "close")
		s.fail(w, rec, aerr)
		return
	}
	_ = rc.SetReadDeadline(time.Time{})
	if deployment != "" { // Azure's deployment route: the path names the model
		if withModel, err := upstream.WithModel(make([]byte, 0, len(raw)+len(deployment)+16), raw, deployment); err == nil {
			raw = withModel
		}
	}

	// 4. Decode: only the fields the gateway decides on (upstream.Body).
	body, perr := parseBody(raw, op)
	rec.streamKnown, rec.stream = true, body.Stream
	if perr != nil {
		s.fail(w, rec, perr)
		return
	}
	rec.model, rec.stream = body.Model, body.Stream
	pool := s.Router.Pool(body.Model)
	if pool == nil || !t.Allows(body.Model) {
		s.fail(w, rec, modelNotFound(body.Model))
		return
	}
	rec.pool = pool.Name

	if op == upstream.Responses {
		for _, e := range pool.Endpoints {
			if !s.Targets[e].SupportsResponses() {
				s.fail(w, rec, invalidRequest(http.StatusBadRequest, "unsupported_api", "model",
					fmt.Sprintf("model %q is served on a surface without the Responses API", body.Model)))
				return
			}
		}
		if aerr := s.pinPrevious(ctx, rec, t.ID, pool, body.PreviousResponseID); aerr != nil {
			s.fail(w, rec, aerr)
			return
		}
	}

	// 5. Limit: one token from the tenant's bucket.
	if !s.take(ctx, w, rec, t.ID) {
		return
	}

	// 5b. Budget: for a tenant with token budgets, reserve an upper bound
	// of the request's tokens (prompt bound + output cap), settled once at
	// the end from the counted usage.
	if !s.reserveBudget(ctx, w, rec, t.ID, op, &body, raw) {
		return
	}
	defer s.settleBudget(w, rec)

	// 6. Route and rewrite: model → pool → endpoint, failover before the first byte.
	// Responses streams carry usage in response.completed: never inject
	// stream_options there (Azure refuses it).
	inject := body.Stream && !body.IncludeUsage && (op == upstream.ChatCompletions || op == upstream.Completions)
	upctx, cancel := context.WithCancelCause(ctx) // also ends a stalled stream
	defer cancel(nil)
	if body.Stream {
		rec.keepalive = startKeepalive(w, rc, s.streamPolicy(pool).KeepaliveInterval, s.Now)
		defer rec.keepalive.stop()
	}
	resp, release, err := s.send(upctx, rec, w, r.Header, pool, op, &body, raw, inject)
	putBody(bufp)
	held = false
	if err != nil {
		if rec.keepalive.stop() {
			s.failStream(w, rc, rec, err)
		} else {
			s.fail(w, rec, err)
		}
		return
	}
	defer release()
	defer resp.Body.Close()

	// 7. Relay: SSE event by event with a flush each, or the JSON as sent.
	// A backend that goes silent mid-body is cut off after the idle timeout.
	idle := newIdleReader(resp.Body, s.StreamIdleTimeout, cancel)
	defer idle.t.Stop()
	if body.Stream && isEventStream(resp.Header) {
		s.relayStream(ctx, w, rc, rec, resp, idle, inject)
	} else {
		s.relayJSON(w, rec, resp, idle)
	}
}

// errAttemptTimeout ends an attempt whose answer did not begin in time:
// a stream's headers (HeaderTimeout) or a whole JSON answer
// (ResponseTimeout).
var errAttemptTimeout = errors.New("backend attempt timeout")

// send tries the pool's endpoints in failover order until one answers with
// something other than a connect error, a header timeout, 429 or 5xx. It
// never retries once a response is handed back: nothing reached the client
// before that. A non-streaming answer that outlasts ResponseTimeout is a 504
// without another attempt. release frees the attempt's context.
func (s *Server) send(ctx context.Context, rec *record, w http.ResponseWriter, in http.Header, pool *route.Pool, op upstream.Operation,
	body *upstream.Body, raw []byte, inject bool) (resp *http.Response, release func(), err error) {
	var scratch [8]*route.Endpoint
	order, wait := s.Router.Order(pool, scratch[:0], s.MaxAttempts)
	if rec.pin != "" {
		// A stored response lives on one endpoint: only it can answer.
		order, wait = order[:0], 0
		for _, e := range pool.Endpoints {
			if e.Name == rec.pin {
				order = append(order, e)
			}
		}
	}
	if len(order) == 0 {
		return nil, nil, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "upstream_unavailable",
			Message:    fmt.Sprintf("every endpoint of pool %q asked to back off; retry later", pool.Name),
			RetryAfter: wait}
	}
	var last *apiError
	policy := s.streamPolicy(pool)
	for i, e := range order {
		if last != nil && rec.keepalive.isStarted() {
			rec.failoverAfterHeaders = true
		}
		target := s.Targets[e]
		rec.endpoint = e.Name
		rec.attempts++
		// Each attempt gets its own exactly sized copy: the transport may
		// still be reading a failed attempt's body, and a stream holds its
		// body until it ends, so a pooled buffer would pin more memory.
		out := body.RewriteWith(make([]byte, 0, len(raw)+rewriteSlack), raw, upstream.Changes{
			Model: target.BodyModel(body.Model), InjectUsage: inject, OutputCap: rec.outputCap(), CapField: target.CapField(op)})
		actx, cancel := context.WithCancelCause(ctx)
		req, err := target.NewRequest(actx, op, body.Model, out, in)
		if err != nil {
			cancel(nil)
			rec.detail = fmt.Sprintf("endpoint %s: %v", e.Name, err)
			last = credentialError(pool.Name, err)
			continue
		}
		req.Header.Set("X-Request-Id", rec.id)
		rec.sent = s.Now()
		timeout := s.HeaderTimeout
		if !body.Stream {
			timeout = s.ResponseTimeout
		}
		timer := time.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
		resp, err := s.Client.Do(req)
		rec.noteAttempt(resp, err)
		timer.Stop()
		if err != nil {
			timedOut := errors.Is(context.Cause(actx), errAttemptTimeout)
			cancel(nil)
			if ctx.Err() != nil {
				return nil, nil, contextError(ctx)
			}
			if timedOut {
				s.Router.Cooldown(e, s.DefaultCooldown, false)
				last = serverError(http.StatusGatewayTimeout, "upstream_timeout",
					fmt.Sprintf("pool %q: the backend did not answer within %s", pool.Name, timeout))
				if !body.Stream {
					return nil, nil, last
				}
				continue
			}
			s.Router.Cooldown(e, s.DefaultCooldown, false)
			rec.detail = err.Error() // the reason (x509: …) for the operator; the caller gets the class
			last = transportError(pool.Name, err)
			continue
		}
		rec.upstreamStatus = resp.StatusCode
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			ra, hard := retryAfter(resp.Header, s.Now())
			if !hard {
				ra = s.DefaultCooldown
			}
			s.Router.Cooldown(e, ra, hard)
			last = statusError(pool.Name, resp.StatusCode, ra, hard)
			drain(resp.Body)
			cancel(nil)
			continue
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			// The backend refused the gateway's own credentials: the caller
			// cannot fix that, so it is a 502, not the backend's 401. The
			// endpoint is named in the access log, never to the caller.
			drain(resp.Body)
			cancel(nil)
			rec.detail = fmt.Sprintf("endpoint %s rejected the gateway's credentials (status %d)", e.Name, resp.StatusCode)
			last = serverError(http.StatusBadGateway, "upstream_auth_failed",
				fmt.Sprintf("pool %q rejected the gateway's credentials (status %d)", pool.Name, resp.StatusCode))
			continue
		}
		if bad := checkAnswer(resp, body.Stream); bad != "" {
			// A stream answered with a web page, or a body in an encoding
			// the gateway cannot read: a backend failure, never a silent
			// success, and another endpoint may do better.
			s.Router.Cooldown(e, s.DefaultCooldown, false)
			drain(resp.Body)
			cancel(nil)
			rec.detail = fmt.Sprintf("endpoint %s: %s", e.Name, bad)
			last = serverError(http.StatusBadGateway, "upstream_bad_response", fmt.Sprintf("pool %q: the backend %s", pool.Name, bad))
			continue
		}
		decodeBody(resp)
		rec.upstreamHeaders = s.Now()
		if body.Stream && resp.StatusCode/100 == 2 {
			// The client gets the headers now (unless a keepalive sent
			// them), but nothing else until the first event, so an
			// endpoint that sends none in time is abandoned for the next
			// (never the last attempt, which only the idle timeout ends).
			rec.keepalive.commit(func() { s.writeStreamHeader(w, rec, resp) })
			wait, why := s.StreamIdleTimeout, errStreamIdle
			if ftt := policy.FirstTokenTimeout; ftt > 0 && ftt < wait && i < len(order)-1 {
				wait, why = ftt, errFirstToken
			}
			timer := time.AfterFunc(wait, func() { cancel(why) })
			first, ferr := firstEvent(resp.Body, sse.DefaultMaxEventBytes)
			timer.Stop()
			if ferr != nil {
				drain(resp.Body)
				timedOut := context.Cause(actx)
				cancel(nil)
				if ctx.Err() != nil {
					return nil, nil, contextError(ctx)
				}
				s.Router.Cooldown(e, s.DefaultCooldown, false)
				rec.detail = fmt.Sprintf("endpoint %s: %v", e.Name, ferr)
				switch {
				case errors.Is(timedOut, errFirstToken):
					last = serverError(http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("pool %q: the backend sent no first token within %s", pool.Name, wait))
				case errors.Is(timedOut, errStreamIdle):
					last = serverError(http.StatusGatewayTimeout, "upstream_stream_idle", fmt.Sprintf("pool %q: the backend sent nothing for %s", pool.Name, wait))
				default:
					last = serverError(http.StatusBadGateway, "upstream_stream_error", fmt.Sprintf("pool %q: %s", pool.Name, cause(ferr)))
				}
				continue
			}
			rec.upstreamFirst = s.Now()
			if op == upstream.Responses {
				s.remember(rec, first, true)
			}
			resp.Body = &prefixed{prefix: first, ReadCloser: resp.Body}
		}
		s.Router.Healthy(e)
		return resp, func() { cancel(nil) }, nil
	}
	return nil, nil, last
}

// writeStreamHeader sends a stream's response headers: the backend's
// relayable ones and SSE's own.
func (s *Server) writeStreamHeader(w http.ResponseWriter, rec *record, resp *http.Response) {
	h := w.Header()
	upstream.CopyResponseHeaders(h, resp.Header)
	setSSEHeaders(h)
	rec.status = resp.StatusCode
	w.WriteHeader(resp.StatusCode)
	_ = http.NewResponseController(w).Flush()
	rec.clientFirst = s.Now()
}

// take takes one request token from the tenant's bucket and sets the
// x-ratelimit-*-requests headers; on a refusal it has answered.
func (s *Server) take(ctx context.Context, w http.ResponseWriter, rec *record, tenantID string) bool {
	d, err := s.Limiter.Take(ctx, tenantID)
	if err != nil {
		if ctx.Err() != nil { // the client left during the take: not the limiter's failure
			s.fail(w, rec, contextError(ctx))
			return false
		}
		s.fail(w, rec, limiterError(err, d.Reset.Sub(s.Now())))
		return false
	}
	now := s.Now()
	setRateHeaders(w.Header(), d, now)
	if !d.Allowed {
		s.fail(w, rec, &apiError{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded",
			Message:    fmt.Sprintf("Rate limit reached for tenant %q: %d requests per window. Retry after the time in Retry-After.", tenantID, d.Limit),
			RetryAfter: d.Reset.Sub(now)})
		return false
	}
	return true
}

// streamPolicy is pool's keepalive and first-token policy.
func (s *Server) streamPolicy(pool *route.Pool) StreamPolicy {
	if p, ok := s.Streams[pool.Name]; ok {
		return p
	}
	return s.DefaultStreams
}

// failStream ends a stream whose headers a keepalive already sent with
// one SSE error event: the status it would have had is in the error
// object, and no [DONE] follows.
func (s *Server) failStream(w http.ResponseWriter, rc *http.ResponseController, rec *record, err error) {
	e := asAPIError(err)
	rec.outcome, rec.status, rec.wroteHeader = e.Code, http.StatusOK, true
	if e.Status == 499 {
		return
	}
	ev := sse.AppendErrorEvent(nil, e.JSON())
	if n, werr := w.Write(ev); werr == nil {
		rec.bytes += int64(n)
		_ = rc.Flush()
	}
}

// relayStream relays an SSE response: headers flushed at once, then every
// event written and flushed as it completes. After the first byte nothing
// is retried: a failure ends the stream with one SSE error event.
func (s *Server) relayStream(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, rec *record, resp *http.Response, body io.Reader, stripUsage bool) {
	rec.wroteHeader = true
	var dst io.Writer = w
	flush := rc.Flush
	if ka := rec.keepalive; ka != nil {
		// Comments fill long gaps mid-stream too: the relay writes
		// through the keepalive from here.
		ka.commit(func() { s.writeStreamHeader(w, rec, resp) })
		if rec.status == 0 { // a keepalive comment sent the headers
			rec.status = http.StatusOK
		}
		dst, flush = ka, ka.flush
	} else {
		s.writeStreamHeader(w, rec, resp)
	}

	res, err := s.relay.Relay(dst, flush, body, sse.Options{StripUsageChunk: stripUsage, MaxTokenEvents: rec.maxTokenEvents()})
	rec.keepalive.stop()
	rec.bytes += res.Bytes
	rec.events, rec.tokenEvents = res.Events, res.TokenEvents
	rec.setUsage(res.Usage, res.HasUsage)
	if !res.FirstWrite.IsZero() {
		rec.clientFirstEvent = res.FirstWrite
	}
	var ae *apiError
	switch {
	case errors.Is(err, sse.ErrClient) || errors.Is(ctx.Err(), context.Canceled):
		rec.outcome = "client_gone"
		return
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		ae = serverError(http.StatusGatewayTimeout, "deadline_exceeded", "the gateway's deadline is near; the stream was ended before it completed")
	case errors.Is(err, sse.ErrTokenLimit):
		// The backend ignored the output cap written into the request:
		// the stream ends at its reservation, and is charged what was sent.
		rec.budget.cut = true
		ae = &apiError{Status: http.StatusTooManyRequests, Type: "tokens", Code: "budget_exceeded",
			Message: "the backend went past the output cap of this request's token budget; the stream was ended"}
	case res.EndedWithError:
		// The backend's own error event already reached the client: one
		// error event is the contract, not two.
		rec.outcome = "upstream_stream_error"
		return
	case errors.Is(context.Cause(ctxOf(resp)), errStreamIdle):
		ae = serverError(http.StatusGatewayTimeout, "upstream_stream_idle", fmt.Sprintf("the backend sent nothing for %s; the stream was ended", s.StreamIdleTimeout))
	case err != nil:
		ae = serverError(http.StatusBadGateway, "upstream_stream_error", "the backend stream failed mid-response: "+cause(err))
	case !res.Done:
		ae = serverError(http.StatusBadGateway, "upstream_stream_error", "the backend ended the stream before [DONE]")
	default:
		return
	}
	rec.outcome = ae.Code
	ev := sse.AppendErrorEvent(nil, ae.JSON())
	if n, werr := w.Write(ev); werr == nil {
		rec.bytes += int64(n)
		_ = rc.Flush()
	}
}

var errStreamIdle = errors.New("backend stream idle")

// idleReader notes when each read returned data; its timer, when it
// fires, re-arms itself for what is left of the idle window, or cancels the
// backend request if the window passed with nothing read. So a silent
// backend is cut off after d, and a busy stream costs one clock read per
// read instead of a timer reset per event.
type idleReader struct {
	r      io.Reader
	d      time.Duration
	last   atomic.Int64 // unix nanoseconds of the last read that returned data
	t      *time.Timer
	cancel context.CancelCauseFunc
}

func newIdleReader(r io.Reader, d time.Duration, cancel context.CancelCauseFunc) *idleReader {
	i := &idleReader{r: r, d: d, cancel: cancel}
	i.last.Store(time.Now().UnixNano())
	i.t = time.AfterFunc(time.Hour, i.check) // armed below: check needs i.t set
	i.t.Reset(d)
	return i
}

func (i *idleReader) check() {
	silent := time.Duration(time.Now().UnixNano() - i.last.Load())
	if silent >= i.d {
		i.cancel(errStreamIdle)
		return
	}
	i.t.Reset(i.d - silent)
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if n > 0 {
		i.last.Store(time.Now().UnixNano())
	}
	return n, err
}

func ctxOf(resp *http.Response) context.Context { return resp.Request.Context() }

// cause is the innermost message of a relay error, for the client.
func cause(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

// relayJSON relays a non-streaming answer byte for byte. Bodies that fit the
// pooled buffer are scanned for usage; larger ones are copied through.
func (s *Server) relayJSON(w http.ResponseWriter, rec *record, resp *http.Response, body io.Reader) {
	bufp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bufp)
	buf := *bufp
	// Read until EOF or a full buffer. io.ReadFull cannot be used: it says
	// ErrUnexpectedEOF both for a short complete body and for a body the
	// backend cut, and a cut body must never be relayed as complete.
	n, err := 0, error(nil)
	for n < len(buf) && err == nil {
		var m int
		m, err = body.Read(buf[n:])
		n += m
	}
	whole := err == io.EOF
	if err != nil && !whole {
		// The backend failed before the client got a byte: still a clean error.
		if errors.Is(context.Cause(ctxOf(resp)), errStreamIdle) {
			s.fail(w, rec, serverError(http.StatusGatewayTimeout, "upstream_timeout",
				fmt.Sprintf("the backend sent nothing for %s; the response was abandoned", s.StreamIdleTimeout)))
			return
		}
		s.fail(w, rec, serverError(http.StatusBadGateway, "upstream_error", "the backend response was cut off: "+err.Error()))
		return
	}
	upstream.CopyResponseHeaders(w.Header(), resp.Header)
	rec.status = resp.StatusCode
	if whole {
		if u, _, ok := sse.ParseUsage(buf[:n]); ok {
			rec.setUsage(u, true)
		}
		if rec.op == upstream.Responses && resp.StatusCode/100 == 2 && resp.Request.Method == http.MethodPost {
			s.remember(rec, buf[:n], false)
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(resp.StatusCode)
	rec.wroteHeader = true
	m, _ := w.Write(buf[:n])
	rec.bytes += int64(m)
	rec.clientFirst = s.Now()
	if !whole {
		c, err := io.CopyBuffer(w, struct{ io.Reader }{body}, buf)
		rec.bytes += c
		if err != nil {
			rec.outcome = "upstream_body_error"
			panic(http.ErrAbortHandler) // a truncated JSON body must not look complete
		}
	}
}

// Pools: request bodies (grown to the body's size, kept when small) and
// fixed 32 KiB copy buffers for JSON answers.
var (
	bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}
	copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
)

// rewriteSlack covers what a rewrite adds: a longer model name,
// "stream_options":{"include_usage":true} and an output cap.
const rewriteSlack = 144

func putBody(b *[]byte) {
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		bodyPool.Put(b)
	}
}

func readBody(r *http.Request, max int64, buf []byte) ([]byte, *apiError) {
	tooLarge := invalidRequest(http.StatusRequestEntityTooLarge, "request_too_large", "",
		fmt.Sprintf("request body exceeds the gateway's limit of %d bytes", max))
	if r.ContentLength > max {
		return buf, tooLarge
	}
	lr := io.LimitReader(r.Body, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > max {
			return buf, tooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return buf, invalidRequest(http.StatusRequestTimeout, "request_timeout", "", "the request body did not arrive in time")
			}
			return buf, invalidRequest(http.StatusBadRequest, "invalid_body", "", "reading the request body failed: "+err.Error())
		}
	}
}

// parseBody reads the routing fields and checks what each operation needs.
func parseBody(raw []byte, op upstream.Operation) (upstream.Body, *apiError) {
	if len(raw) == 0 {
		return upstream.Body{}, invalidRequest(http.StatusBadRequest, "invalid_json", "", "request body is empty; send a JSON object")
	}
	b, err := upstream.ParseBody(raw)
	var ke *upstream.KeyError
	var ie *upstream.IntError
	switch {
	case errors.As(err, &ke):
		code := "unknown_parameter"
		if ke.Duplicate {
			code = "duplicate_parameter"
		}
		return b, invalidRequest(http.StatusBadRequest, code, ke.Param, ke.Error())
	case errors.Is(err, upstream.ErrMissingModel):
		return b, invalidRequest(http.StatusBadRequest, "missing_required_parameter", "model", "you must provide a model parameter")
	case errors.Is(err, upstream.ErrModelType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "model", err.Error())
	case errors.Is(err, upstream.ErrStreamType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "stream", err.Error())
	case errors.Is(err, upstream.ErrPreviousType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "previous_response_id", err.Error())
	case errors.As(err, &ie):
		code := "invalid_type"
		if ie.BelowMin {
			code = "integer_below_min_value"
		}
		return b, invalidRequest(http.StatusBadRequest, code, ie.Param, ie.Error())
	case errors.Is(err, upstream.ErrOptionsType):
		return b, invalidRequest(http.StatusBadRequest, "invalid_type", "stream_options", err.Error())
	case err != nil:
		return b, invalidRequest(http.StatusBadRequest, "invalid_json", "", err.Error())
	}
	need, field := upstream.HasMessages, "messages"
	switch op {
	case upstream.Responses:
		return b, nil // input may be absent (a prompt template, a continued response)
	case upstream.Completions:
		need, field = upstream.HasPrompt, "prompt"
	case upstream.Embeddings:
		need, field = upstream.HasInput, "input"
	}
	if !b.Has(need) {
		return b, invalidRequest(http.StatusBadRequest, "missing_required_parameter", field, "missing required parameter: '"+field+"'")
	}
	return b, nil
}

func tenantNotAllowed(tenant string) *apiError {
	return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "tenant_not_allowed",
		Message: fmt.Sprintf("tenant %q is not configured on this gateway", tenant)}
}

func modelNotFound(model string) *apiError {
	return invalidRequest(http.StatusNotFound, "model_not_found", "model",
		fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model))
}

func authError(err error) *apiError {
	if errors.Is(err, auth.ErrKeysUnavailable) {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "auth_unavailable",
			Message: "the token issuer's signing keys are unavailable; retry shortly", RetryAfter: 5 * time.Second}
	}
	if errors.Is(err, auth.ErrInsufficientPermissions) {
		return &apiError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "insufficient_permissions",
			Message: err.Error()}
	}
	return &apiError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_token",
		Message: "invalid bearer token: " + err.Error(), Bearer: true}
}

// limiterError: retry is when the store will next be tried
// (Decision.Reset with ErrUnavailable); at least a second.
func limiterError(err error, retry time.Duration) *apiError {
	if errors.Is(err, ratelimit.ErrUnavailable) {
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "rate_limiter_unavailable",
			Message: "the rate-limit store is unavailable and this gateway fails closed; retry shortly", RetryAfter: max(retry, time.Second)}
	}
	return serverError(http.StatusInternalServerError, "rate_limiter_error", "the rate limiter failed")
}

func credentialError(pool string, err error) *apiError {
	// err names the credential that failed, never a token; the caller is
	// told only that the gateway's credential for the pool failed.
	return serverError(http.StatusBadGateway, "upstream_credential_error",
		fmt.Sprintf("pool %q: the gateway could not obtain its backend credential; retry later", pool))
}

func transportError(pool string, err error) *apiError {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return serverError(http.StatusGatewayTimeout, "upstream_timeout", fmt.Sprintf("pool %q: the backend did not answer in time", pool))
	}
	return serverError(http.StatusBadGateway, "upstream_unreachable", fmt.Sprintf("pool %q: the backend could not be reached", pool))
}

func statusError(pool string, status int, ra time.Duration, hard bool) *apiError {
	if status == http.StatusTooManyRequests {
		e := &apiError{Status: http.StatusTooManyRequests, Type: "requests", Code: "upstream_rate_limited",
			Message: fmt.Sprintf("every backend of pool %q tried is rate limited", pool)}
		if hard {
			e.RetryAfter = ra
		}
		return e
	}
	return serverError(http.StatusBadGateway, "upstream_error", fmt.Sprintf("pool %q: the backend answered %d", pool, status))
}

func contextError(ctx context.Context) *apiError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return serverError(http.StatusGatewayTimeout, "deadline_exceeded", "the gateway's deadline passed before the backend answered")
	}
	return &apiError{Status: 499, Type: "invalid_request_error", Code: "client_closed_request", Message: "client closed the request"}
}

// retryAfter parses Retry-After (seconds or an HTTP date, RFC 9110 §10.2.3).
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, secs > 0
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now), true
	}
	return 0, false
}

func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	_ = body.Close()
}

// isEventStream reports whether h's media type is text/event-stream
// (compared case-insensitively, parameters allowed).
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// checkAnswer says what is wrong with a successful answer the gateway
// cannot relay as it was asked for ("" = nothing): a stream must be
// text/event-stream, and a body must be plain or gzip (the gateway never
// asks for an encoding, and it must scan what it relays).
func checkAnswer(resp *http.Response, stream bool) string {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ""
	}
	if stream && !isEventStream(resp.Header) {
		return fmt.Sprintf("answered a streaming request with %q, not text/event-stream", resp.Header.Get("Content-Type"))
	}
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity", "gzip", "x-gzip":
	default:
		return fmt.Sprintf("sent Content-Encoding %q, which the gateway does not decode", ce)
	}
	return ""
}

// decodeBody makes a gzip body plain, so that the header the client gets
// always agrees with the bytes (the gateway scans and may append to them).
// The gzip header is read on the first Read, not here: a stream's first
// bytes may be a while coming.
func decodeBody(resp *http.Response) {
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))) {
	case "gzip", "x-gzip":
		resp.Body = &gunzip{src: resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
}

type gunzip struct {
	src io.ReadCloser
	zr  *gzip.Reader
	err error
}

func (g *gunzip) Read(p []byte) (int, error) {
	if g.zr == nil && g.err == nil {
		g.zr, g.err = gzip.NewReader(g.src)
		if g.err != nil {
			g.err = fmt.Errorf("gzip: %w", g.err)
		}
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.zr.Read(p)
}

func (g *gunzip) Close() error { return g.src.Close() }

// setRateHeaders sets OpenAI's x-ratelimit-*-requests headers.
func setRateHeaders(h http.Header, d ratelimit.Decision, now time.Time) {
	h["X-Ratelimit-Limit-Requests"] = []string{strconv.FormatUint(d.Limit, 10)}
	h["X-Ratelimit-Remaining-Requests"] = []string{strconv.FormatUint(d.Remaining, 10)}
	reset := d.Reset.Sub(now)
	if reset < 0 {
		reset = 0
	}
	h["X-Ratelimit-Reset-Requests"] = []string{reset.Round(time.Millisecond).String()}
}
