// Package otlp exports the gateway's telemetry (shared/telemetry) with the
// OpenTelemetry Go SDK over OTLP/HTTP (protobuf): the GenAI semantic
// conventions' metrics and spans, and the gateway's own metrics. It is the
// only package that imports the SDK. The metrics SDK collects metrics,
// those a request records aggregated by this package (aggregation); spans
// are this package's own, sampled and batched as the trace SDK would
// (spans.go), for a recorded request costs a tenth of what the SDK's
// spans did. The exporters are this package's own too (wire.go encodes
// OTLP with protowire alone), because the SDK's OTLP exporters link the
// generated OTLP types and, through their service packages, gRPC: 15 MB
// of binary and a slower start even with telemetry off. A gateway that scales to zero cannot
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
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/shared/telemetry"
)

// Exporter records requests and attempts as metrics and spans and pushes
// them over OTLP/HTTP. Its methods are safe for concurrent use.
type Exporter struct {
	cfg   Config
	spans *batch                   // nil: no traces
	mp    *sdkmetric.MeterProvider // nil: no metrics
	tc    propagation.TraceContext
	m     instruments
	// sets are the attribute sets and span names built so far.
	sets *sets
	// sampler decides which spans are recorded (sampling.go).
	sampler sampler
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
	if cfg.CardinalityLimit <= 0 {
		cfg.CardinalityLimit = DefaultCardinalityLimit
	}
	cfg.Settings = cfg.Settings.WithDefaults()
	res := newResource(cfg)
	e := &Exporter{cfg: cfg, sets: newSets(cfg.CardinalityLimit)}
	var meter metric.Meter
	var agg *aggregation
	if cfg.TracesURL != "" {
		hc, err := httpClient(cfg.Timeout, cfg.TracesTLS, cfg.TracesGRPC)
		if err != nil {
			return nil, err
		}
		exp := &spanExporter{sender{post: newPoster(cfg.TracesURL, cfg.TracesHeaders, cfg.Gzip, cfg.TracesGRPC, hc)}}
		e.sampler = newSampler(cfg.Sampler, cfg.SamplerRatio)
		e.spans = newBatch(exp, res, cfg)
	}
	if cfg.MetricsURL != "" {
		hc, err := httpClient(cfg.Timeout, cfg.MetricsTLS, cfg.MetricsGRPC)
		if err != nil {
			return nil, err
		}
		exp := newMetricExporter(newPoster(cfg.MetricsURL, cfg.MetricsHeaders, cfg.Gzip, cfg.MetricsGRPC, hc), cfg.Delta)
		agg = newAggregation(exp.Temporality, cfg.CardinalityLimit)
		e.mp = sdkmetric.NewMeterProvider(
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(cfg.Interval), sdkmetric.WithTimeout(cfg.Timeout),
				sdkmetric.WithProducer(agg))),
			sdkmetric.WithResource(res), sdkmetric.WithCardinalityLimit(cfg.CardinalityLimit))
		meter = e.mp.Meter(scope)
	}
	if meter == nil {
		return e, nil
	}
	var err error
	e.m, err = newInstruments(meter, agg)
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
// background has in flight: on Lambda the sandbox may freeze when Flush
// returns.
func (e *Exporter) Flush(ctx context.Context) (time.Duration, error) {
	return e.both(ctx, (*batch).export, (*sdkmetric.MeterProvider).ForceFlush)
}

// Shutdown flushes and stops both signals, within ctx and flush_timeout.
// The first call does; a later one returns at once, so that a stop after
// the final flush adds no wait of its own.
func (e *Exporter) Shutdown(ctx context.Context) (time.Duration, error) {
	if e.stopped.Swap(true) {
		return 0, nil
	}
	return e.both(ctx, (*batch).shutdown, (*sdkmetric.MeterProvider).Shutdown)
}

// both runs sf on the spans and mf on the metric provider at once, and
// returns when both have returned or when ctx or flush_timeout ends,
// whichever is first. Parts of the calls wait without ctx (a metric
// reader's stop waits for the export its loop has in flight, a second
// stop for the first), so an export that hangs cannot hold the caller,
// and with it a stop or a Lambda invocation, past the bound: it ends
// behind, its context cancelled.
func (e *Exporter) both(ctx context.Context, sf func(*batch, context.Context) error,
	mf func(*sdkmetric.MeterProvider, context.Context) error) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.FlushTimeout)
	defer cancel()
	errs := make(chan error, 2) // never blocks a call that ends behind
	calls := 0
	if e.spans != nil {
		calls++
		go func() { errs <- sf(e.spans, ctx) }()
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
// only when configured to trust it. A span the sampler passes over is
// only a span context; a recorded one keeps the request as it ends, its
// attributes built when its batch is encoded (span).
func (e *Exporter) Begin(ctx context.Context, method, route string, h http.Header) context.Context {
	var parent trace.SpanContext
	if e.cfg.TrustTraceparent {
		ctx = e.tc.Extract(ctx, propagation.HeaderCarrier(h))
		parent = trace.SpanContextFromContext(ctx)
	}
	if e.spans == nil {
		// No spans; a trusted caller's trace still reaches the backends
		// (Attempt).
		return ctx
	}
	sc, rec := e.newSpan(parent)
	if !rec {
		return withSpan(ctx, sc, nil)
	}
	return withSpan(ctx, sc, &span{sc: sc, parent: parent, name: e.sets.name(method, route), start: time.Now()})
}

// Attempt starts a backend attempt's client span under the request's and
// writes its traceparent into req's headers (a span the sampler passed
// over too, so the backend is told not to record it). AttemptEnd ends it
// with the context Attempt returns: a dropped attempt's is ctx itself,
// so that one costs no span and no context.
func (e *Exporter) Attempt(ctx context.Context, req *http.Request, a *telemetry.Attempt) context.Context {
	parent := parentOf(ctx)
	if e.spans == nil {
		if parent.IsValid() {
			setTraceparent(req.Header, parent)
		}
		return ctx
	}
	sc, rec := e.newSpan(parent)
	setTraceparent(req.Header, sc)
	if !rec {
		return ctx
	}
	return withSpan(ctx, sc, &span{sc: sc, parent: parent, client: true, name: e.sets.name(a.Operation, a.Model), start: time.Now()})
}

// AttemptEnd ends the attempt Attempt began (ctx is the context it
// returned) with its result.
func (e *Exporter) AttemptEnd(ctx context.Context, a *telemetry.Attempt, r telemetry.Result) {
	if s := recorded(ctx); s != nil && s.client && s.ended.CompareAndSwap(false, true) {
		s.endAttempt(a, r)
		s.end = time.Now()
		e.spans.add(s)
	}
	e.failedOver(r, a)
}

// failedOver counts an attempt that failed over to another endpoint.
func (e *Exporter) failedOver(r telemetry.Result, a *telemetry.Attempt) {
	if r.Failover && e.mp != nil {
		e.m.failovers.add(e.sets.failover(failoverKey{errorType: r.ErrorType, address: a.ServerAddress, spill: r.Spill, tenant: a.Tenant}), 1)
	}
}

// Stream counts a stream opened (+1) or ended (-1) on a pool.
func (e *Exporter) Stream(ctx context.Context, pool string, delta int64) {
	if e.mp != nil {
		e.m.streams.add(e.sets.pool(pool), delta)
	}
}

// End records a request's metrics and ends its server span. Each
// metric's attribute set is built once per distinct set of values
// (sets), not per request.
func (e *Exporter) End(ctx context.Context, r *telemetry.Request) {
	if s := recorded(ctx); s != nil && !s.client && s.ended.CompareAndSwap(false, true) {
		// Named for what it was: GenAI's "{operation} {model}" for a
		// model call.
		if r.Operation != "" && r.Model != "" {
			s.name = e.sets.name(r.Operation, r.Model)
		}
		s.endRequest(r)
		s.end = r.End
		if s.end.IsZero() {
			s.end = time.Now()
		}
		e.spans.add(s)
	}
	if e.mp == nil {
		return
	}
	m := &e.m
	tenant := tenantKey{r.Tenant, r.TenantName}
	m.requests.add(e.sets.request(requestKey{route: r.Route, method: r.Method, errorType: r.ErrorType, status: r.Status, tenant: tenant}), 1)
	if r.Limit != "" {
		m.limiter.add(e.sets.decision(decisionKey{r.Limit, tenant}), 1)
	}
	if r.Budget != "" {
		m.budget.add(e.sets.decision(decisionKey{r.Budget, tenant}), 1)
		tset := e.sets.tenant(tenant)
		if r.Reserved > 0 {
			m.reserved.add(tset, r.Reserved)
		}
		if r.Charged > 0 {
			m.charged.add(tset, r.Charged)
		}
	}
	if r.Cost > 0 && r.Operation != "" {
		// Only a tenant of the table has a spend limit, and only a model a
		// pool serves is priced: every attribute is bounded by config.
		m.cost.add(e.sets.cost(costKey{model: r.Model, tier: r.Tier, currency: r.Currency, tenant: tenant}), r.Cost)
	}
	if r.Keepalives > 0 {
		m.keepalives.add(e.sets.pool(r.Pool), int64(r.Keepalives))
	}
	if r.Operation == "" {
		return
	}
	genai := e.sets.genAI(genaiKey{operation: r.Operation, provider: r.Provider, model: r.Model, responseModel: r.ResponseModel,
		address: r.ServerAddress, port: r.ServerPort, tenant: tenant, errorType: r.ErrorType})
	m.duration.record(genai.all, r.End.Sub(r.Start).Seconds())
	if r.Usage {
		m.tokens.record(genai.input, r.InputTokens)
		m.tokens.record(genai.output, r.OutputTokens)
	}
	if !r.FirstEvent.IsZero() {
		m.ttft.record(genai.all, r.FirstEvent.Sub(r.Start).Seconds())
		if r.Usage && r.OutputTokens > 1 {
			m.tpot.record(genai.all, r.End.Sub(r.FirstEvent).Seconds()/float64(r.OutputTokens-1))
		}
		if !e.cfg.Start.IsZero() && e.firstEvent.CompareAndSwap(false, true) {
			m.coldFirst.Record(ctx, r.FirstEvent.Sub(e.cfg.Start).Seconds())
		}
	}
}
