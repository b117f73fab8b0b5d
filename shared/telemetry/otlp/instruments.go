package otlp

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// instruments are every metric the gateway exports. The GenAI ones carry
// the semantic conventions' names, units and recommended buckets.
type instruments struct {
	tokens                metric.Int64Histogram   // gen_ai.client.token.usage
	duration              metric.Float64Histogram // gen_ai.client.operation.duration
	ttft                  metric.Float64Histogram // gen_ai.server.time_to_first_token
	tpot                  metric.Float64Histogram // gen_ai.server.time_per_output_token
	requests              metric.Int64Counter
	limiter, budget       metric.Int64Counter
	reserved, charged     metric.Int64Counter
	cost                  metric.Int64Counter
	failovers, keepalives metric.Int64Counter
	streams               metric.Int64UpDownCounter
	coldReady, coldFirst  metric.Float64Gauge
}

func newInstruments(m metric.Meter) (instruments, error) {
	var i instruments
	var errs [15]error
	i.tokens, errs[0] = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used per request, by gen_ai.token.type (input, output), as the backend reported them."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	i.duration, errs[1] = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("A model call's duration through the gateway, until its last byte."),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
	i.ttft, errs[2] = m.Float64Histogram("gen_ai.server.time_to_first_token", metric.WithUnit("s"),
		metric.WithDescription("From the request's arrival until its stream's first event was written to the client."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0))
	i.tpot, errs[3] = m.Float64Histogram("gen_ai.server.time_per_output_token", metric.WithUnit("s"),
		metric.WithDescription("A stream's time after its first event, per further output token."),
		metric.WithExplicitBucketBoundaries(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5))
	i.requests, errs[4] = m.Int64Counter("llmgw.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests answered, by route, status, error code and tenant."))
	i.limiter, errs[5] = m.Int64Counter("llmgw.limiter.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Request-rate limiter decisions: allowed, refused, degraded (store failed, let through), unavailable (store failed, refused)."))
	i.budget, errs[6] = m.Int64Counter("llmgw.budget.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Token budget decisions: reserved, refused, degraded, unavailable."))
	i.reserved, errs[7] = m.Int64Counter("llmgw.budget.tokens.reserved", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens reserved from tenants' budgets before forwarding."))
	i.charged, errs[8] = m.Int64Counter("llmgw.budget.tokens.charged", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens charged to tenants' budgets when requests settled."))
	i.failovers, errs[9] = m.Int64Counter("llmgw.failovers", metric.WithUnit("{failover}"),
		metric.WithDescription("Backend attempts that failed before the first byte and were followed by another endpoint, by cause (error.type)."))
	i.keepalives, errs[10] = m.Int64Counter("llmgw.keepalives", metric.WithUnit("{comment}"),
		metric.WithDescription("Keepalive comments sent on streams waiting for their first token."))
	i.streams, errs[11] = m.Int64UpDownCounter("llmgw.streams.open", metric.WithUnit("{stream}"),
		metric.WithDescription("Streams being relayed now."))
	i.coldReady, errs[12] = m.Float64Gauge("llmgw.cold_start.ready", metric.WithUnit("s"),
		metric.WithDescription("From the process's start until it was ready to serve."))
	i.coldFirst, errs[13] = m.Float64Gauge("llmgw.cold_start.first_event", metric.WithUnit("s"),
		metric.WithDescription("From the process's start until its first streamed event reached a client."))
	i.cost, errs[14] = m.Int64Counter("llmgw.cost", metric.WithUnit("{microunit}"),
		metric.WithDescription("Money charged to tenants' spend limits, in millionths of llmgw.currency, by tenant, model and service tier."))
	return i, errors.Join(errs[:]...)
}
