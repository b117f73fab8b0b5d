// Package otlp exports the gateway's telemetry (shared/telemetry) with the
// OpenTelemetry Go SDK over OTLP/HTTP (protobuf) or OTLP/gRPC: the GenAI
// semantic conventions' metrics and spans, and the gateway's own metrics.
// It is the only package that imports the SDK. The trace SDK samples and
// batches spans; the metrics SDK aggregates metrics and its periodic
// reader collects them. The exporters the SDK feeds are this package's
// own (wire.go encodes OTLP with protowire alone), because the SDK's OTLP
// exporters link the generated OTLP types and, through their service
// packages, gRPC: 15 MB of binary and a slower start even with telemetry
// off. A gateway that scales to zero cannot
// be scraped, so everything is pushed, and Flush exports what is pending
// before the process stops or freezes.
package otlp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/llmgw/gateway/shared/telemetry"
)

// Exporter records requests and attempts as metrics and spans and pushes
// them over OTLP/HTTP. Its methods are safe for concurrent use.
type Exporter struct {
	cfg    Config
	tp     *sdktrace.TracerProvider // nil: no traces
	mp     *sdkmetric.MeterProvider // nil: no metrics
	tracer trace.Tracer
	tc     propagation.TraceContext
	m      instruments
	// sets are the attribute sets and span names built so far.
	sets *sets
	// serverSpan and clientSpan are the spans' start options.
	serverSpan, clientSpan trace.SpanStartOption
	// firstEvent: the process's first streamed event was recorded
	// (llmgw.cold_start.first_event, once).
	firstEvent atomic.Bool
	// stopped: Shutdown was called.
	stopped atomic.Bool
}

// New builds the exporter from cfg. It dials nothing: the first export
// opens the first connection, so the start stays at its floor.
func New(cfg Config) (*Exporter, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 60 * time.Second
	}
	cfg.Settings = cfg.Settings.WithDefaults()
	res := newResource(cfg)
	e := &Exporter{cfg: cfg, tracer: noop.NewTracerProvider().Tracer(""), sets: newSets(memoLimit),
		serverSpan: trace.WithSpanKind(trace.SpanKindServer), clientSpan: trace.WithSpanKind(trace.SpanKindClient)}
	var meter metric.Meter
	if cfg.TracesURL != "" {
		hc, err := httpClient(cfg.Timeout, cfg.TracesTLS, cfg.TracesGRPC)
		if err != nil {
			return nil, err
		}
		exp := &spanExporter{sender{post: newPoster(cfg.TracesURL, cfg.TracesHeaders, cfg.Gzip, cfg.TracesGRPC, hc)}}
		e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(batcher(exp, cfg)), sdktrace.WithResource(res),
			sdktrace.WithSampler(sampler(cfg.Sampler, cfg.SamplerRatio)))
		e.tracer = e.tp.Tracer(scope)
	}
	if cfg.MetricsURL != "" {
		hc, err := httpClient(cfg.Timeout, cfg.MetricsTLS, cfg.MetricsGRPC)
		if err != nil {
			return nil, err
		}
		exp := newMetricExporter(newPoster(cfg.MetricsURL, cfg.MetricsHeaders, cfg.Gzip, cfg.MetricsGRPC, hc), cfg.Delta)
		opts := []sdkmetric.Option{sdkmetric.WithResource(res),
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.Interval), sdkmetric.WithTimeout(cfg.Timeout)))}
		if cfg.CardinalityLimit > 0 {
			opts = append(opts, sdkmetric.WithCardinalityLimit(cfg.CardinalityLimit))
		}
		e.mp = sdkmetric.NewMeterProvider(opts...)
		meter = e.mp.Meter(scope)
	}
	if meter == nil {
		return e, nil
	}
	var err error
	e.m, err = newInstruments(meter)
	return e, err
}

// scope is the instrumentation scope of every metric and span.
const scope = "github.com/llmgw/gateway"

// deltaTemporality is the specification's "delta" preference: counters
// and histograms as deltas, up-down counters cumulative.
func deltaTemporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	if k == sdkmetric.InstrumentKindUpDownCounter || k == sdkmetric.InstrumentKindObservableUpDownCounter {
		return metricdata.CumulativeTemporality
	}
	return metricdata.DeltaTemporality
}

// newResource is service.name, a service.instance.id unique to this
// process (replicas' and Lambda sandboxes' cumulative series must not
// collide) and OTEL_RESOURCE_ATTRIBUTES.
func newResource(cfg Config) *resource.Resource {
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if _, ok := cfg.Resource["service.instance.id"]; !ok {
		var b [8]byte
		_, _ = rand.Read(b[:])
		attrs = append(attrs, attribute.String("service.instance.id", hex.EncodeToString(b[:])))
	}
	for k, v := range cfg.Resource {
		if k != "service.name" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	return resource.NewSchemaless(attrs...)
}

// Flush exports every pending span and metric, within ctx and
// flush_timeout (telemetry.Settings.FlushTimeout), and says how long it
// took. Both signals are flushed at once, each after the export the
// background has in flight (the SDK's ForceFlush): on Lambda the sandbox
// may freeze when Flush returns.
func (e *Exporter) Flush(ctx context.Context) (time.Duration, error) {
	return e.both(ctx, (*sdktrace.TracerProvider).ForceFlush, (*sdkmetric.MeterProvider).ForceFlush)
}

// Shutdown flushes and stops both providers, within ctx and
// flush_timeout. The first call does; a later one returns at once, so
// that a stop after the final flush adds no wait of its own.
func (e *Exporter) Shutdown(ctx context.Context) (time.Duration, error) {
	if e.stopped.Swap(true) {
		return 0, nil
	}
	return e.both(ctx, (*sdktrace.TracerProvider).Shutdown, (*sdkmetric.MeterProvider).Shutdown)
}

// both runs tf on the trace provider and mf on the metric provider at
// once, and returns when both have returned or when ctx or flush_timeout
// ends, whichever is first. Parts of the SDK's calls wait without ctx (a
// metric reader's stop waits for the export its loop has in flight, a
// second stop for the first), so an export that hangs cannot hold the
// caller, and with it a stop or a Lambda invocation, past the bound: it
// ends behind, its context cancelled.
func (e *Exporter) both(ctx context.Context, tf func(*sdktrace.TracerProvider, context.Context) error,
	mf func(*sdkmetric.MeterProvider, context.Context) error) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.FlushTimeout)
	defer cancel()
	errs := make(chan error, 2) // never blocks a call that ends behind
	calls := 0
	if e.tp != nil {
		calls++
		go func() { errs <- tf(e.tp, ctx) }()
	}
	if e.mp != nil {
		calls++
		go func() { errs <- mf(e.mp, ctx) }()
	}
	var err error
	for range calls {
		select {
		case cerr := <-errs:
			err = errors.Join(err, cerr)
		case <-ctx.Done():
			return time.Since(start), errors.Join(err, context.Cause(ctx))
		}
	}
	return time.Since(start), err
}

// Ready records the cold start: from the process's start until it was
// ready to serve (host: http or lambda).
func (e *Exporter) Ready(ctx context.Context, host string, at time.Time) {
	if e.mp == nil || e.cfg.Start.IsZero() {
		return
	}
	e.m.coldReady.Record(ctx, at.Sub(e.cfg.Start).Seconds(), metric.WithAttributes(attribute.String("llmgw.host", host)))
}

// Begin starts a request's server span, continuing the caller's trace
// only when configured to trust it. A recorded span's attributes are set
// when it ends (End): the sampler sees a span's name and parent, never
// its attributes (no sampler of the specification's reads them).
func (e *Exporter) Begin(ctx context.Context, method, route string, h http.Header) context.Context {
	if e.cfg.TrustTraceparent {
		ctx = e.tc.Extract(ctx, propagation.HeaderCarrier(h))
	}
	if e.tp == nil {
		// No spans; a trusted caller's trace still reaches the backends
		// (Attempt's traceparent).
		return ctx
	}
	name := e.sets.name(method, route)
	if e.cfg.TrustTraceparent && trace.SpanContextFromContext(ctx).IsValid() {
		ctx, _ = e.tracer.Start(ctx, name, e.serverSpan)
	} else {
		ctx, _ = e.tracer.Start(ctx, name, e.serverSpan, trace.WithNewRoot())
	}
	return ctx
}

// Attempt starts a backend attempt's client span under the request's and
// writes its traceparent into req's headers (a span the sampler passed
// over too, so the backend is told not to record it). AttemptEnd ends it
// with the context Attempt returns.
func (e *Exporter) Attempt(ctx context.Context, req *http.Request, a *telemetry.Attempt) context.Context {
	ctx, span := e.tracer.Start(ctx, e.sets.name(a.Operation, a.Model), e.clientSpan)
	if span.SpanContext().IsValid() {
		e.tc.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return ctx
}

// AttemptEnd ends the attempt Attempt began (ctx is the context it
// returned) with its result.
func (e *Exporter) AttemptEnd(ctx context.Context, a *telemetry.Attempt, r telemetry.Result) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		// Every attribute in one call: the SDK grows its list on each.
		var kv [9]attribute.KeyValue
		attrs := append(genAIAttrs(kv[:0], a.Operation, a.Provider, a.Model, a.ResponseModel, a.ServerAddress, a.ServerPort),
			attribute.Int("llmgw.endpoint.priority", a.Priority))
		if r.Status != 0 {
			attrs = append(attrs, attribute.Int("http.response.status_code", r.Status))
		}
		if r.ErrorType != "" {
			attrs = append(attrs, attribute.String("error.type", r.ErrorType))
			span.SetStatus(codes.Error, r.ErrorType)
		}
		span.SetAttributes(attrs...)
		span.End()
	}
	e.failedOver(ctx, r, a)
}

// failedOver counts an attempt that failed over to another endpoint.
func (e *Exporter) failedOver(ctx context.Context, r telemetry.Result, a *telemetry.Attempt) {
	if r.Failover && e.mp != nil {
		e.m.failovers.Add(ctx, 1, e.sets.failover(failoverKey{errorType: r.ErrorType, address: a.ServerAddress, spill: r.Spill, tenant: a.Tenant}).add...)
	}
}

// Stream counts a stream opened (+1) or ended (-1) on a pool.
func (e *Exporter) Stream(ctx context.Context, pool string, delta int64) {
	if e.mp != nil {
		e.m.streams.Add(ctx, delta, e.sets.pool(pool).add...)
	}
}

// End records a request's metrics and ends its server span. Each
// metric's attribute set is built once per distinct set of values
// (sets), not per request.
func (e *Exporter) End(ctx context.Context, r *telemetry.Request) {
	e.endSpan(ctx, r)
	if e.mp == nil {
		return
	}
	m := &e.m
	tenant := tenantKey{r.Tenant, r.TenantName}
	m.requests.Add(ctx, 1, e.sets.request(requestKey{route: r.Route, method: r.Method, errorType: r.ErrorType, status: r.Status, tenant: tenant}).add...)
	if r.Limit != "" {
		m.limiter.Add(ctx, 1, e.sets.decision(decisionKey{r.Limit, tenant}).add...)
	}
	if r.Budget != "" {
		m.budget.Add(ctx, 1, e.sets.decision(decisionKey{r.Budget, tenant}).add...)
		tset := e.sets.tenant(tenant).add
		if r.Reserved > 0 {
			m.reserved.Add(ctx, r.Reserved, tset...)
		}
		if r.Charged > 0 {
			m.charged.Add(ctx, r.Charged, tset...)
		}
	}
	if r.Cost > 0 && r.Operation != "" {
		// Only a tenant of the table has a spend limit, and only a model a
		// pool serves is priced: every attribute is bounded by config.
		m.cost.Add(ctx, r.Cost, e.sets.cost(costKey{model: r.Model, tier: r.Tier, currency: r.Currency, tenant: tenant}).add...)
	}
	if r.Keepalives > 0 {
		m.keepalives.Add(ctx, int64(r.Keepalives), e.sets.pool(r.Pool).add...)
	}
	if r.Operation == "" {
		return
	}
	genai := e.sets.genAI(genaiKey{operation: r.Operation, provider: r.Provider, model: r.Model, responseModel: r.ResponseModel,
		address: r.ServerAddress, port: r.ServerPort, tenant: tenant, errorType: r.ErrorType})
	m.duration.Record(ctx, r.End.Sub(r.Start).Seconds(), genai.all.rec...)
	if r.Usage {
		m.tokens.Record(ctx, r.InputTokens, genai.input.rec...)
		m.tokens.Record(ctx, r.OutputTokens, genai.output.rec...)
	}
	if !r.FirstEvent.IsZero() {
		m.ttft.Record(ctx, r.FirstEvent.Sub(r.Start).Seconds(), genai.all.rec...)
		if r.Usage && r.OutputTokens > 1 {
			m.tpot.Record(ctx, r.End.Sub(r.FirstEvent).Seconds()/float64(r.OutputTokens-1), genai.all.rec...)
		}
		if !e.cfg.Start.IsZero() && e.firstEvent.CompareAndSwap(false, true) {
			m.coldFirst.Record(ctx, r.FirstEvent.Sub(e.cfg.Start).Seconds())
		}
	}
}

// endSpan names the server span for what it was (GenAI's "{operation}
// {model}" for a model call), sets its attributes, and ends it at r.End.
func (e *Exporter) endSpan(ctx context.Context, r *telemetry.Request) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if r.Operation != "" && r.Model != "" {
		span.SetName(e.sets.name(r.Operation, r.Model))
	}
	// Every attribute in one call: the SDK grows its list on each.
	var kv [18]attribute.KeyValue
	attrs := append(kv[:0],
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", r.Route),
		attribute.Int("http.response.status_code", r.Status),
		attribute.String("llmgw.tenant.id", r.Tenant),
		attribute.String("llmgw.tenant.name", r.TenantName),
		attribute.Int("llmgw.attempts", r.Attempts),
	)
	if r.Operation != "" {
		attrs = append(attrs,
			attribute.String("gen_ai.operation.name", r.Operation),
			attribute.String("gen_ai.provider.name", r.Provider),
			attribute.String("gen_ai.request.model", r.Model),
			attribute.String("gen_ai.response.model", r.ResponseModel),
			attribute.String("server.address", r.ServerAddress),
			attribute.String("llmgw.pool", r.Pool),
			attribute.Bool("llmgw.stream", r.Stream),
		)
		if r.Usage {
			attrs = append(attrs, attribute.Int64("gen_ai.usage.input_tokens", r.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", r.OutputTokens))
		}
	}
	if r.ErrorType != "" {
		attrs = append(attrs, attribute.String("error.type", r.ErrorType))
		span.SetStatus(codes.Error, r.ErrorType)
	}
	span.SetAttributes(attrs...)
	span.End(trace.WithTimestamp(r.End))
}
