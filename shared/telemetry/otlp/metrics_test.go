package otlp

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/gateway/shared/telemetry"
)

// exportMetrics flushes exp and returns the metrics of the collector's
// latest export by name.
func exportMetrics(t *testing.T, exp *Exporter, col *collector) map[string]*metricpb.Metric {
	t.Helper()
	if _, err := exp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	bodies := col.bodies["/v1/metrics"]
	if len(bodies) == 0 {
		t.Fatal("no metric export")
	}
	var md metricpb.MetricsData
	if err := proto.Unmarshal(bodies[len(bodies)-1], &md); err != nil {
		t.Fatal(err)
	}
	ms := map[string]*metricpb.Metric{}
	for _, rm := range md.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			if sm.Scope.GetName() != scope {
				t.Errorf("scope %q", sm.Scope.GetName())
			}
			for _, m := range sm.Metrics {
				ms[m.Name] = m
			}
		}
	}
	return ms
}

// TestMetricsReachTheCollector: a request of every kind, a failover, a
// stream and the cold start reach the collector as the metrics the
// dashboards query, with their units, kinds and bucket boundaries, under
// the delta preference (counters and histograms as deltas, the up-down
// counter cumulative); the next export has only what stayed cumulative.
func TestMetricsReachTheCollector(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	start := time.Now().Add(-time.Second)
	exp, err := New(Config{MetricsURL: col.URL + "/v1/metrics", Delta: true, Interval: time.Hour, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	ctx := context.Background()
	exp.Ready(ctx, "http", start.Add(time.Second/4))
	exp.Stream(ctx, "p", 1)
	exp.Stream(ctx, "p", 1)
	exp.Stream(ctx, "p", -1)
	a := &telemetry.Attempt{Operation: "chat", Model: "llama", ServerAddress: "dead", Tenant: "t1"}
	req := httptest.NewRequest("POST", "http://dead/v1/chat/completions", nil)
	exp.AttemptEnd(exp.Attempt(ctx, req, a), a, telemetry.Result{Failover: true, ErrorType: "upstream_unavailable"})
	now := time.Now()
	exp.End(ctx, &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: "t1", TenantName: "One",
		Limit: telemetry.Allowed, Budget: "reserved", Reserved: 64, Charged: 12, Cost: 12, Currency: "USD", Tier: "standard",
		Operation: "chat", Model: "llama", Provider: "vllm", ServerAddress: "b", ServerPort: 80, Pool: "p", Keepalives: 2,
		Usage: true, InputTokens: 5, OutputTokens: 7, Start: now.Add(-time.Second), FirstEvent: now.Add(-time.Second / 2), End: now})

	ms := exportMetrics(t, exp, col)
	for _, c := range []struct {
		name, unit, kind string
		bounds           []float64
	}{
		{"gen_ai.client.token.usage", "{token}", "histogram", []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}},
		{"gen_ai.client.operation.duration", "s", "histogram", []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}},
		{"gen_ai.server.time_to_first_token", "s", "histogram", []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}},
		{"gen_ai.server.time_per_output_token", "s", "histogram", []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}},
		{"llmgw.requests", "{request}", "counter", nil},
		{"llmgw.limiter.decisions", "{decision}", "counter", nil},
		{"llmgw.budget.decisions", "{decision}", "counter", nil},
		{"llmgw.budget.tokens.reserved", "{token}", "counter", nil},
		{"llmgw.budget.tokens.charged", "{token}", "counter", nil},
		{"llmgw.cost", "{microunit}", "counter", nil},
		{"llmgw.failovers", "{failover}", "counter", nil},
		{"llmgw.keepalives", "{comment}", "counter", nil},
		{"llmgw.streams.open", "{stream}", "updown", nil},
		{"llmgw.cold_start.ready", "s", "gauge", nil},
		{"llmgw.cold_start.first_event", "s", "gauge", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := ms[c.name]
			if m == nil {
				t.Fatal("not exported")
			}
			if m.Unit != c.unit || m.Description == "" {
				t.Errorf("unit %q, description %q", m.Unit, m.Description)
			}
			delta := metricpb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA
			switch c.kind {
			case "histogram":
				h := m.GetHistogram()
				if h == nil || h.AggregationTemporality != delta || !slices.Equal(h.DataPoints[0].ExplicitBounds, c.bounds) {
					t.Errorf("%v", m)
				}
			case "counter":
				if s := m.GetSum(); s == nil || !s.IsMonotonic || s.AggregationTemporality != delta {
					t.Errorf("%v", m)
				}
			case "updown":
				if s := m.GetSum(); s == nil || s.IsMonotonic || s.AggregationTemporality == delta || s.DataPoints[0].GetAsInt() != 1 {
					t.Errorf("%v", m)
				}
			case "gauge":
				if m.GetGauge() == nil {
					t.Errorf("%v", m)
				}
			}
		})
	}
	if tokens := ms["gen_ai.client.token.usage"].GetHistogram().DataPoints; len(tokens) != 2 || tokens[0].GetSum()+tokens[1].GetSum() != 12 {
		t.Errorf("token usage %v, want 5 and 7 by type", tokens)
	}

	// Nothing recorded since: the deltas have nothing to say, the open
	// streams are still one.
	var names []string
	for n := range exportMetrics(t, exp, col) {
		names = append(names, n)
	}
	slices.Sort(names)
	if got := strings.Join(names, " "); got != "llmgw.streams.open" {
		t.Errorf("second export: %s, want llmgw.streams.open alone", got)
	}
}

// TestMetricsCardinalityLimit: past the limit a metric's new attribute
// sets fold into one otel.metric.overflow=true series (the SDK's
// semantics: the limit counts the overflow series too).
func TestMetricsCardinalityLimit(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	exp, err := New(Config{MetricsURL: col.URL + "/v1/metrics", Interval: time.Hour, CardinalityLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	for i := range 6 {
		exp.End(context.Background(), &telemetry.Request{Route: "/v1/models", Method: http.MethodGet, Status: 200, Tenant: fmt.Sprint("t", i)})
	}
	points := exportMetrics(t, exp, col)["llmgw.requests"].GetSum().GetDataPoints()
	var total, overflow int64
	for _, p := range points {
		total += p.GetAsInt()
		for _, kv := range p.Attributes {
			if kv.Key == "otel.metric.overflow" && kv.Value.GetBoolValue() {
				overflow = p.GetAsInt()
			}
		}
	}
	if len(points) != 3 || total != 6 || overflow != 4 {
		t.Errorf("%d series, %d requests, %d in the overflow: want 3, 6, 4", len(points), total, overflow)
	}
}
