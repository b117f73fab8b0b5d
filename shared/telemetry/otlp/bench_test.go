package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/telemetry"
)

// BenchmarkRequestTelemetry is what telemetry adds to one non-streaming
// chat request in the gateway, as Container Apps runs it (both signals
// over OTLP/gRPC to a loopback collector that discards): the server span
// begun (Begin), one backend attempt's client span with its traceparent
// written into the backend request (Attempt), and the request's metrics
// and span ended (End), with the batch span processor's export in the
// background (a flush every few hundred spans in the caller's time: a
// loop outruns the background exports). ns/op is the caller's time;
// cpu-ns/op the whole process's CPU per request (the exports and the
// collector included), which is what scripts/bench's telemetry on ÷ off
// target sets beside the gateway's own CPU per request. Per sampler: the
// deploys' (parentbased_traceidratio, one in ten), parentbased_always_on
// and always_off:
//
//	go test -run '^$' -bench RequestTelemetry -benchmem ./shared/telemetry/otlp
func BenchmarkRequestTelemetry(b *testing.B) {
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(discardExport))
	srv.Config.Protocols = &h2c
	srv.Start()
	b.Cleanup(srv.Close)
	for _, s := range []struct {
		name, sampler, ratio string
		// every is how many requests a flush follows: about 400 spans,
		// within the export queue of 2048, so that none is dropped.
		every int
	}{
		{"deployed", "parentbased_traceidratio", "0.1", 2048}, {"always_on", "parentbased_always_on", "", 200}, {"always_off", "always_off", "", 2048},
	} {
		b.Run(s.name, func(b *testing.B) {
			env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_TRACES_SAMPLER": s.sampler, "OTEL_TRACES_SAMPLER_ARG": s.ratio}
			cfg, err := FromEnv(func(k string) string { return env[k] })
			if err != nil {
				b.Fatal(err)
			}
			exp, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _, _ = exp.Shutdown(context.Background()) }()
			in := http.Header{"Authorization": {"Bearer x"}, "Content-Type": {"application/json"}}
			out, err := http.NewRequest(http.MethodPost, "http://backend:8000/v1/chat/completions", http.NoBody)
			if err != nil {
				b.Fatal(err)
			}
			a := telemetry.Attempt{Operation: "chat", Model: "llama", ResponseModel: "meta/llama", Provider: "vllm", ServerAddress: "backend", ServerPort: 8000, Tenant: "t1"}
			r := &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: "t1", TenantName: "One", Limit: telemetry.Allowed,
				Operation: "chat", Model: "llama", ResponseModel: "meta/llama", Pool: "p", Provider: "vllm", ServerAddress: "backend", ServerPort: 8000,
				Usage: true, InputTokens: 12, OutputTokens: 30, Attempts: 1}
			n := 0
			one := func() {
				r.Start = time.Now()
				ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", in)
				clear(out.Header)
				exp.AttemptEnd(exp.Attempt(ctx, out, &a), &a, telemetry.Result{Status: 200})
				r.End = time.Now()
				exp.End(ctx, r)
				// A loop outruns any collector: what is queued is exported
				// here, in the loop's time, so that no span is dropped and
				// every export counts against its requests.
				if n++; n%s.every == 0 {
					if _, err := exp.Flush(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			}
			one()
			cpu0 := processCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				one()
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// discardExport reads an OTLP/gRPC export and answers OK in gRPC's
// trailers-only form, so a benchmark counts the exporter's work and next
// to nothing for a collector.
func discardExport(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h := w.Header()
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{"0"}
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEndMetrics is End's metrics alone (no spans, nothing exported):
// what the aggregation costs a request, serial and from every core at
// once (the series one request adds to are every request's of its kind).
func BenchmarkEndMetrics(b *testing.B) {
	exp, err := New(Config{MetricsURL: "http://127.0.0.1:9/v1/metrics", Interval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = exp.mp.Shutdown(context.Background()) })
	now := time.Now()
	r := &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: "t1", TenantName: "One", Limit: telemetry.Allowed,
		Operation: "chat", Model: "llama", Provider: "vllm", ServerAddress: "backend", ServerPort: 8000, Usage: true, InputTokens: 12, OutputTokens: 30,
		Start: now.Add(-time.Second), FirstEvent: now.Add(-time.Second / 2), End: now}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			exp.End(ctx, r)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				exp.End(ctx, r)
			}
		})
	})
}
