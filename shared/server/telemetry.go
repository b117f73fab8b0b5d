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
	// Attempt starts a backend attempt's client span, writes its
	// traceparent into req, and returns what ends it.
	Attempt(ctx context.Context, req *http.Request, a telemetry.Attempt) func(telemetry.Result)
	// Stream counts streams being relayed, by pool (+1 opened, -1 ended).
	Stream(ctx context.Context, pool string, delta int64)
	// End records the request's metrics and ends its span.
	End(ctx context.Context, r *telemetry.Request)
}

// traced begins the request's telemetry (begin calls it).
func (s *Server) traced(rec *exchange, r *http.Request) {
	if s.Telemetry != nil {
		rec.ctx = s.Telemetry.Begin(r.Context(), r.Method, routeOf(r.URL.Path), r.Header)
	}
}

// attemptBegins starts an attempt's client span (try calls it with the
// request it is about to send).
func (s *Server) attemptBegins(ctx context.Context, rec *exchange, req *http.Request, target *upstream.Target, op request.Operation, model string, priority int) {
	if s.Telemetry == nil {
		return
	}
	addr, port := telemetry.HostPort(req.URL.Scheme, req.URL.Host)
	rec.backend = telemetry.Attempt{Operation: op.GenAIName(), Model: model, ResponseModel: target.BodyModel(model),
		Provider: target.Provider(), ServerAddress: addr, ServerPort: port, Tenant: rec.tenant, Priority: priority}
	rec.attemptEnd = s.Telemetry.Attempt(ctx, req, rec.backend)
}

// attemptEnds ends the current attempt's span (send calls it for a failed
// attempt; report for the one that answered).
func (rec *exchange) attemptEnds(r telemetry.Result) {
	if rec.attemptEnd != nil {
		rec.attemptEnd(r)
		rec.attemptEnd = nil
	}
}

// streamOpens counts a stream being relayed; report counts its end.
func (s *Server) streamOpens(rec *exchange) {
	if s.Telemetry != nil {
		rec.streamOpen = true
		s.Telemetry.Stream(rec.ctx, rec.pool, 1)
	}
}

// report hands the ended request to telemetry (finish calls it, after the
// access log).
func (s *Server) report(rec *exchange) {
	if s.Telemetry == nil || rec.ctx == nil {
		return
	}
	errType := ""
	if rec.outcome != "ok" {
		errType = rec.outcome
	}
	rec.attemptEnds(telemetry.Result{Status: rec.upstreamStatus, ErrorType: errType})
	if rec.streamOpen {
		rec.streamOpen = false
		s.Telemetry.Stream(rec.ctx, rec.pool, -1)
	}
	keepalives, _ := rec.keepalive.Stats()
	t := telemetry.Request{
		Route: routeOf(rec.path), Method: rec.method,
		Tenant: rec.tenant, TenantName: rec.tenantName,
		Pool: rec.pool, Stream: rec.stream, Status: rec.status, ErrorType: errType,
		Start: rec.start, End: s.Now(), FirstEvent: rec.clientFirstEvent,
		InputTokens: rec.usage.PromptTokens, OutputTokens: rec.usage.CompletionTokens, Usage: rec.hasUsage,
		Attempts: rec.attempts, Keepalives: keepalives,
		Limit: rec.limit, Budget: rec.budgetDecision, Reserved: rec.budget.reserved(), Charged: rec.budget.chargedTokens(),
	}
	if b := rec.budget; b != nil && b.spend.Model != nil && b.held && !b.unsettled {
		t.Cost, t.Tier, t.Currency = b.spend.cost, b.spend.billed.String(), s.Prices.Currency
	}
	if rec.pool != "" { // a model a pool serves: a bounded name, from config
		t.Operation, t.Model = rec.op.GenAIName(), rec.model
		t.ResponseModel, t.Provider = rec.backend.ResponseModel, rec.backend.Provider
		t.ServerAddress, t.ServerPort = rec.backend.ServerAddress, rec.backend.ServerPort
	}
	s.Telemetry.End(rec.ctx, &t)
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
