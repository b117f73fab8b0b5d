package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
	"github.com/llmgw/gateway/internal/testing/otelcoltest"
	"github.com/llmgw/gateway/scripts/stub"
)

// otelEnv points the gateway at col, with the periodic metric export an
// hour away: whatever the collector receives came from a flush.
func otelEnv(col *otelcoltest.Collector) map[string]string {
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": col.URL,
		"OTEL_TRACES_SAMPLER":         "parentbased_always_on", // every request's spans, to check them
		"OTEL_METRIC_EXPORT_INTERVAL": "3600000",
		"OTEL_SERVICE_NAME":           "llmgw-test",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=test",
	}
}

// usageOf is the usage a backend reported in a stream's usage chunk or a
// JSON answer (input_tokens/output_tokens for the Responses API).
func usageOf(t *testing.T, b []byte) (in, out int64) {
	t.Helper()
	var u struct {
		Usage *struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
			Input      int64 `json:"input_tokens"`
			Output     int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	for _, d := range append(sseData(b), string(b)) {
		if json.Unmarshal([]byte(d), &u) == nil && u.Usage != nil {
			return u.Usage.Prompt + u.Usage.Input, u.Usage.Completion + u.Usage.Output
		}
	}
	t.Fatalf("no usage in %s", b)
	return 0, 0
}

// sumPoints adds the values (Int, or a histogram's Sum) of the points of
// metric whose attributes include want.
func sumPoints(points []otelcoltest.Point, metric string, want map[string]string) (total float64, n int) {
	for _, p := range points {
		if p.Metric != metric {
			continue
		}
		ok := true
		for k, v := range want {
			if p.Attrs[k] != v {
				ok = false
			}
		}
		if !ok {
			continue
		}
		n++
		if p.Count > 0 {
			total += p.Sum
		} else {
			total += float64(p.Int) + p.Double
		}
	}
	return total, n
}

// TestTelemetryCollector sends a failed-over streamed chat (with the
// caller's traceparent), a Responses call and two requests of a tenant
// whose bucket holds one, then stops the gateway as SIGTERM does. The
// metric export interval is an hour, so everything the real collector
// holds afterwards left in the flush at the stop: token counts equal to
// the backend's usage by gen_ai.token.type, the limiter's decisions by
// tenant, the failovers, the caller's trace id on the server span, and the
// two client spans (the dead endpoint's and the stub's) under it.
func TestTelemetryCollector(t *testing.T) {
	t.Parallel()
	col := otelcoltest.Start(t)
	g := startGateway(t, options{
		deadURL: true,
		env:     otelEnv(col),
		tenants: "  - {id: tiny, name: Tiny Corp, models: [llama], requests: 1, interval: 1h}\n" +
			strings.Replace(budgetRow(1_000_000, 64), "}\n", `, spend_per_month: "100"}`+"\n", 1),
		// One micro-unit a token: llmgw.cost is the budgeted tenant's tokens.
		extra: "telemetry: {trust_traceparent: true}\n" +
			`prices: {currency: USD, version: t, models: [{model: llama, input: "1", output: "1"}, {model: gpt-4o, input: "1", output: "1"}]}` + "\n",
	})
	tok := g.token("contoso")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := g.post("/v1/chat/completions", tok,
		`{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`,
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	chat, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, chat)
	}
	chatIn, chatOut := usageOf(t, chat)
	if g.accessLog(resp.Header.Get("X-Request-Id"))["attempts"] != 2.0 {
		t.Fatal("the chat did not fail over")
	}
	sent := g.Stubs[0].LastRequest().Header.Get("Traceparent")
	if !strings.HasPrefix(sent, "00-"+traceID+"-") || strings.Contains(sent, "00f067aa0ba902b7") {
		t.Fatalf("backend got traceparent %q: want the caller's trace, the gateway's span", sent)
	}

	resp = g.post("/v1/responses", tok, `{"model":"llama","input":"hi"}`)
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("responses: %d %s", resp.StatusCode, rb)
	}
	respIn, respOut := usageOf(t, rb)

	tiny := g.token("tiny")
	for i, want := range []int{200, 429} {
		resp = g.post("/v1/chat/completions", tiny, `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("tiny request %d: status %d, want %d", i, resp.StatusCode, want)
		}
	}

	resp = g.post("/v1/chat/completions", g.token("budgeted"), `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
	bb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("budgeted: %d %s", resp.StatusCode, bb)
	}
	budIn, budOut := usageOf(t, bb)

	if p, s, _ := col.Received(); len(p)+len(s) != 0 {
		t.Fatalf("the collector got %d points and %d spans before the stop: the export interval is an hour", len(p), len(s))
	}
	g.Stop() // what SIGTERM does
	select {
	case <-g.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not stop")
	}
	flushed := false
	for _, l := range g.logs.Lines() {
		var m struct {
			Msg, Why string
			FlushMs  float64 `json:"flush_ms"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "telemetry flushed" && m.Why == "shutdown" {
			flushed = true
			t.Logf("flush at the stop: %.2f ms", m.FlushMs)
		}
	}
	if !flushed {
		t.Fatalf("no flush at the stop:\n%s", g.logs.String())
	}
	points, spans, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}

	chatAttrs := map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "llama",
		"gen_ai.provider.name": "vllm", "gen_ai.response.model": "meta/Llama-3.1-8B", "llmgw.tenant.id": "contoso"}
	with := func(extra ...string) map[string]string {
		m := map[string]string{}
		for k, v := range chatAttrs {
			m[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name, metric string
		attrs        map[string]string
		want         float64
		points       int
	}{
		{"input tokens", "gen_ai.client.token.usage", with("gen_ai.token.type", "input"), float64(chatIn + respIn + 0), -1},
		{"output tokens", "gen_ai.client.token.usage", with("gen_ai.token.type", "output"), float64(chatOut + respOut), -1},
		{"limiter allowed tiny", "llmgw.limiter.decisions", map[string]string{"llmgw.decision": "allowed", "llmgw.tenant.id": "tiny", "llmgw.tenant.name": "Tiny Corp"}, 1, 1},
		{"limiter refused tiny", "llmgw.limiter.decisions", map[string]string{"llmgw.decision": "refused", "llmgw.tenant.id": "tiny"}, 1, 1},
		{"429 by route", "llmgw.requests", map[string]string{"http.route": "/v1/chat/completions", "http.response.status_code": "429", "error.type": "rate_limit_exceeded", "llmgw.tenant.id": "tiny"}, 1, 1},
		// Both of contoso's requests try the dead endpoint first: one
		// request's failure no longer benches it for everyone (five in a
		// row across requests do), so each fails over once.
		{"failovers", "llmgw.failovers", map[string]string{"llmgw.tenant.id": "contoso"}, 2, 1},
		{"budget reserved", "llmgw.budget.decisions", map[string]string{"llmgw.decision": "reserved", "llmgw.tenant.id": "budgeted"}, 1, 1},
		{"budget charged", "llmgw.budget.tokens.charged", map[string]string{"llmgw.tenant.id": "budgeted"}, float64(budIn + budOut), 1},
		{"cost", "llmgw.cost", map[string]string{"llmgw.tenant.id": "budgeted", "gen_ai.request.model": "llama", "llmgw.service_tier": "standard", "llmgw.currency": "USD"}, float64(budIn + budOut), 1},
		{"streams closed", "llmgw.streams.open", map[string]string{"llmgw.pool": "pool-a"}, 0, 1},
	} {
		got, n := sumPoints(points, c.metric, c.attrs)
		if got != c.want || n == 0 || (c.points > 0 && n != c.points) {
			t.Errorf("%s: %s%v = %v over %d points, want %v", c.name, c.metric, c.attrs, got, n, c.want)
		}
	}
	if _, n := sumPoints(points, "gen_ai.server.time_to_first_token", with()); n != 1 {
		t.Errorf("time_to_first_token: %d points for the one stream", n)
	}
	if _, n := sumPoints(points, "llmgw.cold_start.ready", map[string]string{"llmgw.host": "http"}); n != 1 {
		t.Errorf("cold_start.ready: %d points", n)
	}
	for _, p := range points {
		if p.Resource["service.name"] != "llmgw-test" || p.Resource["deployment.environment.name"] != "test" {
			t.Fatalf("resource %v", p.Resource)
		}
	}

	var server *otelcoltest.Span
	for i, s := range spans {
		if s.TraceID == traceID && s.Kind == 2 {
			server = &spans[i]
		}
	}
	if server == nil {
		t.Fatalf("no server span in the caller's trace among %d spans", len(spans))
	}
	if server.Name != "chat llama" || server.Attrs["gen_ai.usage.output_tokens"] != strconv.FormatInt(chatOut, 10) || server.ParentSpanID != "00f067aa0ba902b7" {
		t.Errorf("server span %+v", *server)
	}
	var clients []otelcoltest.Span
	for _, s := range spans {
		if s.Kind == 3 && s.ParentSpanID == server.SpanID {
			clients = append(clients, s)
		}
	}
	if len(clients) != 2 || clients[0].Attrs["error.type"] == "" || clients[1].Attrs["error.type"] != "" || clients[1].Attrs["http.response.status_code"] != "200" {
		t.Fatalf("client spans under the server span: %+v", clients)
	}
	if !strings.HasSuffix(sent, clients[1].SpanID+"-01") {
		t.Errorf("backend's traceparent %q is not the answering attempt's span %s", sent, clients[1].SpanID)
	}
	for _, s := range spans {
		for k, v := range s.Attrs {
			if strings.Contains(v, "hello there") || strings.Contains(v, backendKey) || strings.Contains(strings.ToLower(k), "prompt") {
				t.Errorf("span %s exports %s=%q", s.Name, k, v)
			}
		}
	}
}

// TestTelemetryUntrustedTraceparent: by default a caller's traceparent is
// not continued; its request gets a trace of its own.
func TestTelemetryUntrustedTraceparent(t *testing.T) {
	t.Parallel()
	col := otelcoltest.Start(t)
	g := startGateway(t, options{env: otelEnv(col)})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	resp := g.post("/v1/chat/completions", g.token("contoso"), `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`,
		"traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sent := g.Stubs[0].LastRequest().Header.Get("Traceparent")
	if sent == "" || strings.Contains(sent, traceID) {
		t.Fatalf("backend got traceparent %q: want a trace of the gateway's own", sent)
	}
	g.Stop()
	<-g.Exited
	_, spans, err := col.Received()
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the server's and the client's", len(spans))
	}
	for _, s := range spans {
		if s.TraceID == traceID || (s.Kind == 2 && s.ParentSpanID != "") {
			t.Fatalf("span continues the caller's trace: %+v", s)
		}
	}
}

// TestTelemetryLambdaFlush runs the gateway binary as a Lambda function:
// when an invocation's response stream has ended, the collector already
// holds that request's metrics and spans (the flush runs before the
// stream's end, so nothing waits for a sandbox Lambda may freeze).
func TestTelemetryLambdaFlush(t *testing.T) {
	t.Parallel()
	col := otelcoltest.Start(t)
	g := startGateway(t, options{env: otelEnv(col), extra: "log_level: debug\n"})
	if testing.Short() {
		t.Skip("-short: builds and runs the gateway binary")
	}
	rt := lambdatest.StartRuntimeAPI(t)
	fn := lambdatest.StartFunction(t, gatewayBinary(t), functionEnv(g, rt.Env()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 1; i <= 2; i++ {
		body := `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		inv := invoke(t, ctx, rt, newRequest(t, "POST", "/v1/chat/completions", g.token("contoso"), body), time.Time{})
		res, err := inv.Wait(ctx)
		if err != nil || res.ErrorType() != "" {
			t.Fatalf("invocation %d: %v %q", i, err, res.ErrorType())
		}
		_, stream, err := lambdatest.ParseStreamingResponse(bytes.NewReader(res.Body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(stream)
		_, out := usageOf(t, b)
		// No waiting: the invocation is over, so the export must be too.
		points, spans, err := col.Received()
		if err != nil {
			t.Fatal(err)
		}
		// Metrics are cumulative: invocation i's export holds i requests.
		got, _ := sumPoints(points, "gen_ai.client.token.usage", map[string]string{"gen_ai.token.type": "output", "llmgw.tenant.id": "contoso"})
		var last float64
		for _, p := range points {
			if p.Metric == "gen_ai.client.token.usage" && p.Attrs["gen_ai.token.type"] == "output" {
				last = p.Sum
			}
		}
		if last != float64(int64(i)*out) || got == 0 {
			t.Fatalf("invocation %d: the collector's last output-token sum is %v, want %d", i, last, int64(i)*out)
		}
		servers := 0
		for _, s := range spans {
			if s.Kind == 2 {
				servers++
			}
		}
		if servers != i {
			t.Fatalf("after invocation %d the collector holds %d server spans", i, servers)
		}
	}
	// What the flush cost each invocation (its stream's end waited for it;
	// the log line may follow the stream's end by a moment: read the
	// process's output until both are there, 5 s at most).
	var flushes []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		flushes = flushes[:0]
		for _, l := range strings.Split(fn.Output(), "\n") {
			var m struct {
				Msg, Why string
				FlushMs  float64 `json:"flush_ms"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "telemetry flushed" && m.Why == "invocation" {
				flushes = append(flushes, strconv.FormatFloat(m.FlushMs, 'f', 2, 64)+" ms")
			}
		}
		if len(flushes) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	if len(flushes) != 2 {
		t.Fatalf("%d flushes logged for 2 invocations:\n%s", len(flushes), fn.Output())
	}
	t.Logf("flush at the end of each invocation: %v", flushes)
}

// TestTelemetryGRPC exports over OTLP/gRPC to the real collector's gRPC
// receiver, configured as the Azure Container Apps managed agent is given
// to an app (OTEL_EXPORTER_OTLP_ENDPOINT with a trailing slash, and
// OTEL_EXPORTER_OTLP_PROTOCOL=grpc). Its one stream has a slow first token
// and five tokens after it, so the metrics the other tests leave out are
// there too: the keepalives sent while it waited, the cold start to the
// first event, and the time per output token (within the stub's pace).
func TestTelemetryGRPC(t *testing.T) {
	t.Parallel()
	col := otelcoltest.Start(t)
	env := otelEnv(col)
	env["OTEL_EXPORTER_OTLP_ENDPOINT"] = col.GRPCURL
	env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
	const interval = 20 * time.Millisecond
	g := startGateway(t, options{env: env,
		stubOpts:    stub.Options{TTFT: 300 * time.Millisecond, Interval: interval, Tokens: 6},
		upstreamCfg: "upstream: {max_attempts: 3, header_timeout: 5s, keepalive_interval: 40ms}\n"})
	// The gateway runs inside the test binary, so its "process start" is
	// the binary's: whatever ran before this test (on a fresh machine, the
	// collector's first build: minutes) is in the metric. What this test
	// can know is when it sent the request and when it had the answer, each
	// counted from the same start.
	sent := time.Since(processStart)
	token := g.token("contoso")
	resp := g.post("/v1/chat/completions", token,
		`{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	answered := time.Since(processStart)
	if resp.StatusCode != 200 || !strings.Contains(string(b), ": keepalive\n\n") {
		t.Fatalf("stream: %d %q", resp.StatusCode, b)
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
	for _, c := range []struct {
		metric string
		attrs  map[string]string
		want   float64
	}{
		{"gen_ai.client.token.usage", map[string]string{"gen_ai.token.type": "input", "llmgw.tenant.id": "contoso"}, float64(in)},
		{"gen_ai.client.token.usage", map[string]string{"gen_ai.token.type": "output", "llmgw.tenant.id": "contoso"}, float64(out)},
		{"llmgw.requests", map[string]string{"http.route": "/v1/chat/completions", "http.response.status_code": "200"}, 1},
	} {
		if got, n := sumPoints(points, c.metric, c.attrs); got != c.want || n != 1 {
			t.Errorf("%s%v = %v over %d points, want %v", c.metric, c.attrs, got, n, c.want)
		}
	}
	if got, n := sumPoints(points, "llmgw.keepalives", map[string]string{"llmgw.pool": "pool-a"}); got < 1 || n != 1 {
		t.Errorf("llmgw.keepalives = %v over %d points: the stream waited 300ms with keepalives every 40ms", got, n)
	}
	first, n := sumPoints(points, "llmgw.cold_start.first_event", nil)
	ready, _ := sumPoints(points, "llmgw.cold_start.ready", map[string]string{"llmgw.host": "http"})
	// The first event left between the request and the answer's end, and
	// after the stub's first-token wait; a millisecond of slack for the
	// gauge's float seconds.
	const slack = time.Millisecond
	lo, hi := (sent + 300*time.Millisecond - slack).Seconds(), (answered + slack).Seconds()
	if n != 1 || first <= ready || first < lo || first > hi {
		t.Errorf("llmgw.cold_start.first_event = %vs over %d points (ready %vs): want one, after ready, within [%v, %v] (the request was sent %s after the process started, its answer read by %s)",
			first, n, ready, lo, hi, sent, answered)
	}
	tpot, n := sumPoints(points, "gen_ai.server.time_per_output_token", map[string]string{"gen_ai.request.model": "llama"})
	if n != 1 || tpot < interval.Seconds()/2 || tpot > 1 {
		t.Errorf("gen_ai.server.time_per_output_token = %vs over %d points, want about the stub's %v", tpot, n, interval)
	}
	kinds := map[int]int{}
	for _, s := range spans {
		kinds[s.Kind]++
	}
	if kinds[2] != 1 || kinds[3] != 1 {
		t.Errorf("spans by kind %v: want one server span and one client span", kinds)
	}
}
