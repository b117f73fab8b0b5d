package otlp

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/llmgw/gateway/shared/telemetry"
)

// callerTrace is a caller's sampled traceparent.
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerTrace   = "00-" + callerTraceID + "-00f067aa0ba902b7-01"
)

// TestSamplerDecidesAsTheSDK: for every sampler, each request is recorded exactly
// when the SDK's own sampler records a root of the trace ID the backend
// was told, an unrecorded request tells its backend an unsampled
// traceparent of its own, and a recorded one exports its server and
// client spans under that trace ID, the client span being the backend's
// parent.
func TestSamplerDecidesAsTheSDK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sampler string
		ratio   float64
	}{
		{"parentbased_traceidratio", 0.3},
		{"traceidratio", 0.3},
		{"parentbased_traceidratio", 0},
		{"parentbased_traceidratio", 1},
		{"always_off", 1},
		{"parentbased_always_off", 1},
		{"always_on", 1},
		{"parentbased_always_on", 1},
	} {
		t.Run(tc.sampler, func(t *testing.T) {
			t.Parallel()
			col := newCollector(t)
			exp, err := New(Config{TracesURL: col.URL + "/v1/traces", Sampler: tc.sampler, SamplerRatio: tc.ratio})
			if err != nil {
				t.Fatal(err)
			}
			sdk := sdkSampler(tc.sampler, tc.ratio)
			type sent struct{ tid, sid string }
			records, dropped := map[sent]bool{}, map[string]bool{}
			for i := range 300 {
				// A caller's own sampled traceparent, not trusted: it
				// neither forces a trace nor names one.
				ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", http.Header{"Traceparent": {callerTrace}})
				recording := recorded(ctx) != nil
				req := httptest.NewRequest("POST", "http://backend/v1/chat/completions", nil)
				a := &telemetry.Attempt{Operation: "chat", Model: "llama"}
				exp.AttemptEnd(exp.Attempt(ctx, req, a), a, telemetry.Result{Status: 200})
				exp.End(ctx, &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Operation: "chat", Model: "llama", End: time.Now()})
				sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(req.Header)))
				if !sc.IsValid() || sc.TraceID().String() == callerTraceID {
					t.Fatalf("request %d: backend got traceparent %q, want a valid one of the gateway's own", i, req.Header.Get("Traceparent"))
				}
				want := sdk.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: sc.TraceID(), Name: "x"}).Decision == sdktrace.RecordAndSample
				if sc.IsSampled() != want {
					t.Fatalf("request %d: traceparent %q sampled %v; the SDK's %s samples a root of that trace: %v", i, req.Header.Get("Traceparent"), sc.IsSampled(), sdk.Description(), want)
				}
				if recording != want {
					t.Fatalf("request %d: server span recording %v, want %v", i, recording, want)
				}
				if want {
					records[sent{sc.TraceID().String(), sc.SpanID().String()}] = true
				} else {
					if dropped[sc.SpanID().String()] {
						t.Fatalf("request %d: span ID %s told twice", i, sc.SpanID())
					}
					dropped[sc.SpanID().String()] = true
				}
			}
			// About 90 of 300 at 0.3 (a standard deviation of 8): a
			// decision the SDK remade on another trace ID would record
			// about 27.
			if tc.ratio == 0.3 && (len(records) < 45 || len(records) > 135) {
				t.Fatalf("ratio 0.3 recorded %d of 300 requests, want about 90", len(records))
			}
			if _, err := exp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			// Every recorded request exported its two spans under the
			// trace the backend was told, and nothing else was exported.
			servers, clients := map[string]bool{}, map[sent]bool{}
			for _, s := range exported(t, col) {
				tid := hex.EncodeToString(s.TraceId)
				switch s.Kind {
				case tracepb.Span_SPAN_KIND_SERVER:
					servers[tid] = true
				case tracepb.Span_SPAN_KIND_CLIENT:
					clients[sent{tid, hex.EncodeToString(s.SpanId)}] = true
				}
			}
			if len(servers) != len(records) || len(clients) != len(records) {
				t.Errorf("exported %d server and %d client spans; %d requests recorded", len(servers), len(clients), len(records))
			}
			for s := range records {
				if !servers[s.tid] || !clients[s] {
					t.Errorf("recorded trace %s (backend's parent %s): server span exported %v, client span %v", s.tid, s.sid, servers[s.tid], clients[s])
				}
			}
		})
	}
}

// TestUnsampledCallerTraceKeepsItsState: a trusted caller's trace that
// its sampler dropped reaches the backend as the caller's trace, dropped,
// with its tracestate.
func TestUnsampledCallerTraceKeepsItsState(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", Sampler: "parentbased_traceidratio", SamplerRatio: 1e-9, Settings: telemetry.Settings{TrustTraceparent: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	const traceID = callerTraceID
	for _, tc := range []struct{ flags, state string }{{"00", "vendor=abc"}, {"00", ""}, {"01", "vendor=abc"}} {
		in := http.Header{"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-" + tc.flags}}
		if tc.state != "" {
			in.Set("Tracestate", tc.state)
		}
		ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", in)
		req := httptest.NewRequest("POST", "http://backend/v1/chat/completions", nil)
		a := &telemetry.Attempt{Operation: "chat", Model: "llama"}
		exp.AttemptEnd(exp.Attempt(ctx, req, a), a, telemetry.Result{Status: 200})
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(req.Header)))
		if sc.TraceID().String() != traceID || sc.IsSampled() != (tc.flags == "01") || req.Header.Get("Tracestate") != tc.state {
			t.Errorf("caller %s/%q: backend got traceparent %q tracestate %q; want the caller's trace, sampled %v, its tracestate",
				tc.flags, tc.state, req.Header.Get("Traceparent"), req.Header.Get("Tracestate"), tc.flags == "01")
		}
		if sc.SpanID().String() == "00f067aa0ba902b7" {
			t.Errorf("caller %s/%q: backend's parent is the caller's span, want the gateway's", tc.flags, tc.state)
		}
	}
}

// sdkSampler is the SDK's sampler of that name, the one the gateway's
// decides as.
func sdkSampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// TestSamplerIsTheSDKs: every sampler decides every span as the SDK's
// of the same name: a root, and a child of a remote or local parent,
// sampled or not, over trace IDs drawn at random.
func TestSamplerIsTheSDKs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"} {
		for _, ratio := range []float64{0, 1e-9, 0.1, 0.5, 0.999, 1, 2} {
			ours, sdk := newSampler(name, ratio), sdkSampler(name, ratio)
			for i := range 400 {
				tid := newTraceID()
				parents := []trace.SpanContext{{}}
				for _, remote := range []bool{false, true} {
					for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled} {
						parents = append(parents, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, Remote: remote}))
					}
				}
				for _, p := range parents {
					ctx := trace.ContextWithSpanContext(context.Background(), p)
					want := sdk.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: "x"}).Decision == sdktrace.RecordAndSample
					if got := ours.records(p, tid); got != want {
						t.Fatalf("%q %v, trace %d %s, parent %v (remote %v, sampled %v): records %v, the SDK's %v",
							name, ratio, i, tid, p.IsValid(), p.IsRemote(), p.IsSampled(), got, want)
					}
				}
			}
		}
	}
}
