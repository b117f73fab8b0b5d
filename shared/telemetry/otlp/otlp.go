// Package otlp exports the gateway's telemetry (shared/telemetry) with the
// OpenTelemetry Go SDK over OTLP/HTTP (protobuf): the GenAI semantic
// conventions' metrics and spans, and the gateway's own metrics. It is the
// only package that imports the SDK. The SDK aggregates and batches; the
// exporters it feeds are this package's own (wire.go encodes OTLP with
// protowire alone), because the SDK's OTLP exporters link the generated
// OTLP types and, through their service packages, gRPC: 15 MB of binary
// and a slower start even with telemetry off. A gateway that scales to zero cannot
// be scraped, so everything is pushed, and Flush exports what is pending
// before the process stops or freezes.
package otlp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
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
	// firstEvent: the process's first streamed event was recorded
	// (llmgw.cold_start.first_event, once).
	firstEvent atomic.Bool
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
	if cfg.CardinalityLimit <= 0 {
		cfg.CardinalityLimit = DefaultCardinalityLimit
	}
	res := newResource(cfg)
	e := &Exporter{cfg: cfg, tracer: noop.NewTracerProvider().Tracer("")}
	var meter metric.Meter
	if cfg.TracesURL != "" {
		hc, err := httpClient(cfg.Timeout, cfg.TracesTLS, cfg.TracesGRPC)
		if err != nil {
			return nil, err
		}
		exp := &spanExporter{sender{post: newPoster(cfg.TracesURL, cfg.TracesHeaders, cfg.Gzip, cfg.TracesGRPC, hc)}}
		e.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithExportTimeout(cfg.Timeout)), sdktrace.WithResource(res))
		e.tracer = e.tp.Tracer(scope)
	}
	if cfg.MetricsURL != "" {
		hc, err := httpClient(cfg.Timeout, cfg.MetricsTLS, cfg.MetricsGRPC)
		if err != nil {
			return nil, err
		}
		exp := newMetricExporter(newPoster(cfg.MetricsURL, cfg.MetricsHeaders, cfg.Gzip, cfg.MetricsGRPC, hc), cfg.Delta)
		e.mp = sdkmetric.NewMeterProvider(
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.Interval), sdkmetric.WithTimeout(cfg.Timeout))),
			sdkmetric.WithResource(res), sdkmetric.WithCardinalityLimit(cfg.CardinalityLimit))
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

// Flush exports every pending span and metric, bounded by ctx, and says
// how long it took. Both signals are flushed at once.
func (e *Exporter) Flush(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	var terr, merr error
	if e.tp != nil {
		wg.Go(func() { terr = e.tp.ForceFlush(ctx) })
	}
	if e.mp != nil {
		wg.Go(func() { merr = e.mp.ForceFlush(ctx) })
	}
	wg.Wait()
	return time.Since(start), errors.Join(terr, merr)
}

// Shutdown flushes and stops both providers, bounded by ctx.
func (e *Exporter) Shutdown(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var wg sync.WaitGroup
	var terr, merr error
	if e.tp != nil {
		wg.Go(func() { terr = e.tp.Shutdown(ctx) })
	}
	if e.mp != nil {
		wg.Go(func() { merr = e.mp.Shutdown(ctx) })
	}
	wg.Wait()
	return time.Since(start), errors.Join(terr, merr)
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
// only when configured to trust it.
func (e *Exporter) Begin(ctx context.Context, method, route string, h http.Header) context.Context {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("http.route", route))}
	if e.cfg.TrustTraceparent {
		ctx = e.tc.Extract(ctx, propagation.HeaderCarrier(h))
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, _ = e.tracer.Start(ctx, method+" "+route, opts...)
	return ctx
}

// Attempt starts a backend attempt's client span under the request's and
// writes its traceparent into req's headers; the returned function ends
// it with the attempt's result.
func (e *Exporter) Attempt(ctx context.Context, req *http.Request, a telemetry.Attempt) func(telemetry.Result) {
	ctx, span := e.tracer.Start(ctx, a.Operation+" "+a.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", a.Operation),
			attribute.String("gen_ai.provider.name", a.Provider),
			attribute.String("gen_ai.request.model", a.Model),
			attribute.String("gen_ai.response.model", a.ResponseModel),
			attribute.String("server.address", a.ServerAddress),
			attribute.Int("server.port", a.ServerPort),
			attribute.Int("llmgw.endpoint.priority", a.Priority),
		))
	if span.SpanContext().IsValid() {
		e.tc.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return func(r telemetry.Result) {
		if r.Status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", r.Status))
		}
		if r.ErrorType != "" {
			span.SetAttributes(attribute.String("error.type", r.ErrorType))
			span.SetStatus(codes.Error, r.ErrorType)
		}
		span.End()
		if r.Failover && e.mp != nil {
			e.m.failovers.Add(ctx, 1, metric.WithAttributes(
				attribute.String("error.type", r.ErrorType),
				attribute.String("server.address", a.ServerAddress),
				attribute.Bool("llmgw.spill", r.Spill),
				attribute.String("llmgw.tenant.id", a.Tenant)))
		}
	}
}

// Stream counts a stream opened (+1) or ended (-1) on a pool.
func (e *Exporter) Stream(ctx context.Context, pool string, delta int64) {
	if e.mp != nil {
		e.m.streams.Add(ctx, delta, metric.WithAttributes(attribute.String("llmgw.pool", pool)))
	}
}

// End records a request's metrics and ends its server span.
func (e *Exporter) End(ctx context.Context, r *telemetry.Request) {
	e.endSpan(ctx, r)
	if e.mp == nil {
		return
	}
	m := &e.m
	tenant := []attribute.KeyValue{attribute.String("llmgw.tenant.id", r.Tenant), attribute.String("llmgw.tenant.name", r.TenantName)}
	reqAttrs := append([]attribute.KeyValue{
		attribute.String("http.route", r.Route),
		attribute.String("http.request.method", r.Method),
		attribute.Int("http.response.status_code", r.Status),
		attribute.String("error.type", r.ErrorType),
	}, tenant...)
	m.requests.Add(ctx, 1, metric.WithAttributes(reqAttrs...))
	if r.Limit != "" {
		m.limiter.Add(ctx, 1, metric.WithAttributes(append([]attribute.KeyValue{attribute.String("llmgw.decision", r.Limit)}, tenant...)...))
	}
	if r.Budget != "" {
		set := metric.WithAttributes(append([]attribute.KeyValue{attribute.String("llmgw.decision", r.Budget)}, tenant...)...)
		m.budget.Add(ctx, 1, set)
		tset := metric.WithAttributes(tenant...)
		if r.Reserved > 0 {
			m.reserved.Add(ctx, r.Reserved, tset)
		}
		if r.Charged > 0 {
			m.charged.Add(ctx, r.Charged, tset)
		}
	}
	if r.Cost > 0 && r.Operation != "" {
		// Only a tenant of the table has a spend limit, and only a model a
		// pool serves is priced: every attribute is bounded by config.
		m.cost.Add(ctx, r.Cost, metric.WithAttributes(append([]attribute.KeyValue{
			attribute.String("gen_ai.request.model", r.Model),
			attribute.String("llmgw.service_tier", r.Tier),
			attribute.String("llmgw.currency", r.Currency)}, tenant...)...))
	}
	if r.Keepalives > 0 {
		m.keepalives.Add(ctx, int64(r.Keepalives), metric.WithAttributes(attribute.String("llmgw.pool", r.Pool)))
	}
	if r.Operation == "" {
		return
	}
	genai := append([]attribute.KeyValue{
		attribute.String("gen_ai.operation.name", r.Operation),
		attribute.String("gen_ai.provider.name", r.Provider),
		attribute.String("gen_ai.request.model", r.Model),
		attribute.String("gen_ai.response.model", r.ResponseModel),
		attribute.String("server.address", r.ServerAddress),
		attribute.Int("server.port", r.ServerPort),
	}, tenant...)
	if r.ErrorType != "" {
		genai = append(genai, attribute.String("error.type", r.ErrorType))
	}
	m.duration.Record(ctx, r.End.Sub(r.Start).Seconds(), metric.WithAttributes(genai...))
	if r.Usage {
		in := append(genai, attribute.String("gen_ai.token.type", "input"))
		m.tokens.Record(ctx, r.InputTokens, metric.WithAttributes(in...))
		out := append(genai[:len(genai):len(genai)], attribute.String("gen_ai.token.type", "output"))
		m.tokens.Record(ctx, r.OutputTokens, metric.WithAttributes(out...))
	}
	if !r.FirstEvent.IsZero() {
		set := metric.WithAttributes(genai...)
		m.ttft.Record(ctx, r.FirstEvent.Sub(r.Start).Seconds(), set)
		if r.Usage && r.OutputTokens > 1 {
			m.tpot.Record(ctx, r.End.Sub(r.FirstEvent).Seconds()/float64(r.OutputTokens-1), set)
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
		span.SetName(r.Operation + " " + r.Model)
	}
	span.SetAttributes(
		attribute.Int("http.response.status_code", r.Status),
		attribute.String("llmgw.tenant.id", r.Tenant),
		attribute.String("llmgw.tenant.name", r.TenantName),
		attribute.Int("llmgw.attempts", r.Attempts),
	)
	if r.Operation != "" {
		span.SetAttributes(
			attribute.String("gen_ai.operation.name", r.Operation),
			attribute.String("gen_ai.provider.name", r.Provider),
			attribute.String("gen_ai.request.model", r.Model),
			attribute.String("gen_ai.response.model", r.ResponseModel),
			attribute.String("server.address", r.ServerAddress),
			attribute.String("llmgw.pool", r.Pool),
			attribute.Bool("llmgw.stream", r.Stream),
		)
		if r.Usage {
			span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", r.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", r.OutputTokens))
		}
	}
	if r.ErrorType != "" {
		span.SetAttributes(attribute.String("error.type", r.ErrorType))
		span.SetStatus(codes.Error, r.ErrorType)
	}
	span.End(trace.WithTimestamp(r.End))
}
