package otlp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/encoding/protowire"
)

// metricExporter is the SDK's metric.Exporter: each Export encodes the
// collected metrics as one ExportMetricsServiceRequest and POSTs it.
type metricExporter struct {
	sender
	temporality sdkmetric.TemporalitySelector
}

var _ sdkmetric.Exporter = (*metricExporter)(nil)

func newMetricExporter(p *poster, delta bool) *metricExporter {
	t := sdkmetric.DefaultTemporalitySelector
	if delta {
		t = deltaTemporality
	}
	return &metricExporter{sender: sender{post: p}, temporality: t}
}

func (x *metricExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return x.temporality(k)
}

func (x *metricExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

// Export encodes rm before it returns (the SDK reuses rm afterwards) and
// sends it, retried within ctx. Metrics of an aggregation this encoder
// does not write (exponential histograms, summaries: no instrument of the
// gateway makes one) are left out and reported in the error.
func (x *metricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	if len(rm.ScopeMetrics) == 0 {
		return nil
	}
	return x.export(ctx, func(b []byte) ([]byte, error) { return appendMetrics(b, rm) })
}

// ForceFlush has nothing to do: Export holds nothing back.
func (x *metricExporter) ForceFlush(ctx context.Context) error { return ctx.Err() }

// sender is what both exporters share: one export at a time (so its
// buffer is reused), none after Shutdown.
type sender struct {
	post *poster
	mu   sync.Mutex
	buf  []byte
	shut bool
}

// export encodes with appendTo into the buffer and POSTs the result; an
// encoding error (a metric left out) is reported with the send's.
func (s *sender) export(ctx context.Context, appendTo func([]byte) ([]byte, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut {
		return errShutdown
	}
	var err error
	s.buf, err = appendTo(s.buf[:0])
	return errors.Join(err, s.post.send(ctx, s.buf))
}

// Shutdown refuses later exports and closes idle connections.
func (s *sender) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shut = true
	s.mu.Unlock()
	s.post.close()
	return ctx.Err()
}

var (
	errShutdown    = errors.New("otlp: exporter is shut down")
	errAggregation = errors.New("otlp: aggregation not encoded")
	errTemporality = errors.New("otlp: unknown temporality")
)

// appendMetrics appends collector.metrics.v1.ExportMetricsServiceRequest
// {resource_metrics = 1} holding rm (the ScopeMetrics of one scope as
// one): ResourceMetrics{resource = 1,
// scope_metrics = 2, schema_url = 3}, Resource{attributes = 1},
// ScopeMetrics{scope = 1, metrics = 2, schema_url = 3},
// InstrumentationScope{name = 1, version = 2, attributes = 3}.
func appendMetrics(b []byte, rm *metricdata.ResourceMetrics) ([]byte, error) {
	e := enc{b: b}
	var errs []error
	r := e.open(1)
	res := e.open(1)
	if rm.Resource != nil {
		e.attrSet(1, rm.Resource.Set())
	}
	e.close(res)
	for i, sm := range rm.ScopeMetrics {
		if slices.ContainsFunc(rm.ScopeMetrics[:i], func(o metricdata.ScopeMetrics) bool { return sameScope(o.Scope, sm.Scope) }) {
			continue
		}
		s := e.open(2)
		sc := e.open(1)
		e.str(1, sm.Scope.Name)
		e.str(2, sm.Scope.Version)
		e.attrSet(3, &sm.Scope.Attributes)
		e.close(sc)
		for _, same := range rm.ScopeMetrics[i:] {
			if !sameScope(same.Scope, sm.Scope) {
				continue
			}
			for _, m := range same.Metrics {
				if err := e.metric(m); err != nil {
					errs = append(errs, err)
				}
			}
		}
		e.str(3, sm.Scope.SchemaURL)
		e.close(s)
	}
	if rm.Resource != nil {
		e.str(3, rm.Resource.SchemaURL())
	}
	e.close(r)
	return e.b, errors.Join(errs...)
}

// sameScope: a and b are one instrumentation scope. The SDK's meter and
// the aggregation (Produce) each make a ScopeMetrics of the gateway's
// scope; appendMetrics writes them as one, as the SDK alone would have.
func sameScope(a, b instrumentation.Scope) bool {
	return a.Name == b.Name && a.Version == b.Version && a.SchemaURL == b.SchemaURL && a.Attributes.Equals(&b.Attributes)
}

// metric writes ScopeMetrics.metrics = 2: Metric{name = 1, description = 2,
// unit = 3, gauge = 5, sum = 7, histogram = 9}. A metric it cannot write
// is left out whole.
func (e *enc) metric(m metricdata.Metrics) error {
	start := len(e.b)
	o := e.open(2)
	e.str(1, m.Name)
	e.str(2, m.Description)
	e.str(3, m.Unit)
	var err error
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		gauge(e, d)
	case metricdata.Gauge[float64]:
		gauge(e, d)
	case metricdata.Sum[int64]:
		err = sum(e, d)
	case metricdata.Sum[float64]:
		err = sum(e, d)
	case metricdata.Histogram[int64]:
		err = histogram(e, d)
	case metricdata.Histogram[float64]:
		err = histogram(e, d)
	default:
		err = fmt.Errorf("%w: %s is %T", errAggregation, m.Name, d)
	}
	if err != nil {
		e.b = e.b[:start]
		return err
	}
	e.close(o)
	return nil
}

// gauge writes Gauge{data_points = 1}.
func gauge[N int64 | float64](e *enc, g metricdata.Gauge[N]) {
	m := e.open(5)
	numberPoints(e, g.DataPoints)
	e.close(m)
}

// sum writes Sum{data_points = 1, aggregation_temporality = 2,
// is_monotonic = 3}.
func sum[N int64 | float64](e *enc, s metricdata.Sum[N]) error {
	t, err := temporality(s.Temporality)
	if err != nil {
		return err
	}
	m := e.open(7)
	numberPoints(e, s.DataPoints)
	e.varint(2, t)
	e.varint(3, protowire.EncodeBool(s.IsMonotonic))
	e.close(m)
	return nil
}

// numberPoints writes NumberDataPoint{start_time_unix_nano = 2,
// time_unix_nano = 3, as_double = 4 | as_int = 6, exemplars = 5,
// attributes = 7} as data_points = 1.
func numberPoints[N int64 | float64](e *enc, pts []metricdata.DataPoint[N]) {
	for _, p := range pts {
		d := e.open(1)
		e.time(2, p.StartTime)
		e.time(3, p.Time)
		numberValue(e, 4, 6, p.Value)
		exemplars(e, 5, p.Exemplars)
		e.attrSet(7, &p.Attributes)
		e.close(d)
	}
}

// numberValue writes the oneof as_double (fnum) | as_int (inum), both
// 64-bit fixed.
func numberValue[N int64 | float64](e *enc, fnum, inum protowire.Number, v N) {
	switch v := any(v).(type) {
	case int64:
		e.b = protowire.AppendTag(e.b, inum, protowire.Fixed64Type)
		e.b = protowire.AppendFixed64(e.b, uint64(v))
	case float64:
		e.double(fnum, v)
	}
}

// histogram writes Histogram{data_points = 1, aggregation_temporality = 2}
// and its HistogramDataPoint{start_time_unix_nano = 2, time_unix_nano = 3,
// count = 4, sum = 5, bucket_counts = 6, explicit_bounds = 7, exemplars = 8,
// attributes = 9, min = 11, max = 12} (6 and 7 packed).
func histogram[N int64 | float64](e *enc, h metricdata.Histogram[N]) error {
	t, err := temporality(h.Temporality)
	if err != nil {
		return err
	}
	m := e.open(9)
	for _, p := range h.DataPoints {
		d := e.open(1)
		e.time(2, p.StartTime)
		e.time(3, p.Time)
		e.fixed64(4, p.Count)
		e.double(5, float64(p.Sum))
		if len(p.BucketCounts) > 0 {
			e.b = protowire.AppendTag(e.b, 6, protowire.BytesType)
			e.b = protowire.AppendVarint(e.b, uint64(8*len(p.BucketCounts)))
			for _, c := range p.BucketCounts {
				e.b = protowire.AppendFixed64(e.b, c)
			}
		}
		if len(p.Bounds) > 0 {
			e.b = protowire.AppendTag(e.b, 7, protowire.BytesType)
			e.b = protowire.AppendVarint(e.b, uint64(8*len(p.Bounds)))
			for _, f := range p.Bounds {
				e.b = protowire.AppendFixed64(e.b, math.Float64bits(f))
			}
		}
		exemplars(e, 8, p.Exemplars)
		e.attrSet(9, &p.Attributes)
		if v, ok := p.Min.Value(); ok {
			e.double(11, float64(v))
		}
		if v, ok := p.Max.Value(); ok {
			e.double(12, float64(v))
		}
		e.close(d)
	}
	e.varint(2, t)
	e.close(m)
	return nil
}

// exemplars writes Exemplar{time_unix_nano = 2, as_double = 3 | as_int = 6,
// span_id = 4, trace_id = 5, filtered_attributes = 7} as the field num.
func exemplars[N int64 | float64](e *enc, num protowire.Number, xs []metricdata.Exemplar[N]) {
	for _, x := range xs {
		m := e.open(num)
		e.time(2, x.Time)
		numberValue(e, 3, 6, x.Value)
		e.bytes(4, x.SpanID)
		e.bytes(5, x.TraceID)
		e.attrs(7, x.FilteredAttributes)
		e.close(m)
	}
}

// temporality is AggregationTemporality: DELTA = 1, CUMULATIVE = 2.
func temporality(t metricdata.Temporality) (uint64, error) {
	switch t {
	case metricdata.DeltaTemporality:
		return 1, nil
	case metricdata.CumulativeTemporality:
		return 2, nil
	}
	return 0, fmt.Errorf("%w: %s", errTemporality, t)
}
