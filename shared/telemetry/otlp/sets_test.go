package otlp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/llmgw/gateway/shared/telemetry"
)

// TestSetsAreTheAttributesBuiltEachTime: a memoized set holds exactly the
// attributes End built for every request before, and a second request
// with the same values gets the very same option.
func TestSetsAreTheAttributesBuiltEachTime(t *testing.T) {
	t.Parallel()
	s := newSets(10)
	k := genaiKey{operation: "chat", provider: "vllm", model: "llama", responseModel: "meta/llama", address: "b", port: 80,
		tenant: tenantKey{"t1", "Tenant One"}, errorType: "upstream_timeout"}
	g := s.genAI(k)
	if s.genAI(k) != g {
		t.Fatal("the same key built its sets twice")
	}
	want := attribute.NewSet(attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "vllm"),
		attribute.String("gen_ai.request.model", "llama"), attribute.String("gen_ai.response.model", "meta/llama"),
		attribute.String("server.address", "b"), attribute.Int("server.port", 80), attribute.String("llmgw.tenant.id", "t1"),
		attribute.String("llmgw.tenant.name", "Tenant One"), attribute.String("error.type", "upstream_timeout"),
		attribute.String("gen_ai.token.type", "output"))
	if got := g.output.set; !got.Equals(&want) {
		t.Errorf("output set %v, want %v", got.ToSlice(), want.ToSlice())
	}
	req := s.request(requestKey{route: "/v1/chat/completions", method: "POST", status: 200, tenant: tenantKey{"t1", ""}}).set
	if v, _ := req.Value("http.response.status_code"); v.AsInt64() != 200 || req.Len() != 6 {
		t.Errorf("request set %v", req.ToSlice())
	}
}

// TestMemoIsBounded: past max distinct keys (a caller's made-up method),
// values are built each time and not kept.
func TestMemoIsBounded(t *testing.T) {
	t.Parallel()
	var m memo[string, string]
	m.max = 2
	builds := 0
	build := func(k string) string { builds++; return k + "!" }
	for _, k := range []string{"a", "b", "c", "a", "c", "c"} {
		if v := m.get(k, build); v != k+"!" {
			t.Fatalf("%s: %s", k, v)
		}
	}
	if len(m.m) != 2 || builds != 5 {
		t.Fatalf("%d kept, %d built: want 2 kept (a, b) and c built each time", len(m.m), builds)
	}
}

func TestParseSampler(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, arg string
		want      string
		ratio     float64
		err       bool
	}{
		{"", "", "parentbased_always_on", 1, false},
		{"", "0.5", "parentbased_always_on", 1, false}, // the argument is a ratio sampler's
		{"parentbased_always_on", "", "parentbased_always_on", 1, false},
		{"always_off", "0.5", "always_off", 1, false},
		{"parentbased_traceidratio", "0.25", "parentbased_traceidratio", 0.25, false},
		{"traceidratio", "", "traceidratio", 1, false},
		{"traceidratio", "1.5", "", 0, true},
		{"traceidratio", "NaN", "", 0, true},
		{"jaeger_remote", "", "", 0, true},
	} {
		got, ratio, err := parseSampler(c.name, c.arg)
		if (err != nil) != c.err || !c.err && (got != c.want || ratio != c.ratio) {
			t.Errorf("%q %q: %q %v %v", c.name, c.arg, got, ratio, err)
		}
		if c.err && !errors.Is(err, ErrSampler) {
			t.Errorf("%q %q: %v is not ErrSampler", c.name, c.arg, err)
		}
	}
}

// TestUnsampledRequestsRecordMetricsNotSpans: with traces sampled off, no
// span is exported, the backend is still told the trace (not sampled),
// and the request's metrics are recorded.
func TestUnsampledRequestsRecordMetricsNotSpans(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", MetricsURL: col.URL + "/v1/metrics", Sampler: "always_off"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", http.Header{})
	if recorded(ctx) != nil {
		t.Fatal("always_off recorded the server span")
	}
	req := httptest.NewRequest("POST", "http://backend/v1/chat/completions", nil)
	a := &telemetry.Attempt{Operation: "chat", Model: "llama"}
	exp.AttemptEnd(exp.Attempt(ctx, req, a), a, telemetry.Result{Status: 200})
	exp.End(ctx, &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: "t1", Operation: "chat", Model: "llama", End: time.Now()})
	if _, err := exp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sent := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(req.Header)))
	if !sent.IsValid() || sent.IsSampled() {
		t.Errorf("traceparent %q: want a valid, unsampled one", req.Header.Get("traceparent"))
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if n := len(col.bodies["/v1/traces"]); n != 0 {
		t.Errorf("%d trace exports, want none", n)
	}
	if n := len(col.bodies["/v1/metrics"]); n != 1 {
		t.Errorf("%d metric exports, want 1", n)
	}
}

// TestEndAllocatesNoAttributeSets: once a request's sets are built, ending
// another like it builds none (the SDK's own work aside: measured
// against ending it with the sets built each time).
func TestEndAllocatesNoAttributeSets(t *testing.T) {
	col := newCollector(t)
	exp, err := New(Config{MetricsURL: col.URL + "/v1/metrics"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	now := time.Now()
	r := &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: "t1", TenantName: "One", Limit: telemetry.Allowed,
		Operation: "chat", Model: "llama", Provider: "vllm", ServerAddress: "b", ServerPort: 80, Usage: true, InputTokens: 5, OutputTokens: 9,
		Start: now.Add(-time.Second), FirstEvent: now.Add(-time.Second / 2), End: now}
	ctx := context.Background()
	exp.End(ctx, r)
	if n := testing.AllocsPerRun(100, func() { exp.End(ctx, r) }); n > 0 {
		t.Errorf("End allocates %v times per request with its sets built", n)
	}
}
