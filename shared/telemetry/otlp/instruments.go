package otlp

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
)

// instruments are every metric the gateway exports, the metrics SDK's
// instruments. The GenAI ones carry the semantic conventions' names,
// units and recommended buckets.
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

// newInstruments makes every instrument on m; an error is the meter's
// (a name or a unit it refuses), every one of them at once.
func newInstruments(m metric.Meter) (instruments, error) {
	var i instruments
	var errs []error
	counter := func(name, unit, description string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, description string, bounds ...float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(description), metric.WithExplicitBucketBoundaries(bounds...))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, description string) metric.Float64Gauge {
		g, err := m.Float64Gauge(name, metric.WithUnit("s"), metric.WithDescription(description))
		errs = append(errs, err)
		return g
	}
	var err error
	i.tokens, err = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used per request, by gen_ai.token.type (input, output), as the backend reported them."),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	errs = append(errs, err)
	i.duration = seconds("gen_ai.client.operation.duration", "A model call's duration through the gateway, until its last byte.",
		0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
	i.ttft = seconds("gen_ai.server.time_to_first_token", "From the request's arrival until its stream's first event was written to the client.",
		0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
	i.tpot = seconds("gen_ai.server.time_per_output_token", "A stream's time after its first event, per further output token.",
		0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
	i.requests = counter("llmgw.requests", "{request}", "Requests answered, by route, status, error code and tenant.")
	i.limiter = counter("llmgw.limiter.decisions", "{decision}",
		"Request-rate limiter decisions: allowed, refused, degraded (store failed, let through), unavailable (store failed, refused).")
	i.budget = counter("llmgw.budget.decisions", "{decision}", "Token budget decisions: reserved, refused, degraded, unavailable.")
	i.reserved = counter("llmgw.budget.tokens.reserved", "{token}", "Tokens reserved from tenants' budgets before forwarding.")
	i.charged = counter("llmgw.budget.tokens.charged", "{token}", "Tokens charged to tenants' budgets when requests settled.")
	i.failovers = counter("llmgw.failovers", "{failover}",
		"Backend attempts that failed before the first byte and were followed by another endpoint, by cause (error.type).")
	i.keepalives = counter("llmgw.keepalives", "{comment}", "Keepalive comments sent on streams waiting for their first token.")
	i.cost = counter("llmgw.cost", "{microunit}",
		"Money charged to tenants' spend limits, in millionths of llmgw.currency, by tenant, model and service tier.")
	i.streams, err = m.Int64UpDownCounter("llmgw.streams.open", metric.WithUnit("{stream}"), metric.WithDescription("Streams being relayed now."))
	errs = append(errs, err)
	i.coldReady = gauge("llmgw.cold_start.ready", "From the process's start until it was ready to serve.")
	i.coldFirst = gauge("llmgw.cold_start.first_event", "From the process's start until its first streamed event reached a client.")
	return i, errors.Join(errs...)
}
