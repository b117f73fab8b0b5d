package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/keepalive"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/tenant"
)

// proxy returns the handler for one proxied OpenAI operation. The request
// path reads top to bottom in serveProxy; each step is a call into the
// package that owns it.
func (s *Server) proxy(op request.Operation) handler {
	return func(w http.ResponseWriter, r *http.Request, ex *exchange) error {
		return s.serveProxy(w, r, ex, op, "")
	}
}

// serveProxy is the request path, step by step: each step is a call into
// the package, or the helper, that owns it, and returns what went wrong
// for serve to answer.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, ex *exchange, op request.Operation, deployment string) (err error) {
	ex.op, ex.creates = op, op.Creates()
	ctx := ex.context(r)
	if dl, ok := ctx.Deadline(); ok && *s.Lambda.MinRemaining > 0 && dl.Sub(s.Now()) < *s.Lambda.MinRemaining {
		// Lambda: the invocation ends before a request could; refuse it
		// whole rather than start it and cut it.
		return deadlineTooNear()
	}

	// 1–2. Authenticate (JWT against the issuer's cached JWKS), then find
	// the tenant in the in-process table. Nothing of a caller without a
	// valid token is read, not even its body.
	t, err := s.principalTenant(r, ex)
	if err != nil {
		return err
	}

	// 2b. Concurrency: one of the tenant's slots on this replica, held to
	// the end of the answer, so one tenant's flood is its own problem.
	if err := s.admit(ex, t); err != nil {
		return err
	}

	// 2c. Limit: one token from the tenant's bucket (a prompt count's
	// from its count bucket), before any work the caller's body can
	// cause: reading it, refusing its content, looking up the stored
	// response it continues.
	if err := s.take(ctx, w, ex, t.ID, op.Counts()); err != nil {
		return err
	}

	// 3. Read: a capped body, bounded in time.
	rc := http.NewResponseController(w)
	bufp, raw, err := s.readRequest(w, rc, r, deployment)
	if err != nil {
		return err
	}
	held := true // the client's body is released once the backend has its copy
	defer func() {
		if held {
			putBody(bufp)
		}
	}()

	// 4. Resolve: only the fields the gateway decides on, read once
	// (request.Body); the model must be the tenant's and routable.
	// The parsed body lives in the pooled exchange: the steps below take
	// its address, which would put a fresh one on the heap per request.
	body := &ex.parsed
	var pool *route.Pool
	*body, pool, raw, err = s.resolve(ctx, w, ex, t, op, raw)
	if err != nil {
		return err
	}
	// 4b. Server-side features: the tenant's allow-list, priced per use;
	// the service tier: the tenant's too.
	if err := s.checkFeatures(ex, t, op, raw, r.Header); err != nil {
		return err
	}
	if ex.bill.Tier, err = billing.CheckTier(t, body.ServiceTier); err != nil {
		return err
	}

	// 5. Budget: for a tenant with token budgets, reserve an upper bound
	// of the request's tokens (prompt bound + output cap).
	if err := s.reserveBudget(ctx, w, ex, r.Header, pool, t.ID, op, body, raw); err != nil {
		return err
	}
	// 8. Settle, registered here so that it runs once on every ending
	// (an error, a panic or an aborted answer, a client gone, the
	// shutdown): the client's answer first, then the reservation charged
	// what billing decides from what was observed (budget.go).
	defer s.settle(w, ex, &err)

	// 6. Route and rewrite: model → pool → endpoint, failover before the
	// first byte (dispatch), with the output cap billing decided.
	// Responses streams carry usage in response.completed: never inject
	// stream_options there (Azure refuses it).
	if body.Stream {
		ex.keepalive = keepalive.Start(w, s.streamPolicy(pool).Keepalive(), s.Now)
		defer ex.keepalive.Stop()
	}
	call := s.call(w, r, ex, pool, body, raw)
	err = s.backends.Send(ctx, call, &ex.Result)
	putBody(bufp)
	held = false
	if err != nil {
		return err // after a keepalive's headers, serve sends it as an SSE error event
	}
	defer call.Release()

	// 7. Relay: SSE event by event with a flush each, or the JSON as
	// sent, cut when the backend goes silent (dispatch).
	if call.Streamed() {
		s.streamOpens(ex)
	}
	if err := s.relay(ctx, w, rc, ex); err != nil {
		return err
	}
	s.rememberUsage(ex)
	return nil
}

// call is the request's conversation with the backends as the steps
// above decided it: the pool, the body, the output cap and the stream's
// bound on token events billing decided (billing.Reservation), the
// endpoint a continued response is pinned to, the stream's keepalive.
func (s *Server) call(w http.ResponseWriter, r *http.Request, ex *exchange, pool *route.Pool, body *request.Body, raw []byte) *dispatch.Call {
	ex.hooks = hooks{s: s, ex: ex}
	ex.call = dispatch.Call{ID: ex.id, Tenant: ex.tenant, IDHeader: ex.idHeader, Op: ex.op, Creates: ex.creates, Pool: pool, Body: body, Raw: raw,
		Header: r.Header, Inject: body.Stream && !body.IncludeUsage && ex.op.StreamOptions(), Pin: ex.stored.pin,
		OutputCap: ex.budget.OutputCap(), MaxTokenEvents: ex.budget.MaxTokenEvents(), Choices: ex.budget.ChoiceCount(),
		MaxToolCalls: ex.bill.Features.ToolCalls(), Asked: s.asked(ex, body, raw),
		StandardTier:      ex.budget.StandardTier(),
		FirstTokenTimeout: s.streamPolicy(pool).FirstToken(), Keepalive: ex.keepalive, W: w, Hooks: &ex.hooks}
	return &ex.call
}

// asked is what the request asks of a backend's capacity (a PTU counts
// the prompt and the output caps when it admits a request): its
// reservation when the tenant has a budget, else a quarter of its body's
// bytes and its caps (the default output when it sends none).
func (s *Server) asked(ex *exchange, body *request.Body, raw []byte) int64 {
	if ex.budget != nil {
		return ex.budget.Reserved()
	}
	out := body.ClientCap()
	if out == 0 {
		out = budget.DefaultOutputTokens
	}
	return int64(len(raw))/4 + out*body.Choices()
}

// relay relays the answer the backends gave (dispatch.Dispatcher.Relay).
// A JSON answer that fails before the client got a byte is the request's
// error; one cut after aborts the response, so it cannot look complete;
// a stream that fails mid-way ends with one error event, worded here.
func (s *Server) relay(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, ex *exchange) error {
	err := s.backends.Relay(ctx, &ex.call, &ex.Result, rc)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dispatch.ErrAborted):
		panic(http.ErrAbortHandler)
	case !ex.call.Streamed():
		return err
	}
	ae := asAPIError(err)
	ex.Outcome = ae.Code
	ev := appendStreamError(nil, ex, ae, ex.Events)
	if n, werr := w.Write(ev); werr == nil {
		ex.Bytes += int64(n)
		_ = rc.Flush()
	}
	return nil
}

// principalTenant authenticates the caller and finds its tenant: the
// prelude of every authenticated route (the proxy's, the models', the
// stored responses').
func (s *Server) principalTenant(r *http.Request, ex *exchange) (*tenant.Tenant, error) {
	p, err := s.Auth.Verify(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		return nil, authError(err)
	}
	t := s.Tenants.Lookup(p.Tenant)
	if t == nil {
		// The claim is the token's, not config's: a signed token of a
		// tenant not in the table (any directory of an Entra {tenantid}
		// issuer) must not add a metric series or a log value of its
		// choosing. The caller's answer names its claim.
		ex.tenant, ex.Detail = UnknownTenant, "tenant_not_in_table"
		return nil, tenantNotAllowed(p.Tenant)
	}
	ex.tenant, ex.subject, ex.tenantName, ex.keyModels = t.ID, p.Subject, t.Name, p.Models
	ex.bill.Scope = budget.Scope{Project: p.Project, User: p.User}
	return t, nil
}

// UnknownTenant is the tenant the access log and telemetry name for a
// caller whose token is valid but whose tenant the table does not have.
const UnknownTenant = "unknown"

// admit takes one of the tenant's concurrent-request slots on this
// replica (serve frees it when the request ends), or refuses with 429
// too_many_concurrent_requests (Retry-After: 1 s; the slot a finishing
// stream frees cannot be foretold). The cap is per replica: an exact
// count across replicas would cost a store round trip per request and a
// lease per stream.
func (s *Server) admit(ex *exchange, t *tenant.Tenant) error {
	if !t.Acquire() {
		return tooManyConcurrent(t.ID, t.MaxConcurrent)
	}
	ex.slot = t
	return nil
}

// readRequest reads the client's body into a pooled buffer, bounded in
// size and time; on failure it has released the buffer. Azure's
// deployment routes name the model in the path: the body is made to say
// the same.
func (s *Server) readRequest(w http.ResponseWriter, rc *http.ResponseController, r *http.Request, deployment string) (*[]byte, []byte, error) {
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
		return nil, nil, aerr
	}
	_ = rc.SetReadDeadline(time.Time{})
	if deployment != "" {
		if withModel, err := request.WithModel(make([]byte, 0, len(raw)+len(deployment)+16), raw, deployment); err == nil {
			raw = withModel
		}
	}
	return bufp, raw, nil
}

// resolve reads the body's routing fields and finds the model's pool: one
// the tenant may use and, for the Responses API, one that has it (and the
// endpoint a continued response lives on, from the affinity store). Every
// endpoint of the pool must serve op.
func (s *Server) resolve(ctx context.Context, w http.ResponseWriter, ex *exchange, t *tenant.Tenant, op request.Operation, raw []byte) (request.Body, *route.Pool, []byte, error) {
	body, perr := parseBody(raw, op)
	ex.streamKnown, ex.stream = true, body.Stream
	if perr != nil {
		return body, nil, raw, perr
	}
	ex.model = body.Model
	pool := s.Router.Pool(body.Model)
	if pool == nil || !t.Allows(body.Model) || !ex.keyModels.Allows(body.Model) {
		return body, nil, raw, modelNotFound(body.Model)
	}
	ex.pool = pool.Name
	for _, e := range pool.Endpoints {
		// A pool whose kind lacks the operation (the Responses API on
		// Azure's deployments surface, the Messages API on an OpenAI
		// pool, chat on an anthropic pool): no translation, a clear 400.
		if !s.Targets[e].Supports(op) {
			return body, nil, raw, unsupportedAPI(body.Model, op)
		}
	}
	// Stored state the gateway cannot prove the tenant owns is refused
	// before any backend sees it: one backend key serves every tenant, so
	// the backend would serve it to anyone who names it. (Refused even
	// where the member would be dropped: the caller learns why.)
	if serr := request.StoredState(raw, op); serr != nil {
		return body, nil, raw, storedStateRefused(serr.Param, serr.Message)
	}
	// Fields by allow-list: what no table names is dropped (or refused)
	// before the features, the budget or a backend read the body.
	raw, body, err := s.admitFields(w, ex, t, op, pool, raw, body)
	if err != nil {
		return body, nil, raw, err
	}
	if !op.Continues() {
		return body, pool, raw, nil
	}
	if body.Conversation {
		return body, nil, raw, storedStateRefused("conversation", "stored conversations are not served through the gateway: send the conversation's items in 'input', or continue with 'previous_response_id'")
	}
	if aerr := s.pinPrevious(ctx, ex, t.ID, pool, body.PreviousResponseID); aerr != nil {
		return body, nil, raw, aerr
	}
	return body, pool, raw, nil
}

// countLimiter is a Limiter with a bucket of its own for prompt counts
// (ratelimit.Limiter's TakeCount); with a Limiter without it a count
// takes a request token.
type countLimiter interface {
	TakeCount(ctx context.Context, tenant string) (ratelimit.Decision, error)
}

var _ countLimiter = (*ratelimit.Limiter)(nil)

// take takes one request token from the tenant's bucket (a prompt
// count's from its count bucket when count is set) and sets the
// x-ratelimit-*-requests headers, or says why the request may not pass.
func (s *Server) take(ctx context.Context, w http.ResponseWriter, ex *exchange, tenantID string, count bool) error {
	var d ratelimit.Decision
	var err error
	cl, counts := s.Limiter.(countLimiter)
	if counts = counts && count; counts {
		d, err = cl.TakeCount(ctx, tenantID)
	} else {
		d, err = s.Limiter.Take(ctx, tenantID)
	}
	if err != nil {
		if ctx.Err() != nil { // the client left during the take: not the limiter's failure
			return contextError(ctx)
		}
		ex.limit = telemetry.Unavailable
		return limiterError(err, d.Reset.Sub(s.Now()))
	}
	ex.limit = limitDecision(d)
	now := s.Now()
	setRateHeaders(w.Header(), d, now)
	if !d.Allowed {
		return requestsRefused(tenantID, d.Limit, d.Reset.Sub(now), counts)
	}
	return nil
}

// limitDecision names a limiter's answer for telemetry.
func limitDecision(d ratelimit.Decision) string {
	switch {
	case d.Degraded && d.Allowed:
		return telemetry.Degraded
	case d.Allowed:
		return telemetry.Allowed
	}
	return telemetry.Refused
}
