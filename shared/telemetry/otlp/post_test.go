package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/gateway/shared/telemetry"
)

// collector is an OTLP/HTTP receiver on loopback that answers with the
// statuses given, one per request (then 200), and keeps what it got.
type collector struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*http.Request
	bodies   map[string][][]byte // by path, gunzipped
	answers  []func(w http.ResponseWriter)
	n        atomic.Int32
}

func newCollector(t *testing.T, answers ...func(w http.ResponseWriter)) *collector {
	c := &collector{bodies: map[string][][]byte{}, answers: answers}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(c.n.Add(1)) - 1
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			z, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = z
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.requests = append(c.requests, r)
		c.bodies[r.URL.Path] = append(c.bodies[r.URL.Path], b)
		c.mu.Unlock()
		if i < len(c.answers) {
			c.answers[i](w)
		}
	}))
	t.Cleanup(c.Close)
	return c
}

func status(code int, header ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}
}

func testPoster(t *testing.T, url string, gz bool) *poster {
	t.Helper()
	hc, err := httpClient(time.Second, TLSFiles{}, false)
	if err != nil {
		t.Fatal(err)
	}
	p := newPoster(url, map[string]string{"api-key": "k"}, gz, false, hc)
	p.backoff = time.Millisecond
	return p
}

func TestPost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		gzip     bool
		answers  []func(http.ResponseWriter)
		requests int
		err      string
	}{
		{name: "accepted", requests: 1},
		{name: "gzip", gzip: true, requests: 1},
		{name: "503 then 200", answers: []func(http.ResponseWriter){status(503, "Retry-After", "0")}, requests: 2},
		{name: "429, 502, 504 then 200", answers: []func(http.ResponseWriter){status(429), status(502), status(504)}, requests: 4},
		{name: "400 is final", answers: []func(http.ResponseWriter){status(400)}, requests: 1, err: "400 Bad Request: Bad Request"},
		{name: "partial success", answers: []func(http.ResponseWriter){func(w http.ResponseWriter) {
			b := partialAnswer(2, "too old")
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(b)
		}}, requests: 1, err: "partial success: 2 rejected: too old"},
		{name: "empty partial success is success", answers: []func(http.ResponseWriter){func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(partialAnswer(0, ""))
		}}, requests: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			col := newCollector(t, c.answers...)
			p := testPoster(t, col.URL+"/v1/traces", c.gzip)
			body := []byte("\x0a\x02\x08\x01")
			err := p.send(context.Background(), body)
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("err %v, want %q", err, c.err)
			}
			if got := len(col.requests); got != c.requests {
				t.Fatalf("%d requests, want %d", got, c.requests)
			}
			for i, r := range col.requests {
				if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" || r.Header.Get("Api-Key") != "k" ||
					(r.Header.Get("Content-Encoding") == "gzip") != c.gzip || !bytes.Equal(col.bodies["/v1/traces"][i], body) {
					t.Errorf("request %d: %s %v %q", i, r.Method, r.Header, col.bodies["/v1/traces"][i])
				}
			}
		})
	}
}

// TestPostStopsInTime: a retry that would outlast ctx is not waited for,
// and a collector that never answers is cut at ctx's deadline.
func TestPostStopsInTime(t *testing.T) {
	t.Parallel()
	t.Run("retry-after beyond the deadline", func(t *testing.T) {
		t.Parallel()
		col := newCollector(t, status(503, "Retry-After", "30"))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		err := testPoster(t, col.URL, false).send(ctx, []byte{})
		if err == nil || time.Since(start) > time.Second || len(col.requests) != 1 {
			t.Fatalf("err %v after %s, %d requests", err, time.Since(start), len(col.requests))
		}
	})
	t.Run("silent collector", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := testPoster(t, srv.URL, false).send(ctx, []byte{})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 900*time.Millisecond {
			t.Fatalf("err %v after %s", err, time.Since(start))
		}
	})
}

// TestExporterPostsBothSignals drives the Exporter as the gateway does and
// reads both exports back with the generated types.
func TestExporterPostsBothSignals(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", MetricsURL: col.URL + "/v1/metrics", Gzip: true,
		MetricsHeaders: map[string]string{"Authorization": "Bearer m"}, Start: time.Now().Add(-time.Second), BatchDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", http.Header{})
	req := httptest.NewRequest("POST", "http://backend/v1/chat/completions", nil)
	a := &telemetry.Attempt{Operation: "chat", Model: "llama", Provider: "vllm", ServerAddress: "backend", ServerPort: 80}
	exp.AttemptEnd(exp.Attempt(ctx, req, a), a, telemetry.Result{Status: 200})
	now := time.Now()
	exp.End(ctx, &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, Tenant: "t1", Operation: "chat",
		Model: "llama", Usage: true, InputTokens: 7, OutputTokens: 3, Start: now.Add(-time.Second), FirstEvent: now.Add(-time.Second / 2), End: now})
	if _, err := exp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("traceparent") == "" {
		t.Error("no traceparent sent to the backend")
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	var traces tracepb.TracesData
	if b := col.bodies["/v1/traces"]; len(b) != 1 || proto.Unmarshal(b[0], &traces) != nil {
		t.Fatalf("traces: %d exports", len(b))
	}
	spans := traces.ResourceSpans[0].ScopeSpans[0].Spans
	if len(spans) != 2 || spans[0].Name != "chat llama" || spans[1].Name != "chat llama" || !bytes.Equal(spans[0].ParentSpanId, spans[1].SpanId) {
		t.Fatalf("spans %v", spans)
	}
	sent := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(req.Header)))
	if tid, sid := sent.TraceID(), sent.SpanID(); !bytes.Equal(tid[:], spans[0].TraceId) || !bytes.Equal(sid[:], spans[0].SpanId) {
		t.Errorf("traceparent %s is not the client span's", req.Header.Get("traceparent"))
	}
	var metrics metricpb.MetricsData
	if b := col.bodies["/v1/metrics"]; len(b) != 1 || proto.Unmarshal(b[0], &metrics) != nil {
		t.Fatalf("metrics: %d exports", len(b))
	}
	names := map[string]bool{}
	for _, m := range metrics.ResourceMetrics[0].ScopeMetrics[0].Metrics {
		names[m.Name] = true
		if m.Name == "gen_ai.client.token.usage" {
			var sum float64
			for _, p := range m.GetHistogram().DataPoints {
				sum += p.GetSum()
			}
			if sum != 10 {
				t.Errorf("tokens %v, want 7+3", sum)
			}
		}
	}
	for _, n := range []string{"llmgw.requests", "gen_ai.client.token.usage", "gen_ai.client.operation.duration", "gen_ai.server.time_to_first_token", "llmgw.cold_start.first_event"} {
		if !names[n] {
			t.Errorf("no %s in %v", n, names)
		}
	}
	for _, r := range col.requests {
		if r.URL.Path == "/v1/metrics" && r.Header.Get("Authorization") != "Bearer m" {
			t.Error("metrics header not sent")
		}
	}
	var instance bool
	for _, kv := range metrics.ResourceMetrics[0].Resource.Attributes {
		instance = instance || (kv.Key == "service.instance.id" && len(kv.Value.GetStringValue()) == 16)
	}
	if !instance {
		t.Errorf("resource %v: no service.instance.id", metrics.ResourceMetrics[0].Resource)
	}
}

// TestPostTLS: OTEL_EXPORTER_OTLP_CERTIFICATE's CA is the one trusted.
func TestPostTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	hc, err := httpClient(time.Second, TLSFiles{CA: ca}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := newPoster(srv.URL, nil, false, false, hc).send(context.Background(), nil); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	hc, _ = httpClient(time.Second, TLSFiles{}, false)
	if err := newPoster(srv.URL, nil, false, false, hc).send(context.Background(), nil); err == nil {
		t.Fatal("the system roots trusted a test certificate")
	}
	if _, err := httpClient(time.Second, TLSFiles{CA: filepath.Join(t.TempDir(), "missing")}, false); err == nil {
		t.Fatal("a missing CA file passed")
	}
}

// partialAnswer is Export{Trace,Metrics}ServiceResponse{partial_success =
// 1: {rejected = 1, error_message = 2}} (the collector packages' types
// would link gRPC into the tests).
func partialAnswer(rejected int64, msg string) []byte {
	var in []byte
	if rejected != 0 {
		in = protowire.AppendVarint(protowire.AppendTag(in, 1, protowire.VarintType), uint64(rejected))
	}
	if msg != "" {
		in = protowire.AppendString(protowire.AppendTag(in, 2, protowire.BytesType), msg)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), in)
}

// TestPostRetriesADeadConnectionAtOnce: a connection that dies under the
// first request (a collector's idle close, a Lambda thaw) is retried on a
// new one without a backoff; a second death is an error.
func TestPostRetriesADeadConnectionAtOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		kills int32
		err   bool
	}{{"once", 1, false}, {"twice", 2, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) <= c.kills {
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						_ = conn.Close()
					}
				}
			}))
			t.Cleanup(srv.Close)
			p := testPoster(t, srv.URL, false)
			p.backoff = time.Hour // a backoff would show as a test timeout
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := p.send(ctx, []byte("x"))
			if (err != nil) != c.err || n.Load() != min(c.kills+1, 2) {
				t.Fatalf("err %v after %d requests", err, n.Load())
			}
		})
	}
}

// TestNoExportAfterShutdown: both exporters refuse once shut down, and
// send nothing.
func TestNoExportAfterShutdown(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	spans := &spanExporter{sender{post: testPoster(t, col.URL, false)}}
	metrics := newMetricExporter(testPoster(t, col.URL, false), false)
	for _, shut := range []func(context.Context) error{spans.Shutdown, metrics.Shutdown} {
		if err := shut(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	rm := &metricdata.ResourceMetrics{ScopeMetrics: []metricdata.ScopeMetrics{{}}}
	if err := metrics.Export(context.Background(), rm); !errors.Is(err, errShutdown) {
		t.Errorf("metrics: %v", err)
	}
	res := newResource(Config{ServiceName: "llmgw"})
	if err := spans.export(context.Background(), func(b []byte) ([]byte, error) { return appendSpans(b, res, []*span{{name: "s"}}), nil }); !errors.Is(err, errShutdown) {
		t.Errorf("spans: %v", err)
	}
	if n := col.n.Load(); n != 0 {
		t.Errorf("%d requests after shutdown", n)
	}
}

// FuzzPartialSuccess: whatever a collector answers, reading it never
// panics, and what it reports is a partial success or nothing.
func FuzzPartialSuccess(f *testing.F) {
	f.Add(partialAnswer(2, "too old"))
	f.Add(partialAnswer(0, ""))
	f.Add([]byte{0x0a, 0x05, 0x08})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := partialSuccess(b); err != nil && !errors.Is(err, errPartial) {
			t.Fatal(err)
		}
	})
}

// TestPostGzipReused: the gzip writer kept between exports writes each
// export whole, and only it.
func TestPostGzipReused(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	p := testPoster(t, col.URL+"/v1/metrics", true)
	bodies := [][]byte{bytes.Repeat([]byte("long export "), 1000), []byte("short")}
	for _, b := range bodies {
		if err := p.send(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	got := col.bodies["/v1/metrics"]
	if len(got) != 2 || !bytes.Equal(got[0], bodies[0]) || !bytes.Equal(got[1], bodies[1]) {
		t.Fatalf("got %d bodies: %q", len(got), got)
	}
}
