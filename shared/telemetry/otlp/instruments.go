package otlp

import (
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// instruments are every metric the gateway exports. The GenAI ones carry
// the semantic conventions' names, units and recommended buckets. What a
// request records is aggregated by the gateway (aggregation); the
// cold-start gauges, recorded once per process, by the SDK's instruments.
type instruments struct {
	agg                   *aggregation
	tokens                *histAgg[int64]   // gen_ai.client.token.usage
	duration              *histAgg[float64] // gen_ai.client.operation.duration
	ttft                  *histAgg[float64] // gen_ai.server.time_to_first_token
	tpot                  *histAgg[float64] // gen_ai.server.time_per_output_token
	requests              *sumAgg
	limiter, budget       *sumAgg // slots 0 and 1 of a decision set
	reserved, charged     *sumAgg // slots 0 and 1 of a tenant set
	cost                  *sumAgg
	failovers, keepalives *sumAgg
	streams               *sumAgg // slot 1 of a pool set (keepalives: 0)
	coldReady, coldFirst  metric.Float64Gauge
}

func newInstruments(m metric.Meter, agg *aggregation) (instruments, error) {
	i := instruments{agg: agg}
	i.tokens = newHist(agg, metricDef{name: "gen_ai.client.token.usage", unit: "{token}", kind: sdkmetric.InstrumentKindHistogram, integer: true,
		description: "Tokens used per request, by gen_ai.token.type (input, output), as the backend reported them.",
		bounds:      []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}},
		func(a *attrSet) *atomic.Pointer[histSeries[int64]] { return &a.tokens })
	i.duration = newHist(agg, metricDef{name: "gen_ai.client.operation.duration", unit: "s", kind: sdkmetric.InstrumentKindHistogram,
		description: "A model call's duration through the gateway, until its last byte.",
		bounds:      []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}}, hists(0))
	i.ttft = newHist(agg, metricDef{name: "gen_ai.server.time_to_first_token", unit: "s", kind: sdkmetric.InstrumentKindHistogram,
		description: "From the request's arrival until its stream's first event was written to the client.",
		bounds:      []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}}, hists(1))
	i.tpot = newHist(agg, metricDef{name: "gen_ai.server.time_per_output_token", unit: "s", kind: sdkmetric.InstrumentKindHistogram,
		description: "A stream's time after its first event, per further output token.",
		bounds:      []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}}, hists(2))
	i.requests = agg.newSum(metricDef{name: "llmgw.requests", unit: "{request}", kind: sdkmetric.InstrumentKindCounter,
		description: "Requests answered, by route, status, error code and tenant."}, 0)
	i.limiter = agg.newSum(metricDef{name: "llmgw.limiter.decisions", unit: "{decision}", kind: sdkmetric.InstrumentKindCounter,
		description: "Request-rate limiter decisions: allowed, refused, degraded (store failed, let through), unavailable (store failed, refused)."}, 0)
	i.budget = agg.newSum(metricDef{name: "llmgw.budget.decisions", unit: "{decision}", kind: sdkmetric.InstrumentKindCounter,
		description: "Token budget decisions: reserved, refused, degraded, unavailable."}, 1)
	i.reserved = agg.newSum(metricDef{name: "llmgw.budget.tokens.reserved", unit: "{token}", kind: sdkmetric.InstrumentKindCounter,
		description: "Tokens reserved from tenants' budgets before forwarding."}, 0)
	i.charged = agg.newSum(metricDef{name: "llmgw.budget.tokens.charged", unit: "{token}", kind: sdkmetric.InstrumentKindCounter,
		description: "Tokens charged to tenants' budgets when requests settled."}, 1)
	i.failovers = agg.newSum(metricDef{name: "llmgw.failovers", unit: "{failover}", kind: sdkmetric.InstrumentKindCounter,
		description: "Backend attempts that failed before the first byte and were followed by another endpoint, by cause (error.type)."}, 0)
	i.keepalives = agg.newSum(metricDef{name: "llmgw.keepalives", unit: "{comment}", kind: sdkmetric.InstrumentKindCounter,
		description: "Keepalive comments sent on streams waiting for their first token."}, 0)
	i.streams = agg.newSum(metricDef{name: "llmgw.streams.open", unit: "{stream}", kind: sdkmetric.InstrumentKindUpDownCounter,
		description: "Streams being relayed now."}, 1)
	i.cost = agg.newSum(metricDef{name: "llmgw.cost", unit: "{microunit}", kind: sdkmetric.InstrumentKindCounter,
		description: "Money charged to tenants' spend limits, in millionths of llmgw.currency, by tenant, model and service tier."}, 0)
	var errs [2]error
	i.coldReady, errs[0] = m.Float64Gauge("llmgw.cold_start.ready", metric.WithUnit("s"),
		metric.WithDescription("From the process's start until it was ready to serve."))
	i.coldFirst, errs[1] = m.Float64Gauge("llmgw.cold_start.first_event", metric.WithUnit("s"),
		metric.WithDescription("From the process's start until its first streamed event reached a client."))
	return i, errors.Join(errs[:]...)
}

// hists is a float histogram's slot n of an attrSet: duration 0, first
// token 1, per output token 2, all of a GenAI set's.
func hists(n int) func(*attrSet) *atomic.Pointer[histSeries[float64]] {
	return func(a *attrSet) *atomic.Pointer[histSeries[float64]] { return &a.hists[n] }
}
