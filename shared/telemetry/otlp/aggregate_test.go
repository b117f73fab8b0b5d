package otlp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
)

// measurement is one Add or Record of the metric named, with the
// attributes of set n; fresh builds its attrSet anew, as a set past the
// memo's bound is.
type measurement struct {
	metric string
	set    int
	v      float64
	fresh  bool
}

// aggregationCycles are two collect cycles' measurements: each cycle's
// once in order, then again from several goroutines at once. The values
// are multiples of 1/8, so float sums do not depend on the order the
// goroutines add in. llmgw.requests takes more sets than the limit below
// (in the same order in both cycles, so the SDK's per-cycle delta limit and
// the aggregation's overflow the same sets); the second cycle leaves some
// series out and starts others.
var aggregationCycles = [2]struct{ once, concurrent []measurement }{{
	once: []measurement{
		{"llmgw.requests", 0, 1, false}, {"llmgw.requests", 1, 1, false}, {"llmgw.requests", 2, 1, true},
		{"llmgw.requests", 3, 1, false}, {"llmgw.requests", 4, 1, false}, {"llmgw.requests", 5, 1, false},
		{"llmgw.requests", 6, 1, true}, {"llmgw.requests", 5, 1, false},
		{"llmgw.streams.open", 0, 1, false}, {"llmgw.streams.open", 0, 1, false}, {"llmgw.streams.open", 0, -1, false},
		{"llmgw.streams.open", 1, 1, false}, {"llmgw.streams.open", 1, -1, true},
		{"llmgw.limiter.decisions", 0, 1, false}, {"llmgw.budget.decisions", 1, 1, false},
		{"llmgw.budget.tokens.reserved", 0, 100, true}, {"llmgw.budget.tokens.charged", 0, 50, false},
		{"llmgw.cost", 2, 12345, false}, {"llmgw.keepalives", 0, 3, false}, {"llmgw.failovers", 1, 1, false},
		{"gen_ai.client.operation.duration", 0, 0.0078125, false}, {"gen_ai.client.operation.duration", 0, 0.01, false},
		{"gen_ai.client.operation.duration", 1, 0.5, false}, {"gen_ai.client.operation.duration", 1, 100, true},
		{"gen_ai.server.time_to_first_token", 0, 0.25, false}, {"gen_ai.server.time_per_output_token", 0, 0.03125, false},
		{"gen_ai.client.token.usage", 0, 0, false}, {"gen_ai.client.token.usage", 0, 1, false}, {"gen_ai.client.token.usage", 0, 4, false},
		{"gen_ai.client.token.usage", 0, 5, false}, {"gen_ai.client.token.usage", 0, 100000000, false},
		{"gen_ai.client.token.usage", 1, 16, true},
	},
	concurrent: []measurement{
		{"llmgw.requests", 0, 1, false}, {"llmgw.requests", 6, 1, true}, {"gen_ai.client.operation.duration", 0, 0.125, false},
		{"gen_ai.client.token.usage", 1, 64, false}, {"llmgw.streams.open", 0, 1, false}, {"llmgw.streams.open", 0, -1, true},
		{"gen_ai.server.time_to_first_token", 2, 3.5, true},
	},
}, {
	once: []measurement{
		{"llmgw.requests", 0, 1, false}, {"llmgw.requests", 1, 1, false},
		{"gen_ai.client.operation.duration", 2, 1.5, false}, {"gen_ai.client.token.usage", 0, 7, false},
		{"llmgw.streams.open", 0, -1, false}, {"llmgw.keepalives", 3, 2, true},
	},
	concurrent: []measurement{
		{"llmgw.requests", 0, 1, false}, {"gen_ai.server.time_to_first_token", 2, 0.75, false},
		{"gen_ai.client.token.usage", 1, 1024, true}, {"llmgw.streams.open", 2, 1, false},
	},
}}

// TestAggregationIsTheSDKs: the same measurements recorded with the SDK's
// instruments, defined as instruments.go defines them, and with the
// aggregation collect to the same metrics (timestamps and exemplars
// aside), over two collects, for each temporality.
func TestAggregationIsTheSDKs(t *testing.T) {
	t.Parallel()
	const limit = 6
	allDelta := func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality }
	for _, c := range []struct {
		name        string
		temporality sdkmetric.TemporalitySelector
	}{
		{"cumulative", sdkmetric.DefaultTemporalitySelector},
		{"delta", deltaTemporality},
		{"delta_up_down_counter_too", allDelta},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			reader := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(c.temporality))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithCardinalityLimit(limit))
			agg := newAggregation(c.temporality, limit)
			if _, err := newInstruments(noop.NewMeterProvider().Meter(scope), agg); err != nil {
				t.Fatal(err)
			}
			sdk := sdkInstruments(t, mp.Meter(scope), agg)
			ours := map[string]func(*attrSet, float64){}
			for _, m := range agg.metrics {
				ours[m.describe().name] = aggRecorder(m)
			}
			// One attrSet per metric and set, as the memo keeps one per key.
			sets := map[measurement]*attrSet{}
			attrs := func(n int) []attribute.KeyValue {
				return []attribute.KeyValue{attribute.String("llmgw.tenant.id", fmt.Sprint("t", n)), attribute.Int("n", n)}
			}
			for _, m := range slices.Concat(aggregationCycles[0].once, aggregationCycles[0].concurrent, aggregationCycles[1].once, aggregationCycles[1].concurrent) {
				sets[measurement{metric: m.metric, set: m.set}] = newAttrSet(attrs(m.set)...)
			}
			record := func(m measurement) {
				set := attribute.NewSet(attrs(m.set)...)
				sdk[m.metric](set, m.v)
				a := sets[measurement{metric: m.metric, set: m.set}]
				if m.fresh {
					a = newAttrSet(attrs(m.set)...)
				}
				ours[m.metric](a, m.v)
			}
			var starts []metricdata.ScopeMetrics
			for cycle, ms := range aggregationCycles {
				for _, m := range ms.once {
					record(m)
				}
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for range 50 {
							for _, m := range ms.concurrent {
								record(m)
							}
						}
					})
				}
				wg.Wait()
				var want metricdata.ResourceMetrics
				if err := reader.Collect(ctx, &want); err != nil {
					t.Fatal(err)
				}
				got, err := agg.Produce(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(want.ScopeMetrics) != 1 || len(got) != 1 {
					t.Fatalf("cycle %d: %d scopes, the SDK's %d", cycle, len(got), len(want.ScopeMetrics))
				}
				if ws, gs := want.ScopeMetrics[0].Scope, got[0].Scope; !sameScope(ws, gs) {
					t.Errorf("scope %v, the SDK's %v", gs, ws)
				}
				byName := func(ms []metricdata.Metrics) map[string]metricdata.Metrics {
					out := map[string]metricdata.Metrics{}
					for _, m := range ms {
						out[m.Name] = m
					}
					return out
				}
				w, g := byName(want.ScopeMetrics[0].Metrics), byName(got[0].Metrics)
				if len(w) != len(g) {
					t.Errorf("cycle %d: metrics %v, the SDK's %v", cycle, keys(g), keys(w))
				}
				for name, wm := range w {
					metricdatatest.AssertEqual(t, wm, g[name], metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
				}
				starts = append(starts, got[0])
			}
			checkStartTimes(t, starts, c.temporality)
		})
	}
}

// checkStartTimes: a cumulative point starts where the first cycle's did;
// a delta point of the second cycle where the first cycle was collected.
func checkStartTimes(t *testing.T, cycles []metricdata.ScopeMetrics, temporality sdkmetric.TemporalitySelector) {
	t.Helper()
	first := cycles[0].Metrics[0].Data.(metricdata.Histogram[int64]).DataPoints[0]
	for _, m := range cycles[1].Metrics {
		var start any
		var kind sdkmetric.InstrumentKind
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			start, kind = d.DataPoints[0].StartTime, sdkmetric.InstrumentKindCounter
			if !d.IsMonotonic {
				kind = sdkmetric.InstrumentKindUpDownCounter
			}
		case metricdata.Histogram[int64]:
			start, kind = d.DataPoints[0].StartTime, sdkmetric.InstrumentKindHistogram
		case metricdata.Histogram[float64]:
			start, kind = d.DataPoints[0].StartTime, sdkmetric.InstrumentKindHistogram
		}
		want := first.StartTime
		if temporality(kind) == metricdata.DeltaTemporality {
			want = first.Time
		}
		if start != want {
			t.Errorf("%s starts at %v, want %v", m.Name, start, want)
		}
	}
}

func keys(m map[string]metricdata.Metrics) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sdkInstruments are the SDK's instruments of the aggregation's metrics,
// by name.
func sdkInstruments(t *testing.T, m metric.Meter, agg *aggregation) map[string]func(attribute.Set, float64) {
	t.Helper()
	ctx := context.Background()
	out := map[string]func(attribute.Set, float64){}
	for _, a := range agg.metrics {
		d := a.describe()
		unit, desc := metric.WithUnit(d.unit), metric.WithDescription(d.description)
		var err error
		switch {
		case d.kind == sdkmetric.InstrumentKindCounter:
			var c metric.Int64Counter
			c, err = m.Int64Counter(d.name, unit, desc)
			out[d.name] = func(s attribute.Set, v float64) { c.Add(ctx, int64(v), metric.WithAttributeSet(s)) }
		case d.kind == sdkmetric.InstrumentKindUpDownCounter:
			var c metric.Int64UpDownCounter
			c, err = m.Int64UpDownCounter(d.name, unit, desc)
			out[d.name] = func(s attribute.Set, v float64) { c.Add(ctx, int64(v), metric.WithAttributeSet(s)) }
		case d.kind == sdkmetric.InstrumentKindHistogram && d.integer:
			var h metric.Int64Histogram
			h, err = m.Int64Histogram(d.name, unit, desc, metric.WithExplicitBucketBoundaries(d.bounds...))
			out[d.name] = func(s attribute.Set, v float64) { h.Record(ctx, int64(v), metric.WithAttributeSet(s)) }
		case d.kind == sdkmetric.InstrumentKindHistogram:
			var h metric.Float64Histogram
			h, err = m.Float64Histogram(d.name, unit, desc, metric.WithExplicitBucketBoundaries(d.bounds...))
			out[d.name] = func(s attribute.Set, v float64) { h.Record(ctx, v, metric.WithAttributeSet(s)) }
		default:
			t.Fatalf("%s: kind %v", d.name, d.kind)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// aggRecorder adds or records v with the aggregated metric m.
func aggRecorder(m aggregated) func(*attrSet, float64) {
	switch m := m.(type) {
	case *sumAgg:
		return func(a *attrSet, v float64) { m.add(a, int64(v)) }
	case *histAgg[int64]:
		return func(a *attrSet, v float64) { m.record(a, int64(v)) }
	case *histAgg[float64]:
		return func(a *attrSet, v float64) { m.record(a, v) }
	}
	panic(fmt.Sprintf("%T", m))
}

// TestInstrumentsAreEveryMetric: every metric a request records is
// aggregated, under the names the dashboards query.
func TestInstrumentsAreEveryMetric(t *testing.T) {
	t.Parallel()
	agg := newAggregation(sdkmetric.DefaultTemporalitySelector, 0)
	if _, err := newInstruments(noop.NewMeterProvider().Meter(scope), agg); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range agg.metrics {
		names = append(names, m.describe().name)
	}
	slices.Sort(names)
	want := "gen_ai.client.operation.duration gen_ai.client.token.usage gen_ai.server.time_per_output_token gen_ai.server.time_to_first_token " +
		"llmgw.budget.decisions llmgw.budget.tokens.charged llmgw.budget.tokens.reserved llmgw.cost llmgw.failovers llmgw.keepalives " +
		"llmgw.limiter.decisions llmgw.requests llmgw.streams.open"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("aggregated %s\nwant       %s", got, want)
	}
}
