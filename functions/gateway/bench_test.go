package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkGatewayRequest measures whole requests through the in-process
// gateway over loopback HTTP: authentication, tenant, limiter, routing,
// rewrite, the backend round trip to the stub and the relay. allocs/op
// and cpu-us/req count the benchmark's process: the client, the gateway
// and its servers. The stub backend runs as a child process built from
// scripts/cmd/stub (LLMGW_BENCH_STUB: a prebuilt stub binary, or
// "inprocess" for the stub in this process, whose encoding/json per event
// was most of a Responses stream's bytes), so the figures are what the
// gateway allocates and not what the stub does. They compare one tree
// with another, not the gateway alone with nginx (make bench does that).
// The _telemetry cases run the same requests through a second gateway
// exporting both signals to a collector that discards them. Run before
// and after a refactor:
//
//	go test -tags lambda.norpc -run '^$' -bench GatewayRequest -benchmem ./functions/gateway
func BenchmarkGatewayRequest(b *testing.B) {
	stubBin := benchStub(b)
	plain := startGateway(b, options{requests: 1_000_000, interval: "1h", quietLogs: true, stubProcess: stubBin})
	// As Container Apps runs it: both signals to the agent over OTLP/gRPC,
	// traces sampled as the deploys set it, one in ten (the benchmark's
	// own OTEL_TRACES_SAMPLER and _ARG, when set, measure another),
	// metrics exported every minute.
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": discardCollector(b),
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_SERVICE_NAME":           "llmgw-bench",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.1",
	}
	if v := os.Getenv("OTEL_TRACES_SAMPLER"); v != "" {
		env["OTEL_TRACES_SAMPLER"] = v
		delete(env, "OTEL_TRACES_SAMPLER_ARG") // the deploys' ratio is their sampler's
	}
	if v := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); v != "" {
		env["OTEL_TRACES_SAMPLER_ARG"] = v
	}
	traced := startGateway(b, options{requests: 1_000_000, interval: "1h", quietLogs: true, env: env, stubProcess: stubBin})
	cases := []struct{ name, path, body string }{
		{"chat_stream", "/v1/chat/completions", `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"chat_json", "/v1/chat/completions", `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`},
		{"responses_stream", "/v1/responses", `{"model":"gpt-4o-mini","stream":true,"input":"hi"}`},
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, g := range []struct {
		suffix string
		gw     *gw
	}{{"", plain}, {"_telemetry", traced}} {
		tok := g.gw.token("contoso")
		for _, c := range cases {
			b.Run(c.name+g.suffix, func(b *testing.B) {
				do := func() {
					req, err := http.NewRequest(http.MethodPost, g.gw.URL+c.path, strings.NewReader(c.body))
					if err != nil {
						b.Fatal(err)
					}
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Authorization", "Bearer "+tok)
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || n == 0 {
						b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
					}
				}
				do() // warm the connections
				b.ReportAllocs()
				cpu0 := processCPU()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					do()
				}
				b.StopTimer()
				b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/req")
			})
		}
	}
}

// discardCollector is an OTLP/gRPC collector on loopback that reads each
// export and throws it away (a trailers-only OK), so the benchmark counts
// what the gateway spends on telemetry and next to nothing for a sink.
func discardCollector(b *testing.B) string {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	b.Cleanup(srv.Close)
	return srv.URL
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
