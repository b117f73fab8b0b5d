package otlp

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/gateway/shared/telemetry"
)

// The tests here decode what enc wrote with the generated OTLP types (in
// tests only: they never reach the binary; MetricsData and TracesData are
// the export requests' twins on the wire, field 1 repeated, and unlike the
// collector packages they do not import gRPC) and compare it, field by field
// (proto.Equal, unknown fields included, so a wrong field number or wire
// type fails), with a message built from what the SDK produced by the
// same rules as the SDK's own OTLP exporters.

// every kind of attribute value, zero values included (a oneof member is
// written even when zero).
var every = []attribute.KeyValue{
	attribute.String("s", "x"), attribute.String("s0", ""),
	attribute.Bool("b", true), attribute.Bool("b0", false),
	attribute.Int64("i", -7), attribute.Int("i0", 0),
	attribute.Float64("f", 0.25), attribute.Float64("f0", 0), attribute.Float64("inf", math.Inf(1)),
	attribute.StringSlice("ss", []string{"a", ""}), attribute.BoolSlice("bs", []bool{true, false}),
	attribute.Int64Slice("is", []int64{1, -1}), attribute.Float64Slice("fs", []float64{1.5}),
	attribute.StringSlice("empty", nil),
	{Key: "bytes", Value: attribute.ByteSliceValue([]byte{0, 1})},
	{Key: "slice", Value: attribute.SliceValue(attribute.StringValue("a"), attribute.IntValue(2))},
	{Key: "map", Value: attribute.MapValue(attribute.String("k", "v"), attribute.Bool("t", true))},
	{Key: "none", Value: attribute.Value{}},
}

var testResource = resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
	attribute.String("service.name", "llmgw"), attribute.String("service.instance.id", "abc"))

func TestMetricsDecodeAsOTLP(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		delta bool
	}{{"cumulative", false}, {"delta", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			x := newMetricExporter(nil, c.delta)
			reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(x.Temporality))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(testResource),
				sdkmetric.WithView(sdkmetric.NewView(sdkmetric.Instrument{Name: "nominmax"},
					sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: []float64{1}, NoMinMax: true}})))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
			recordEveryKind(t, mp)

			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, m := range rm.ScopeMetrics[0].Metrics {
				kinds[typeName(m.Data)] = true
			}
			if len(kinds) != 6 {
				t.Fatalf("the SDK made %v, want all six kinds", kinds)
			}
			b, err := appendMetrics([]byte("kept"), &rm)
			if err != nil {
				t.Fatal(err)
			}
			if string(b[:4]) != "kept" {
				t.Fatal("appendMetrics overwrote what was in its buffer")
			}
			got := new(metricpb.MetricsData)
			if err := proto.Unmarshal(b[4:], got); err != nil {
				t.Fatal(err)
			}
			same(t, got, wantMetrics(t, &rm))

			// Spot checks that do not go through wantMetrics.
			ms := got.ResourceMetrics[0].ScopeMetrics[0].Metrics
			if len(ms) != len(rm.ScopeMetrics[0].Metrics) {
				t.Fatalf("%d metrics, the SDK made %d", len(ms), len(rm.ScopeMetrics[0].Metrics))
			}
			wantT := metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
			if c.delta {
				wantT = metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
			}
			tenant := func(pts []*metricpb.NumberDataPoint) *metricpb.NumberDataPoint {
				for _, p := range pts {
					if len(p.Attributes) == 1 && p.Attributes[0].Value.GetStringValue() == "t1" {
						return p
					}
				}
				return &metricpb.NumberDataPoint{}
			}
			for _, m := range ms {
				switch m.Name {
				case "i.counter":
					if s := m.GetSum(); !s.IsMonotonic || s.AggregationTemporality != wantT || tenant(s.DataPoints).GetAsInt() != 5 ||
						len(tenant(s.DataPoints).Exemplars) != 2 || tenant(s.DataPoints).Exemplars[0].TraceId[0] != 1 {
						t.Errorf("i.counter %v", s)
					}
				case "i.updown":
					if s := m.GetSum(); s.IsMonotonic || tenant(s.DataPoints).GetAsInt() != -3 {
						t.Errorf("i.updown %v", s)
					}
				case "f.histogram":
					h := m.GetHistogram().DataPoints[0]
					if h.GetCount() != 3 || h.GetSum() != 0.5+2+200 || h.GetMin() != 0.5 || h.GetMax() != 200 ||
						len(h.ExplicitBounds) != 3 || h.BucketCounts[1] != 1 || h.BucketCounts[3] != 1 || m.Unit != "s" {
						t.Errorf("f.histogram %v", h)
					}
				case "nominmax":
					if h := m.GetHistogram().DataPoints[0]; h.Min != nil || h.Max != nil || h.Sum == nil {
						t.Errorf("nominmax %v", h)
					}
				}
			}
		})
	}
}

// recordEveryKind records on every synchronous and one asynchronous
// instrument kind, with every attribute kind, partly under a sampled span
// so that exemplars carry its ids.
func recordEveryKind(t *testing.T, mp *sdkmetric.MeterProvider) {
	t.Helper()
	m := mp.Meter("scope", metric.WithInstrumentationVersion("1.2.3"), metric.WithSchemaURL("https://example.com/s"),
		metric.WithInstrumentationAttributes(attribute.String("lib", "x")))
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1, 2, 3}, SpanID: [8]byte{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	all := metric.WithAttributes(every...)
	some := metric.WithAttributes(attribute.String("tenant", "t1"))
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	ic, err := m.Int64Counter("i.counter", metric.WithUnit("{request}"), metric.WithDescription("d"))
	must(err)
	ic.Add(ctx, 2, some)
	ic.Add(ctx, 3, some)
	ic.Add(ctx, 1, all)
	fc, err := m.Float64Counter("f.counter")
	must(err)
	fc.Add(ctx, 0.5)
	iu, err := m.Int64UpDownCounter("i.updown")
	must(err)
	iu.Add(ctx, 1, some)
	iu.Add(ctx, -4, some)
	fu, err := m.Float64UpDownCounter("f.updown")
	must(err)
	fu.Add(context.Background(), -0.5)
	ig, err := m.Int64Gauge("i.gauge")
	must(err)
	ig.Record(ctx, 0, all)
	fg, err := m.Float64Gauge("f.gauge")
	must(err)
	fg.Record(context.Background(), 1.25)
	ih, err := m.Int64Histogram("i.histogram", metric.WithExplicitBucketBoundaries(1, 4, 16))
	must(err)
	ih.Record(ctx, 5, all)
	ih.Record(ctx, 0, all)
	fh, err := m.Float64Histogram("f.histogram", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.1, 1, 100))
	must(err)
	for _, v := range []float64{0.5, 2, 200} {
		fh.Record(ctx, v, some)
	}
	nm, err := m.Float64Histogram("nominmax")
	must(err)
	nm.Record(context.Background(), 3)
	_, err = m.Int64ObservableGauge("i.observable", metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(9, some)
		return nil
	}))
	must(err)
}

func typeName(d metricdata.Aggregation) string {
	switch d.(type) {
	case metricdata.Sum[int64]:
		return "isum"
	case metricdata.Sum[float64]:
		return "fsum"
	case metricdata.Gauge[int64]:
		return "igauge"
	case metricdata.Gauge[float64]:
		return "fgauge"
	case metricdata.Histogram[int64]:
		return "ihist"
	case metricdata.Histogram[float64]:
		return "fhist"
	}
	return "other"
}

func TestMetricsLeavesOutWhatItCannotEncode(t *testing.T) {
	t.Parallel()
	rm := &metricdata.ResourceMetrics{Resource: testResource, ScopeMetrics: []metricdata.ScopeMetrics{{Metrics: []metricdata.Metrics{
		{Name: "kept", Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{{Value: 1}}}},
		{Name: "summary", Data: metricdata.Summary{}},
		{Name: "no temporality", Data: metricdata.Sum[int64]{}},
		{Name: "exponential", Data: metricdata.ExponentialHistogram[float64]{Temporality: metricdata.DeltaTemporality}},
	}}}}
	b, err := appendMetrics(nil, rm)
	if !errors.Is(err, errAggregation) || !errors.Is(err, errTemporality) {
		t.Fatalf("err %v", err)
	}
	got := new(metricpb.MetricsData)
	if err := proto.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if ms := got.ResourceMetrics[0].ScopeMetrics[0].Metrics; len(ms) != 1 || ms[0].Name != "kept" || ms[0].GetGauge().DataPoints[0].GetAsInt() != 1 {
		t.Fatalf("metrics %v", ms)
	}
}

// TestSpansDecodeAsOTLP: the spans of a request that failed over, under
// a trusted caller's trace with a tracestate, decode as the SDK's spans
// of the same IDs, times and attributes would, encoded by the SDK
// exporters' rules (wantSpans); the attributes are those the gateway set
// on the SDK's spans before its spans were its own.
func TestSpansDecodeAsOTLP(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", Sampler: "parentbased_always_on", Settings: telemetry.Settings{TrustTraceparent: true}, BatchDelay: time.Hour,
		ServiceName: "llmgw", Resource: map[string]string{"service.instance.id": "abc"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	in := http.Header{"Traceparent": {callerTrace}, "Tracestate": {"vendor=v1,other=o"}}
	ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", in)
	attempts := []struct {
		a telemetry.Attempt
		r telemetry.Result
	}{
		{telemetry.Attempt{Operation: "chat", Model: "llama", ResponseModel: "meta/llama", Provider: "vllm", ServerAddress: "b1", ServerPort: 8000, Tenant: "t1"},
			telemetry.Result{Status: 429, ErrorType: "upstream_rate_limited", Failover: true, Spill: true}},
		{telemetry.Attempt{Operation: "chat", Model: "llama", ResponseModel: "meta/llama", Provider: "azure.ai.openai", ServerAddress: "b2", ServerPort: 443, Tenant: "t1", Priority: 1},
			telemetry.Result{Status: 200}},
	}
	for _, at := range attempts {
		req := httptest.NewRequest("POST", "http://backend/v1/chat/completions", nil)
		exp.AttemptEnd(exp.Attempt(ctx, req, &at.a), &at.a, at.r)
	}
	end := time.Unix(1700000000, 123456789)
	r := &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: "t1", TenantName: "One", Operation: "chat",
		Model: "llama", ResponseModel: "meta/llama", Pool: "p", Provider: "azure.ai.openai", ServerAddress: "b2", ServerPort: 443, Stream: true,
		Usage: true, InputTokens: 12, OutputTokens: 30, Attempts: 2, End: end}
	exp.End(ctx, r)
	// A request that failed, in a trace of its own.
	ctx2 := exp.Begin(context.Background(), "GET", "/v1/models", http.Header{})
	exp.End(ctx2, &telemetry.Request{Route: "/v1/models", Method: "GET", Status: 401, ErrorType: "invalid_token", End: end})
	if _, err := exp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	bodies := col.bodies["/v1/traces"]
	col.mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("%d exports, want 1", len(bodies))
	}
	got := new(tracepb.TracesData)
	if err := proto.Unmarshal(bodies[0], got); err != nil {
		t.Fatal(err)
	}
	if len(got.ResourceSpans) != 1 || len(got.ResourceSpans[0].ScopeSpans) != 1 || len(got.ResourceSpans[0].ScopeSpans[0].Spans) != 4 {
		t.Fatalf("exported %v, want 4 spans of one resource and scope", got)
	}
	spans := got.ResourceSpans[0].ScopeSpans[0].Spans
	ts, err := trace.ParseTraceState("vendor=v1,other=o")
	if err != nil {
		t.Fatal(err)
	}
	tid, err := trace.TraceIDFromHex(callerTraceID)
	if err != nil {
		t.Fatal(err)
	}
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: [8]byte{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ids := func(s *tracepb.Span, state trace.TraceState) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(s.TraceId), SpanID: trace.SpanID(s.SpanId), TraceFlags: trace.FlagsSampled, TraceState: state})
	}
	server := ids(spans[2], ts)
	at := func(s *tracepb.Span) (time.Time, time.Time) {
		return time.Unix(0, int64(s.StartTimeUnixNano)), time.Unix(0, int64(s.EndTimeUnixNano))
	}
	stub := func(s *tracepb.Span, sc, parent trace.SpanContext, kind trace.SpanKind, status sdktrace.Status, kv ...attribute.KeyValue) tracetest.SpanStub {
		start, stop := at(s)
		return tracetest.SpanStub{Name: s.Name, SpanContext: sc, Parent: parent, SpanKind: kind, StartTime: start, EndTime: stop,
			Attributes: kv, Status: status, Resource: exp.spans.res, InstrumentationScope: instrumentation.Scope{Name: scope}}
	}
	ok := sdktrace.Status{}
	want := tracetest.SpanStubs{
		stub(spans[0], ids(spans[0], ts), server, trace.SpanKindClient, sdktrace.Status{Code: codes.Error, Description: "upstream_rate_limited"},
			attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "vllm"),
			attribute.String("gen_ai.request.model", "llama"), attribute.String("gen_ai.response.model", "meta/llama"),
			attribute.String("server.address", "b1"), attribute.Int("server.port", 8000), attribute.Int("llmgw.endpoint.priority", 0),
			attribute.Int("http.response.status_code", 429), attribute.String("error.type", "upstream_rate_limited")),
		stub(spans[1], ids(spans[1], ts), server, trace.SpanKindClient, ok,
			attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "azure.ai.openai"),
			attribute.String("gen_ai.request.model", "llama"), attribute.String("gen_ai.response.model", "meta/llama"),
			attribute.String("server.address", "b2"), attribute.Int("server.port", 443), attribute.Int("llmgw.endpoint.priority", 1),
			attribute.Int("http.response.status_code", 200)),
		stub(spans[2], server, caller, trace.SpanKindServer, ok,
			attribute.String("http.request.method", "POST"), attribute.String("http.route", "/v1/chat/completions"),
			attribute.Int("http.response.status_code", 200), attribute.String("llmgw.tenant.id", "t1"), attribute.String("llmgw.tenant.name", "One"),
			attribute.Int("llmgw.attempts", 2), attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "azure.ai.openai"),
			attribute.String("gen_ai.request.model", "llama"), attribute.String("gen_ai.response.model", "meta/llama"),
			attribute.String("server.address", "b2"), attribute.String("llmgw.pool", "p"), attribute.Bool("llmgw.stream", true),
			attribute.Int64("gen_ai.usage.input_tokens", 12), attribute.Int64("gen_ai.usage.output_tokens", 30)),
		stub(spans[3], ids(spans[3], trace.TraceState{}), trace.SpanContext{}, trace.SpanKindServer, sdktrace.Status{Code: codes.Error, Description: "invalid_token"},
			attribute.String("http.request.method", "GET"), attribute.String("http.route", "/v1/models"),
			attribute.Int("http.response.status_code", 401), attribute.String("llmgw.tenant.id", ""), attribute.String("llmgw.tenant.name", ""),
			attribute.Int("llmgw.attempts", 0), attribute.String("error.type", "invalid_token")),
	}
	same(t, got, wantSpans(want.Snapshots()))
	// Spot checks that do not go through wantSpans.
	if s := spans[2]; s.Name != "chat llama" || s.Flags != 0x301 || s.EndTimeUnixNano != uint64(end.UnixNano()) || s.TraceState != "vendor=v1,other=o" {
		t.Errorf("server span %v", s)
	}
	if s := spans[3]; s.Name != "GET /v1/models" || len(s.ParentSpanId) != 0 || s.Flags != 0x101 || bytes.Equal(s.TraceId, spans[2].TraceId) {
		t.Errorf("a request's own trace: %v", s)
	}
}

// spanKind is Span.SpanKind: INTERNAL = 1, SERVER = 2, CLIENT = 3,
// PRODUCER = 4, CONSUMER = 5, else UNSPECIFIED = 0.
func spanKind(k trace.SpanKind) uint64 {
	switch k {
	case trace.SpanKindInternal:
		return 1
	case trace.SpanKindServer:
		return 2
	case trace.SpanKindClient:
		return 3
	case trace.SpanKindProducer:
		return 4
	case trace.SpanKindConsumer:
		return 5
	}
	return 0
}

// same fails t with both messages when they differ.
func same(t *testing.T, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("decoded:\n%s\nwant:\n%s", prototext.Format(got), prototext.Format(want))
	}
}

// wantMetrics builds the request from rm by the SDK exporters' rules.
func wantMetrics(t *testing.T, rm *metricdata.ResourceMetrics) *metricpb.MetricsData {
	t.Helper()
	r := &metricpb.ResourceMetrics{Resource: &resourcepb.Resource{Attributes: kvSet(rm.Resource.Set())}, SchemaUrl: rm.Resource.SchemaURL()}
	for _, sm := range rm.ScopeMetrics {
		s := &metricpb.ScopeMetrics{Scope: &commonpb.InstrumentationScope{Name: sm.Scope.Name, Version: sm.Scope.Version,
			Attributes: kvSet(&sm.Scope.Attributes)}, SchemaUrl: sm.Scope.SchemaURL}
		for _, m := range sm.Metrics {
			o := &metricpb.Metric{Name: m.Name, Description: m.Description, Unit: m.Unit}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				o.Data = &metricpb.Metric_Sum{Sum: &metricpb.Sum{DataPoints: wantPoints(d.DataPoints), AggregationTemporality: wantTemporality(d.Temporality), IsMonotonic: d.IsMonotonic}}
			case metricdata.Sum[float64]:
				o.Data = &metricpb.Metric_Sum{Sum: &metricpb.Sum{DataPoints: wantPoints(d.DataPoints), AggregationTemporality: wantTemporality(d.Temporality), IsMonotonic: d.IsMonotonic}}
			case metricdata.Gauge[int64]:
				o.Data = &metricpb.Metric_Gauge{Gauge: &metricpb.Gauge{DataPoints: wantPoints(d.DataPoints)}}
			case metricdata.Gauge[float64]:
				o.Data = &metricpb.Metric_Gauge{Gauge: &metricpb.Gauge{DataPoints: wantPoints(d.DataPoints)}}
			case metricdata.Histogram[int64]:
				o.Data = &metricpb.Metric_Histogram{Histogram: &metricpb.Histogram{DataPoints: wantHistogram(d.DataPoints), AggregationTemporality: wantTemporality(d.Temporality)}}
			case metricdata.Histogram[float64]:
				o.Data = &metricpb.Metric_Histogram{Histogram: &metricpb.Histogram{DataPoints: wantHistogram(d.DataPoints), AggregationTemporality: wantTemporality(d.Temporality)}}
			default:
				t.Fatalf("%s: %T", m.Name, d)
			}
			s.Metrics = append(s.Metrics, o)
		}
		r.ScopeMetrics = append(r.ScopeMetrics, s)
	}
	return &metricpb.MetricsData{ResourceMetrics: []*metricpb.ResourceMetrics{r}}
}

func wantTemporality(t metricdata.Temporality) metricpb.AggregationTemporality {
	if t == metricdata.DeltaTemporality {
		return metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
	}
	return metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
}

func wantPoints[N int64 | float64](pts []metricdata.DataPoint[N]) []*metricpb.NumberDataPoint {
	var out []*metricpb.NumberDataPoint
	for _, p := range pts {
		d := &metricpb.NumberDataPoint{Attributes: kvSet(&p.Attributes), StartTimeUnixNano: nanos(p.StartTime), TimeUnixNano: nanos(p.Time),
			Exemplars: wantExemplars(p.Exemplars)}
		switch v := any(p.Value).(type) {
		case int64:
			d.Value = &metricpb.NumberDataPoint_AsInt{AsInt: v}
		case float64:
			d.Value = &metricpb.NumberDataPoint_AsDouble{AsDouble: v}
		}
		out = append(out, d)
	}
	return out
}

func wantHistogram[N int64 | float64](pts []metricdata.HistogramDataPoint[N]) []*metricpb.HistogramDataPoint {
	var out []*metricpb.HistogramDataPoint
	for _, p := range pts {
		sum := float64(p.Sum)
		d := &metricpb.HistogramDataPoint{Attributes: kvSet(&p.Attributes), StartTimeUnixNano: nanos(p.StartTime), TimeUnixNano: nanos(p.Time),
			Count: p.Count, Sum: &sum, BucketCounts: p.BucketCounts, ExplicitBounds: p.Bounds, Exemplars: wantExemplars(p.Exemplars)}
		if v, ok := p.Min.Value(); ok {
			f := float64(v)
			d.Min = &f
		}
		if v, ok := p.Max.Value(); ok {
			f := float64(v)
			d.Max = &f
		}
		out = append(out, d)
	}
	return out
}

func wantExemplars[N int64 | float64](xs []metricdata.Exemplar[N]) []*metricpb.Exemplar {
	var out []*metricpb.Exemplar
	for _, x := range xs {
		e := &metricpb.Exemplar{FilteredAttributes: kvs(x.FilteredAttributes), TimeUnixNano: nanos(x.Time), SpanId: x.SpanID, TraceId: x.TraceID}
		switch v := any(x.Value).(type) {
		case int64:
			e.Value = &metricpb.Exemplar_AsInt{AsInt: v}
		case float64:
			e.Value = &metricpb.Exemplar_AsDouble{AsDouble: v}
		}
		out = append(out, e)
	}
	return out
}

// wantSpans builds the request from spans by the SDK exporter's rules,
// grouped in the order of first appearance.
func wantSpans(spans []sdktrace.ReadOnlySpan) *tracepb.TracesData {
	req := &tracepb.TracesData{}
	res := map[attribute.Distinct]*tracepb.ResourceSpans{}
	type key struct {
		r attribute.Distinct
		s any
	}
	scopes := map[key]*tracepb.ScopeSpans{}
	for _, sd := range spans {
		rk := sd.Resource().Equivalent()
		rs := res[rk]
		if rs == nil {
			rs = &tracepb.ResourceSpans{Resource: &resourcepb.Resource{Attributes: kvSet(sd.Resource().Set())}, SchemaUrl: sd.Resource().SchemaURL()}
			res[rk] = rs
			req.ResourceSpans = append(req.ResourceSpans, rs)
		}
		sc := sd.InstrumentationScope()
		ss := scopes[key{rk, sc}]
		if ss == nil {
			ss = &tracepb.ScopeSpans{SchemaUrl: sc.SchemaURL}
			if sc.Name != "" || sc.Version != "" || sc.SchemaURL != "" || sc.Attributes.Len() > 0 {
				ss.Scope = &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version, Attributes: kvSet(&sc.Attributes)}
			}
			scopes[key{rk, sc}] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ctx := sd.SpanContext()
		tid, sid := ctx.TraceID(), ctx.SpanID()
		s := &tracepb.Span{TraceId: tid[:], SpanId: sid[:], TraceState: ctx.TraceState().String(), Name: sd.Name(),
			Kind: tracepb.Span_SpanKind(spanKind(sd.SpanKind())), StartTimeUnixNano: nanos(sd.StartTime()), EndTimeUnixNano: nanos(sd.EndTime()),
			Attributes: kvs(sd.Attributes()), DroppedAttributesCount: uint32(sd.DroppedAttributes()),
			DroppedEventsCount: uint32(sd.DroppedEvents()), DroppedLinksCount: uint32(sd.DroppedLinks()),
			Status: &tracepb.Status{Message: sd.Status().Description}, Flags: uint32(ctx.TraceFlags()) | 0x100}
		switch sd.Status().Code {
		case codes.Ok:
			s.Status.Code = tracepb.Status_STATUS_CODE_OK
		case codes.Error:
			s.Status.Code = tracepb.Status_STATUS_CODE_ERROR
		}
		if p := sd.Parent(); p.SpanID().IsValid() {
			psid := p.SpanID()
			s.ParentSpanId = psid[:]
			if p.IsRemote() {
				s.Flags |= 0x200
			}
		}
		for _, ev := range sd.Events() {
			s.Events = append(s.Events, &tracepb.Span_Event{TimeUnixNano: nanos(ev.Time), Name: ev.Name, Attributes: kvs(ev.Attributes),
				DroppedAttributesCount: uint32(ev.DroppedAttributeCount)})
		}
		for _, l := range sd.Links() {
			lt, ls := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			f := uint32(l.SpanContext.TraceFlags()) | 0x100
			if l.SpanContext.IsRemote() {
				f |= 0x200
			}
			s.Links = append(s.Links, &tracepb.Span_Link{TraceId: lt[:], SpanId: ls[:], TraceState: l.SpanContext.TraceState().String(),
				Attributes: kvs(l.Attributes), DroppedAttributesCount: uint32(l.DroppedAttributeCount), Flags: f})
		}
		ss.Spans = append(ss.Spans, s)
	}
	return req
}

func nanos(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

func kvSet(s *attribute.Set) []*commonpb.KeyValue { return kvs(s.ToSlice()) }

func kvs(in []attribute.KeyValue) []*commonpb.KeyValue {
	var out []*commonpb.KeyValue
	for _, kv := range in {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	arr := func(vs []*commonpb.AnyValue) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
	}
	switch v.Type() {
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.BYTESLICE:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}}
	case attribute.MAP:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvs(v.AsMap())}}}
	case attribute.STRINGSLICE:
		return arr(wantArray(v.AsStringSlice(), attribute.StringValue))
	case attribute.BOOLSLICE:
		return arr(wantArray(v.AsBoolSlice(), attribute.BoolValue))
	case attribute.INT64SLICE:
		return arr(wantArray(v.AsInt64Slice(), attribute.Int64Value))
	case attribute.FLOAT64SLICE:
		return arr(wantArray(v.AsFloat64Slice(), attribute.Float64Value))
	case attribute.SLICE:
		return arr(wantArray(v.AsSlice(), func(x attribute.Value) attribute.Value { return x }))
	}
	return &commonpb.AnyValue{}
}

func wantArray[T any](xs []T, value func(T) attribute.Value) []*commonpb.AnyValue {
	var out []*commonpb.AnyValue
	for _, x := range xs {
		out = append(out, anyValue(value(x)))
	}
	return out
}

// BenchmarkAppendMetrics: one export's encoding (the gateway's metrics
// of a few tenants), into a reused buffer as the exporter does.
func BenchmarkAppendMetrics(b *testing.B) {
	agg := newAggregation(sdkmetric.DefaultTemporalitySelector, 0)
	reader := sdkmetric.NewManualReader(sdkmetric.WithProducer(agg))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(testResource))
	exp := &Exporter{mp: mp, sets: newSets(DefaultCardinalityLimit)}
	m, err := newInstruments(mp.Meter(scope), agg)
	if err != nil {
		b.Fatal(err)
	}
	exp.m = m
	now := time.Now()
	for _, tenant := range []string{"t1", "t2", "t3", "t4"} {
		exp.End(context.Background(), &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: tenant,
			Operation: "chat", Provider: "vllm", Model: "llama", ServerAddress: "backend", ServerPort: 8000, Usage: true,
			InputTokens: 12, OutputTokens: 30, Start: now.Add(-time.Second), FirstEvent: now.Add(-time.Second / 2), End: now})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, err = appendMetrics(buf[:0], &rm)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf)), "bytes/export")
}
