package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/tenant"
)

// proxy returns the handler for one proxied OpenAI operation. The request
// path reads top to bottom in serveProxy; each step is a call into the
// package that owns it.
func (s *Server) proxy(op request.Operation) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.serveProxy(w, r, op, "") }
}

// serveProxy is the request path, step by step (its length is the path's:
// each step is a few lines calling the package, or the helper, that owns
// it, and reads best in one place).
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, op request.Operation, deployment string) {
	rec := s.begin(w, r)
	defer s.finish(w, rec)
	rec.op, rec.creates = op, op.Creates()
	ctx := rec.context(r)
	if dl, ok := ctx.Deadline(); ok && s.MinRemaining > 0 && dl.Sub(s.Now()) < s.MinRemaining {
		// Lambda: the invocation ends before a request could; refuse it
		// whole rather than start it and cut it.
		s.fail(w, rec, deadlineTooNear())
		return
	}

	// 1–2. Authenticate (JWT against the issuer's cached JWKS), then find
	// the tenant in the in-process table. Nothing of a caller without a
	// valid token is read, not even its body.
	t, ok := s.principalTenant(w, r, rec)
	if !ok {
		return
	}

	// 2b. Concurrency: one of the tenant's slots on this replica, held to
	// the end of the answer, so one tenant's flood is its own problem.
	if !s.admit(w, rec, t) {
		return
	}
	defer t.Release()

	// 3. Read: a capped body, bounded in time.
	rc := http.NewResponseController(w)
	bufp, raw, ok := s.readRequest(w, rc, r, rec, deployment)
	if !ok {
		return
	}
	held := true // the client's body is released once the backend has its copy
	defer func() {
		if held {
			putBody(bufp)
		}
	}()

	// 4. Decode: only the fields the gateway decides on, read once
	// (request.Body); the model must be the tenant's and routable.
	body, pool, ok := s.decode(ctx, w, rec, t, op, raw)
	if !ok {
		return
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
	inject := body.Stream && !body.IncludeUsage && op.StreamOptions()
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
	rec.keepalive.watch(&idle.last)
	if body.Stream && isEventStream(resp.Header) {
		s.streamOpens(rec)
		s.relayStream(ctx, w, rc, rec, resp, idle, inject)
	} else {
		s.relayJSON(w, rec, resp, idle)
	}
	s.rememberUsage(rec)
}

// readRequest reads the client's body into a pooled buffer, bounded in
// size and time; on failure it has answered and released the buffer.
// Azure's deployment routes name the model in the path: the body is made
// to say the same.
func (s *Server) readRequest(w http.ResponseWriter, rc *http.ResponseController, r *http.Request, rec *record, deployment string) (*[]byte, []byte, bool) {
	bufp := bodyPool.Get().(*[]byte)
	// A client that never finishes its body must not hold a handler: bound
	// the read, then clear the deadline so a long stream is not cut.
	_ = rc.SetReadDeadline(time.Now().Add(s.BodyReadTimeout)) // not supported on Lambda: the event holds the body
	raw, aerr := readBody(r, s.MaxBodyBytes, (*bufp)[:0])
	*bufp = raw
	if aerr != nil {
		// The deadline stays: net/http would otherwise wait for the rest of
		// the body after the handler returns. The connection is not reused.
		putBody(bufp)
		w.Header().Set("Connection", "close")
		s.fail(w, rec, aerr)
		return nil, nil, false
	}
	_ = rc.SetReadDeadline(time.Time{})
	if deployment != "" {
		if withModel, err := request.WithModel(make([]byte, 0, len(raw)+len(deployment)+16), raw, deployment); err == nil {
			raw = withModel
		}
	}
	return bufp, raw, true
}

// decode reads the body's routing fields and finds the model's pool: one
// the tenant may use and, for the Responses API, one that has it (and the
// endpoint a continued response lives on). On failure it has answered.
// Every endpoint of the pool must serve op.
func (s *Server) decode(ctx context.Context, w http.ResponseWriter, rec *record, t *tenant.Tenant, op request.Operation, raw []byte) (request.Body, *route.Pool, bool) {
	body, perr := parseBody(raw, op)
	rec.streamKnown, rec.stream = true, body.Stream
	if perr != nil {
		s.fail(w, rec, perr)
		return body, nil, false
	}
	rec.model = body.Model
	pool := s.Router.Pool(body.Model)
	if pool == nil || !t.Allows(body.Model) {
		s.fail(w, rec, modelNotFound(body.Model))
		return body, nil, false
	}
	rec.pool = pool.Name
	for _, e := range pool.Endpoints {
		// A pool whose kind lacks the operation (the Responses API on
		// Azure's deployments surface, the Messages API on an OpenAI
		// pool, chat on an anthropic pool): no translation, a clear 400.
		if !s.Targets[e].Supports(op) {
			s.fail(w, rec, unsupportedAPI(body.Model, op))
			return body, nil, false
		}
	}
	if !op.Creates() {
		return body, pool, true
	}
	// Stored state the gateway cannot prove the tenant owns is refused
	// before any backend sees it (issue 21).
	if body.Conversation {
		s.fail(w, rec, storedStateRefused("conversation", "stored conversations are not served through the gateway: send the conversation's items in 'input', or continue with 'previous_response_id'"))
		return body, nil, false
	}
	if body.ItemReference(raw) {
		s.fail(w, rec, storedStateRefused("input", "input items of type 'item_reference' are not served through the gateway: send the item itself, or continue with 'previous_response_id'"))
		return body, nil, false
	}
	if aerr := s.pinPrevious(ctx, rec, t.ID, pool, body.PreviousResponseID); aerr != nil {
		s.fail(w, rec, aerr)
		return body, nil, false
	}
	return body, pool, true
}

// errAttemptTimeout ends an attempt whose answer did not begin in time:
// a stream's headers (HeaderTimeout) or a whole JSON answer
// (ResponseTimeout).
var errAttemptTimeout = errors.New("backend attempt timeout")

// send tries the pool's endpoints in failover order until one answers with
// something other than a connect error, a header timeout, 429 or 5xx (or,
// for a stream, ends or stalls before its first event). It never retries
// once a response is handed back: no content reached the client before
// that. A non-streaming answer that outlasts ResponseTimeout is a 504
// without another attempt. release frees the attempt's context.
func (s *Server) send(ctx context.Context, rec *record, w http.ResponseWriter, in http.Header, pool *route.Pool, op request.Operation,
	body *request.Body, raw []byte, inject bool) (resp *http.Response, release func(), err error) {
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
		return nil, nil, upstreamUnavailable(pool.Name, wait)
	}
	var last *apiError
	for i, e := range order {
		if last != nil && rec.keepalive.isStarted() {
			rec.failoverAfterHeaders = true
		}
		a := attempt{rec: rec, w: w, pool: pool, e: e, op: op, body: body, lastTry: i == len(order)-1}
		resp, release, fail, final := s.try(ctx, a, in, raw, inject)
		if fail == nil {
			s.Router.Healthy(e)
			return resp, release, nil
		}
		rec.attemptEnds(telemetry.Result{Status: rec.upstreamStatus, ErrorType: fail.Code, Failover: !final && i < len(order)-1})
		if last = fail; final {
			break
		}
	}
	return nil, nil, last
}

// attempt is one try of one endpoint.
type attempt struct {
	rec     *record
	w       http.ResponseWriter
	pool    *route.Pool
	e       *route.Endpoint
	op      request.Operation
	body    *request.Body
	lastTry bool
}

// try sends the request to one endpoint. On failure it has benched the
// endpoint as the answer deserves; final says no other endpoint may be
// tried (the client left, or a JSON answer timed out).
func (s *Server) try(ctx context.Context, a attempt, in http.Header, raw []byte, inject bool) (resp *http.Response, release func(), fail *apiError, final bool) {
	rec, e, pool := a.rec, a.e, a.pool
	target := s.Targets[e]
	rec.endpoint = e.Name
	rec.attempts++
	// Each attempt gets its own exactly sized copy: the transport may still
	// be reading a failed attempt's body, and a stream holds its body until
	// it ends, so a pooled buffer would pin more memory.
	out := a.body.RewriteWith(make([]byte, 0, len(raw)+rewriteSlack), raw, request.Changes{
		Model: target.BodyModel(a.body.Model), InjectUsage: inject, OutputCap: rec.outputCap(), CapField: target.CapField(a.op)})
	actx, cancel := context.WithCancelCause(ctx)
	req, err := target.NewRequest(actx, a.op, a.body.Model, out, in)
	if err != nil {
		cancel(nil)
		rec.detail = fmt.Sprintf("endpoint %s: %v", e.Name, err)
		return nil, nil, credentialError(pool.Name, err), false
	}
	req.Header.Set("X-Request-Id", rec.id)
	s.attemptBegins(ctx, rec, req, target, a.op, a.body.Model)
	rec.sent = s.Now()
	if rec.firstSent.IsZero() {
		rec.firstSent = rec.sent
	}
	timeout := s.HeaderTimeout
	if !a.body.Stream {
		timeout = s.ResponseTimeout
	}
	timer := time.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
	resp, err = s.Client.Do(req)
	rec.noteAttempt(resp, err)
	if err != nil {
		timer.Stop()
		timedOut := errors.Is(context.Cause(actx), errAttemptTimeout)
		cancel(nil)
		if ctx.Err() != nil {
			return nil, nil, contextError(ctx), true
		}
		s.Router.Cooldown(e, s.DefaultCooldown, false)
		if timedOut {
			return nil, nil, attemptTimeout(pool.Name, timeout), !a.body.Stream
		}
		rec.detail = err.Error() // the reason (x509: …) for the operator; the caller gets the class
		return nil, nil, transportError(pool.Name, err), false
	}
	if fail := s.judge(rec, e, pool.Name, resp, a.body.Stream); fail != nil {
		timer.Stop()
		drain(resp.Body)
		cancel(nil)
		return nil, nil, fail, false
	}
	decodeBody(resp)
	rec.upstreamHeaders = s.Now()
	if !a.body.Stream || resp.StatusCode/100 != 2 {
		// A JSON answer: its head is read within the attempt's time, and
		// checked, before the client gets a byte.
		fail, final := s.awaitJSON(ctx, actx, a, resp, timeout)
		timer.Stop()
		if fail != nil {
			drain(resp.Body)
			cancel(nil)
			return nil, nil, fail, final
		}
		return resp, func() { cancel(nil) }, nil, false
	}
	timer.Stop()
	if a.body.Stream && resp.StatusCode/100 == 2 {
		if fail, final := s.awaitFirstEvent(ctx, actx, cancel, a, resp); fail != nil {
			return nil, nil, fail, final
		}
	}
	return resp, func() { cancel(nil) }, nil, false
}

// judge says whether a backend's answer is a failure to try elsewhere,
// and benches the endpoint accordingly: 429 and 5xx (for Retry-After or
// the default cooldown), a refusal of the gateway's own credentials, a
// redirect (never followed, never relayed), and a success the gateway
// cannot relay as asked.
func (s *Server) judge(rec *record, e *route.Endpoint, pool string, resp *http.Response, stream bool) *apiError {
	rec.upstreamStatus = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		ra, hard := retryAfter(resp.Header, s.Now())
		if !hard {
			ra = s.DefaultCooldown
		}
		s.Router.Cooldown(e, ra, hard)
		return statusError(pool, resp.StatusCode, ra, hard)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// The caller cannot fix the gateway's credentials: a 502, not the
		// backend's 401. The endpoint is named in the log, never to the caller.
		rec.detail = fmt.Sprintf("endpoint %s rejected the gateway's credentials (status %d)", e.Name, resp.StatusCode)
		return upstreamAuthFailed(pool, resp.StatusCode)
	case resp.StatusCode/100 == 3:
		s.Router.Cooldown(e, s.DefaultCooldown, false)
		return redirected(rec, e.Name, pool, resp.StatusCode)
	}
	if bad := checkAnswer(resp, stream); bad != "" {
		// A stream answered with a web page, or a body in an encoding the
		// gateway cannot read: never a silent success.
		s.Router.Cooldown(e, s.DefaultCooldown, false)
		rec.detail = fmt.Sprintf("endpoint %s: %s", e.Name, bad)
		return badResponse(pool, bad)
	}
	return nil
}

// awaitJSON reads a JSON answer's head (jsonAnswer) into rec.answer and
// checks it: an answer that is cut, stalls, or is not the JSON a success
// must be is abandoned for the next endpoint; one that outlasts the
// attempt's timeout ends the request (final), as a slow answer would
// only be slow again elsewhere.
func (s *Server) awaitJSON(ctx, actx context.Context, a attempt, resp *http.Response, timeout time.Duration) (fail *apiError, final bool) {
	rec, pool := a.rec, a.pool.Name
	ans := getAnswer()
	err := ans.readHead(resp.Body)
	switch {
	case err != nil && ctx.Err() != nil:
		answerPool.Put(ans)
		return contextError(ctx), true
	case err != nil && errors.Is(context.Cause(actx), errAttemptTimeout):
		answerPool.Put(ans)
		s.Router.Cooldown(a.e, s.DefaultCooldown, false)
		return attemptTimeout(pool, timeout), !a.body.Stream
	case err != nil:
		answerPool.Put(ans)
		s.Router.Cooldown(a.e, s.DefaultCooldown, false)
		rec.detail = fmt.Sprintf("endpoint %s: answer cut off: %v", a.e.Name, err)
		return answerCut(pool, err), false
	}
	if bad := checkJSON(resp, ans); bad != "" {
		answerPool.Put(ans)
		s.Router.Cooldown(a.e, s.DefaultCooldown, false)
		rec.detail = fmt.Sprintf("endpoint %s: %s", a.e.Name, bad)
		return badResponse(pool, bad), false
	}
	rec.answer = ans
	return nil, false
}

// awaitFirstEvent sends the client the stream's headers (unless a
// keepalive did) but nothing else until the backend's first event: an
// endpoint that sends none in time, or ends or stalls first, is abandoned
// for the next (never the last attempt, which only the idle timeout ends).
// On success the event is put back in front of resp.Body.
func (s *Server) awaitFirstEvent(ctx, actx context.Context, cancel context.CancelCauseFunc, a attempt, resp *http.Response) (fail *apiError, final bool) {
	rec := a.rec
	if !a.op.Creates() {
		rec.keepalive.commit(func() { s.writeStreamHeader(a.w, rec, resp) })
	}
	wait, why := s.StreamIdleTimeout, errStreamIdle
	if ftt := s.streamPolicy(a.pool).FirstTokenTimeout; ftt > 0 && ftt < wait && !a.lastTry {
		wait, why = ftt, errFirstToken
	}
	timer := time.AfterFunc(wait, func() { cancel(why) })
	first, err := firstEvent(resp.Body, sse.DefaultMaxEventBytes)
	timer.Stop()
	if err != nil {
		drain(resp.Body)
		timedOut := context.Cause(actx)
		cancel(nil)
		if ctx.Err() != nil {
			return contextError(ctx), true
		}
		s.Router.Cooldown(a.e, s.DefaultCooldown, false)
		rec.detail = fmt.Sprintf("endpoint %s: %v", a.e.Name, err)
		return firstEventError(a.pool.Name, timedOut, wait, err), false
	}
	rec.upstreamFirst = s.Now()
	if a.op.Creates() {
		// The owner is recorded from response.created, before the client
		// gets a byte of the stream, and the headers wait for it so that
		// a failed record can be told in them.
		unrecorded := s.remember(rec, first, true)
		if unrecorded != "" {
			a.w.Header().Set(HeaderUnrecorded, unrecorded)
		}
		if !rec.keepalive.commit(func() { s.writeStreamHeader(a.w, rec, resp) }) && unrecorded != "" {
			_, _ = rec.keepalive.Write([]byte(": " + strings.ToLower(HeaderUnrecorded) + "\n\n"))
		}
	}
	resp.Body = &prefixed{prefix: first, ReadCloser: resp.Body}
	return nil, false
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
		rec.limit = telemetry.Unavailable
		s.fail(w, rec, limiterError(err, d.Reset.Sub(s.Now())))
		return false
	}
	rec.limit = limitDecision(d)
	now := s.Now()
	setRateHeaders(w.Header(), d, now)
	if !d.Allowed {
		s.fail(w, rec, requestsRefused(tenantID, d.Limit, d.Reset.Sub(now)))
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
