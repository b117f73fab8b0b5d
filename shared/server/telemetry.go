package server

import (
	"context"
	"net/http"
	"strings"

	"github.com/llmgw/gateway/shared/request"
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

// traced begins the request's telemetry (begin calls it).
func (s *Server) traced(ex *exchange, r *http.Request) {
	if s.Telemetry != nil {
		ex.ctx = s.Telemetry.Begin(r.Context(), r.Method, routeOf(r.URL.Path), r.Header)
	}
}

// attemptBegins starts an attempt's client span (try calls it with the
// request it is about to send).
func (s *Server) attemptBegins(ctx context.Context, ex *exchange, req *http.Request, target *upstream.Target, op request.Operation, model string, priority int) {
	if s.Telemetry == nil {
		return
	}
	addr, port := telemetry.HostPort(req.URL.Scheme, req.URL.Host)
	ex.backend = telemetry.Attempt{Operation: op.GenAIName(), Model: model, ResponseModel: target.BodyModel(model),
		Provider: target.Provider(), ServerAddress: addr, ServerPort: port, Tenant: ex.tenant, Priority: priority}
	ex.attempt = s.Telemetry.Attempt(ctx, req, &ex.backend)
}

// attemptEnds ends the current attempt's span (send calls it for a failed
// attempt; report for the one that answered).
func (s *Server) attemptEnds(ex *exchange, r telemetry.Result) {
	if ex.attempt != nil {
		s.Telemetry.AttemptEnd(ex.attempt, &ex.backend, r)
		ex.attempt = nil
	}
}

// streamOpens counts a stream being relayed; report counts its end.
func (s *Server) streamOpens(ex *exchange) {
	if s.Telemetry != nil {
		ex.streamOpen = true
		s.Telemetry.Stream(ex.ctx, ex.pool, 1)
	}
}

// report hands the ended request to telemetry (finish calls it, after the
// access log).
func (s *Server) report(ex *exchange) {
	if s.Telemetry == nil || ex.ctx == nil {
		return
	}
	errType := ""
	if ex.outcome != "ok" {
		errType = ex.outcome
	}
	s.attemptEnds(ex, telemetry.Result{Status: ex.upstreamStatus, ErrorType: errType})
	if ex.streamOpen {
		ex.streamOpen = false
		s.Telemetry.Stream(ex.ctx, ex.pool, -1)
	}
	keepalives, _ := ex.keepalive.Stats()
	// The record lives in the exchange: handed to an interface, a local
	// would be allocated for every request.
	t := &ex.telRequest
	*t = telemetry.Request{
		Route: routeOf(ex.path), Method: ex.method,
		Tenant: ex.tenant, TenantName: ex.tenantName,
		Pool: ex.pool, Stream: ex.stream, Status: ex.status, ErrorType: errType,
		Start: ex.start, End: s.Now(), FirstEvent: ex.clientFirstEvent,
		InputTokens: ex.usage.PromptTokens, OutputTokens: ex.usage.CompletionTokens, Usage: ex.hasUsage,
		Attempts: ex.attempts, Keepalives: keepalives,
		Limit: ex.limit, Budget: ex.budgetDecision, Reserved: ex.budget.Reserved(), Charged: ex.budget.ChargedTokens(),
	}
	if b := ex.budget; b != nil && b.Spend.Model != nil && b.Held && !b.Unsettled {
		t.Cost, t.Tier, t.Currency = b.Spend.Cost, b.Spend.Billed.String(), s.Prices.Currency
	}
	if ex.pool != "" { // a model a pool serves: a bounded name, from config
		t.Operation, t.Model = ex.op.GenAIName(), ex.model
		t.ResponseModel, t.Provider = ex.backend.ResponseModel, ex.backend.Provider
		t.ServerAddress, t.ServerPort = ex.backend.ServerAddress, ex.backend.ServerPort
	}
	s.Telemetry.End(ex.ctx, t)
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
