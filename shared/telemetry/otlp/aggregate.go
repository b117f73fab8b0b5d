package otlp

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// aggregation holds the metrics a request records (counters, the
// up-down counter and histograms) and is the periodic reader's
// sdkmetric.Producer: the SDK's instruments re-read every attribute set on
// every measurement (attribute filtering, the series' map lookups, the
// exemplar reservoir), about 6 µs a request, where here a request adds to
// series whose pointers its memoized attribute sets hold (make bench's telemetry pair, docs/benchmarks.md). What
// it produces is what the SDK's instruments of the same definitions would:
// the same names, units, descriptions, kinds, attributes, temporality
// (the exporter's selector) and cardinality limit (beyond it new sets fold
// into one otel.metric.overflow=true series), in the same instrumentation
// scope. Two things differ: exemplars are not kept, and under delta
// temporality the cardinality limit counts the sets seen since the
// process started, not since the last collect.
type aggregation struct {
	temporality sdkmetric.TemporalitySelector
	limit       int
	metrics     []aggregated
	// mu serializes collects; start is when the aggregation began (every
	// cumulative point's start) and last the previous collect (a delta
	// point's start).
	mu          sync.Mutex
	start, last time.Time
}

var _ sdkmetric.Producer = (*aggregation)(nil)

// aggregated is one metric of the aggregation.
type aggregated interface {
	describe() metricDef
	// collect returns the metric's points under temporality t, false if
	// it has none; a delta collect resets the series.
	collect(t metricdata.Temporality, start, now time.Time) (metricdata.Aggregation, bool)
}

// metricDef is what a metric says about itself: instruments.go defines
// every one, and the tests build the SDK's instruments from the same.
type metricDef struct {
	name, unit, description string
	kind                    sdkmetric.InstrumentKind
	bounds                  []float64 // histograms' explicit bucket boundaries
	integer                 bool      // an Int64 histogram
}

func newAggregation(temporality sdkmetric.TemporalitySelector, limit int) *aggregation {
	now := time.Now()
	return &aggregation{temporality: temporality, limit: limit, start: now, last: now}
}

// Produce collects every metric recorded since the last collect (delta)
// or since the start (cumulative), in the scope of the SDK's meter.
func (g *aggregation) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	var ms []metricdata.Metrics
	for _, m := range g.metrics {
		d := m.describe()
		t := g.temporality(d.kind)
		start := g.start
		if t == metricdata.DeltaTemporality {
			start = g.last
		}
		if data, ok := m.collect(t, start, now); ok {
			ms = append(ms, metricdata.Metrics{Name: d.name, Description: d.description, Unit: d.unit, Data: data})
		}
	}
	g.last = now
	if len(ms) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: scope}, Metrics: ms}}, nil
}

// overflowSet is the SDK's series for measurements past the cardinality
// limit.
var overflowSet = attribute.NewSet(attribute.Bool("otel.metric.overflow", true))

// table is one metric's series by attribute set, in the order they were
// made. A request finds its series through its memoized attrSet; only the
// first measurement with a set, or one with a set past the memo's bound,
// looks here.
type table[S any] struct {
	mu     sync.Mutex
	m      map[attribute.Distinct]*S
	all    []*S
	limit  int
	series func(attribute.Set) *S
}

func (t *table[S]) lookup(set attribute.Set) *S {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.m[set.Equivalent()]; ok {
		return s
	}
	if t.limit > 0 && len(t.m) >= t.limit-1 {
		set = overflowSet
		if s, ok := t.m[set.Equivalent()]; ok {
			return s
		}
	}
	if t.m == nil {
		t.m = make(map[attribute.Distinct]*S)
	}
	s := t.series(set)
	t.m[set.Equivalent()] = s
	t.all = append(t.all, s)
	return s
}

// each is every series made so far (all only grows, so the slice read
// under the lock stays valid).
func (t *table[S]) each() []*S {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.all
}

// attrSet is one memoized attribute set and, for each metric recorded
// with it, that metric's series, found on the set's first measurement.
// The metrics sharing a set use different slots (instruments.go).
type attrSet struct {
	set    attribute.Set
	sums   [2]atomic.Pointer[sumSeries]
	hists  [3]atomic.Pointer[histSeries[float64]]
	tokens atomic.Pointer[histSeries[int64]]
}

func newAttrSet(kv ...attribute.KeyValue) *attrSet {
	// NewSet sorts what it is given: a copy, as metric.WithAttributes makes.
	return &attrSet{set: attribute.NewSet(append([]attribute.KeyValue(nil), kv...)...)}
}

// seriesOf is the series of the metric t in slot, found once per attrSet.
func seriesOf[S any](slot *atomic.Pointer[S], t *table[S], a *attrSet) *S {
	if s := slot.Load(); s != nil {
		return s
	}
	s := t.lookup(a.set)
	slot.Store(s)
	return s
}

// sumAgg is an Int64Counter or an Int64UpDownCounter.
type sumAgg struct {
	def  metricDef
	slot int // attrSet.sums
	table[sumSeries]
}

type sumSeries struct {
	attrs attribute.Set
	n     atomic.Int64
	// used: added to since the last delta collect (or ever, cumulative);
	// the SDK reports a series added 0 to as well.
	used atomic.Bool
}

func (g *aggregation) newSum(def metricDef, slot int) *sumAgg {
	c := &sumAgg{def: def, slot: slot}
	c.limit = g.limit
	c.series = func(s attribute.Set) *sumSeries { return &sumSeries{attrs: s} }
	g.metrics = append(g.metrics, c)
	return c
}

func (c *sumAgg) add(a *attrSet, v int64) {
	s := seriesOf(&a.sums[c.slot], &c.table, a)
	s.n.Add(v)
	if !s.used.Load() {
		s.used.Store(true)
	}
}

func (c *sumAgg) describe() metricDef { return c.def }

func (c *sumAgg) collect(t metricdata.Temporality, start, now time.Time) (metricdata.Aggregation, bool) {
	var pts []metricdata.DataPoint[int64]
	for _, s := range c.each() {
		var v int64
		var used bool
		if t == metricdata.DeltaTemporality {
			// The value first: an add between the two swaps is reported
			// next time, by its value.
			v = s.n.Swap(0)
			used = s.used.Swap(false)
		} else {
			v, used = s.n.Load(), s.used.Load()
		}
		if used || v != 0 {
			pts = append(pts, metricdata.DataPoint[int64]{Attributes: s.attrs, StartTime: start, Time: now, Value: v})
		}
	}
	monotonic := c.def.kind == sdkmetric.InstrumentKindCounter
	return metricdata.Sum[int64]{DataPoints: pts, Temporality: t, IsMonotonic: monotonic}, len(pts) > 0
}

// histAgg is an explicit-bucket histogram with min and max, the SDK's
// default. A series' mutex keeps its count, sum and buckets consistent
// (uncontended, it costs about an atomic add).
type histAgg[N int64 | float64] struct {
	def  metricDef
	slot func(*attrSet) *atomic.Pointer[histSeries[N]]
	table[histSeries[N]]
}

type histSeries[N int64 | float64] struct {
	attrs    attribute.Set
	mu       sync.Mutex
	count    uint64
	sum      N
	min, max N
	buckets  []uint64
}

func newHist[N int64 | float64](g *aggregation, def metricDef, slot func(*attrSet) *atomic.Pointer[histSeries[N]]) *histAgg[N] {
	h := &histAgg[N]{def: def, slot: slot}
	h.limit = g.limit
	h.series = func(s attribute.Set) *histSeries[N] {
		return &histSeries[N]{attrs: s, buckets: make([]uint64, len(def.bounds)+1)}
	}
	g.metrics = append(g.metrics, h)
	return h
}

func (h *histAgg[N]) record(a *attrSet, v N) {
	s := seriesOf(h.slot(a), &h.table, a)
	// Bucket i holds (bounds[i-1], bounds[i]], as the SDK's.
	i := sort.SearchFloat64s(h.def.bounds, float64(v))
	s.mu.Lock()
	if s.count == 0 || v < s.min {
		s.min = v
	}
	if s.count == 0 || v > s.max {
		s.max = v
	}
	s.count++
	s.sum += v
	s.buckets[i]++
	s.mu.Unlock()
}

func (h *histAgg[N]) describe() metricDef { return h.def }

func (h *histAgg[N]) collect(t metricdata.Temporality, start, now time.Time) (metricdata.Aggregation, bool) {
	var pts []metricdata.HistogramDataPoint[N]
	for _, s := range h.each() {
		s.mu.Lock()
		if s.count > 0 {
			pts = append(pts, metricdata.HistogramDataPoint[N]{Attributes: s.attrs, StartTime: start, Time: now,
				Count: s.count, Sum: s.sum, Bounds: h.def.bounds, BucketCounts: append([]uint64(nil), s.buckets...),
				Min: metricdata.NewExtrema(s.min), Max: metricdata.NewExtrema(s.max)})
			if t == metricdata.DeltaTemporality {
				s.count, s.sum = 0, 0
				clear(s.buckets)
			}
		}
		s.mu.Unlock()
	}
	return metricdata.Histogram[N]{DataPoints: pts, Temporality: t}, len(pts) > 0
}
