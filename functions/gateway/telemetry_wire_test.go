package main

import (
	"io"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/otelcoltest"
)

// TestTelemetryGzipDelta: the real collector reads the gateway's own OTLP
// encoding gzipped, with delta temporality and extra headers, as it reads
// it plain (TestTelemetryCollector): token counts equal the backend's
// usage, and the server span is there.
func TestTelemetryGzipDelta(t *testing.T) {
	t.Parallel()
	col := otelcoltest.Start(t)
	env := otelEnv(col)
	env["OTEL_EXPORTER_OTLP_COMPRESSION"] = "gzip"
	env["OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"] = "delta"
	env["OTEL_EXPORTER_OTLP_HEADERS"] = "x-tenant-key=abc%20def"
	g := startGateway(t, options{env: env})
	resp := g.post("/v1/chat/completions", g.token("contoso"),
		`{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	in, out := usageOf(t, b)
	g.Stop()
	select {
	case <-g.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not stop")
	}
	points, spans, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[string]int64{"input": in, "output": out} {
		got, n := sumPoints(points, "gen_ai.client.token.usage", map[string]string{"gen_ai.token.type": typ, "llmgw.tenant.id": "contoso"})
		if n == 0 || got != float64(want) {
			t.Errorf("%s tokens: the collector has %v in %d points, the backend reported %d", typ, got, n, want)
		}
	}
	servers := 0
	for _, s := range spans {
		if s.Kind == 2 && s.Name == "chat llama" {
			servers++
		}
	}
	if servers != 1 {
		t.Errorf("%d server spans named chat llama, want 1 (%d spans)", servers, len(spans))
	}
}
