package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

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
