package server

import (
	"context"
	"net/http"
	"strings"

	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/upstream"
)

// Telemetry exports each request's metrics and spans (telemetry/otlp
// satisfies it). Nil: none, and a request pays one nil check at each of
// the few places below that call it.
type Telemetry interface {
	// Begin starts a request's server span; backend attempts are made
	// under the context it returns.
	Begin(ctx context.Context, method, route string, h http.Header) context.Context
	// Attempt starts a backend attempt's client span and writes its
	// traceparent into req; AttemptEnd ends it, with the context Attempt
	// returned and the same a.
	Attempt(ctx context.Context, req *http.Request, a *telemetry.Attempt) context.Context
	AttemptEnd(ctx context.Context, a *telemetry.Attempt, r telemetry.Result)
	// Stream counts streams being relayed, by pool (+1 opened, -1 ended).
	Stream(ctx context.Context, pool string, delta int64)
	// End records the request's metrics and ends its span.
	End(ctx context.Context, r *telemetry.Request)
}

// traceState is a request's telemetry, all unset without it: ctx
// carries the server span; backend is the last attempt, attempt the
// context its span was begun with (nil: ended); streamOpen: counted in
// llmgw.streams.open; request is the request as reported (report).
type traceState struct {
	ctx        context.Context
	backend    telemetry.Attempt
	attempt    context.Context
	streamOpen bool
	request    telemetry.Request
}

// traced begins the request's telemetry (begin calls it).
func (s *Server) traced(ex *exchange, r *http.Request) {
	if s.Telemetry != nil {
		ex.tel.ctx = s.Telemetry.Begin(r.Context(), r.Method, routeOf(r.URL.Path), r.Header)
	}
}

// hooks is what a request's conversation with the backends tells the
// server (dispatch.Hooks): each attempt's telemetry, and the owner of a
// stored response it creates. It lives in the pooled exchange, so
// handing it to dispatch allocates nothing.
type hooks struct {
	s  *Server
	ex *exchange
}

var _ dispatch.Hooks = (*hooks)(nil)

// AttemptBegins starts an attempt's client span with the request it is
// about to send.
func (h *hooks) AttemptBegins(ctx context.Context, req *http.Request, target *upstream.Target, priority int) {
	s, ex := h.s, h.ex
	if s.Telemetry == nil {
		return
	}
	model := ex.call.Body.Model
	addr, port := telemetry.HostPort(req.URL.Scheme, req.URL.Host)
	ex.tel.backend = telemetry.Attempt{Operation: ex.op.GenAIName(), Model: model, ResponseModel: target.BodyModel(model),
		Provider: target.Provider(), ServerAddress: addr, ServerPort: port, Tenant: ex.tenant, Priority: priority}
	ex.tel.attempt = s.Telemetry.Attempt(ctx, req, &ex.tel.backend)
}

// AttemptFailed ends a failed attempt's span, and notes why the request
// left its best priority (its failure's code) when it spills.
func (h *hooks) AttemptFailed(fail *dispatch.Error, failover, spill bool) {
	ex := h.ex
	if ex.tel.attempt == nil && (!spill || ex.spill != "") {
		return // nothing to word the failure for
	}
	code := dispatchError(fail).Code
	if spill && ex.spill == "" {
		ex.spill = code
	}
	h.s.attemptEnds(ex, telemetry.Result{Status: ex.UpstreamStatus, ErrorType: code, Failover: failover, Spill: spill})
}

// Created records the owner of the stored response a stream's first
// event names.
func (h *hooks) Created(first []byte) string { return h.s.remember(h.ex, first, true) }

// CreatedAnswer records the owner of the stored response a JSON answer
// names.
func (h *hooks) CreatedAnswer(scan *sse.AnswerScanner, hd http.Header) {
	h.s.rememberAnswer(h.ex, scan, hd)
}

// attemptEnds ends the current attempt's span (AttemptFailed for a
// failed attempt; report for the one that answered).
func (s *Server) attemptEnds(ex *exchange, r telemetry.Result) {
	if ex.tel.attempt != nil {
		s.Telemetry.AttemptEnd(ex.tel.attempt, &ex.tel.backend, r)
		ex.tel.attempt = nil
	}
}

// streamOpens counts a stream being relayed; report counts its end.
func (s *Server) streamOpens(ex *exchange) {
	if s.Telemetry != nil {
		ex.tel.streamOpen = true
		s.Telemetry.Stream(ex.tel.ctx, ex.pool, 1)
	}
}

// report hands the ended request to telemetry (finish calls it, after the
// access log).
func (s *Server) report(ex *exchange) {
	if s.Telemetry == nil || ex.tel.ctx == nil {
		return
	}
	errType := ""
	if ex.Outcome != "ok" {
		errType = ex.Outcome
	}
	s.attemptEnds(ex, telemetry.Result{Status: ex.UpstreamStatus, ErrorType: errType})
	if ex.tel.streamOpen {
		ex.tel.streamOpen = false
		s.Telemetry.Stream(ex.tel.ctx, ex.pool, -1)
	}
	keepalives, _ := ex.keepalive.Stats()
	// The record lives in the exchange: handed to an interface, a local
	// would be allocated for every request.
	t := &ex.tel.request
	*t = telemetry.Request{
		Route: routeOf(ex.path), Method: ex.method,
		Tenant: ex.tenant, TenantName: ex.tenantName,
		Pool: ex.pool, Stream: ex.stream, Status: ex.Status, ErrorType: errType,
		Start: ex.start, End: s.Now(), FirstEvent: ex.ClientFirstEvent,
		InputTokens: ex.Usage.PromptTokens, OutputTokens: ex.Usage.CompletionTokens, Usage: ex.HasUsage,
		Attempts: ex.Attempts, Keepalives: keepalives,
		Limit: ex.limit, Budget: ex.budgetDecision, Reserved: ex.budget.Reserved(), Charged: ex.budget.ChargedTokens(),
	}
	if b := ex.budget; b != nil && b.Spend.Model != nil && b.Held && !b.Unsettled {
		t.Cost, t.Tier, t.Currency = b.Spend.Cost, b.Spend.Billed.String(), s.Prices.Currency
	}
	if ex.pool != "" { // a model a pool serves: a bounded name, from config
		t.Operation, t.Model = ex.op.GenAIName(), ex.model
		t.ResponseModel, t.Provider = ex.tel.backend.ResponseModel, ex.tel.backend.Provider
		t.ServerAddress, t.ServerPort = ex.tel.backend.ServerAddress, ex.tel.backend.ServerPort
	}
	s.Telemetry.End(ex.tel.ctx, t)
}

// routeOf is a path's route template: the http.route attribute, bounded
// whatever paths callers send.
func routeOf(path string) string {
	switch {
	case strings.HasPrefix(path, "/v1/responses/"):
		return "/v1/responses/{response_id}"
	case strings.HasPrefix(path, "/v1/models/"):
		return "/v1/models/{model}"
	case strings.HasPrefix(path, "/openai/deployments/"):
		rest := path[len("/openai/deployments/"):]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			if sub := routeOf(rest[i:]); sub != "other" {
				return "/openai/deployments/{deployment}" + sub
			}
		}
		return "other"
	case strings.HasPrefix(path, "/openai/v1/"):
		return "/openai" + routeOf(path[len("/openai"):])
	case strings.HasPrefix(path, "/openai/responses"), strings.HasPrefix(path, "/openai/models"):
		return "/openai" + routeOf("/v1"+path[len("/openai"):])
	}
	if path == "/healthz" || path == "/v1/models" {
		return path
	}
	for _, op := range request.Operations() {
		if path == op.Path() || op.OnDeployments() && path == op.Suffix() {
			return path
		}
	}
	return "other"
}
