package otlp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/llmgw/gateway/shared/telemetry"
)

// exported is every span the collector received, in order.
func exported(t *testing.T, col *collector) []*tracepb.Span {
	t.Helper()
	col.mu.Lock()
	defer col.mu.Unlock()
	var out []*tracepb.Span
	for _, b := range col.bodies["/v1/traces"] {
		td := new(tracepb.TracesData)
		if err := proto.Unmarshal(b, td); err != nil {
			t.Fatal(err)
		}
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				out = append(out, ss.Spans...)
			}
		}
	}
	return out
}

// request records one request with one attempt.
func request(exp *Exporter) {
	ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", http.Header{})
	req := httptest.NewRequest("POST", "http://backend/v1/chat/completions", nil)
	a := &telemetry.Attempt{Operation: "chat", Model: "llama"}
	exp.AttemptEnd(exp.Attempt(ctx, req, a), a, telemetry.Result{Status: 200})
	exp.End(ctx, &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, End: time.Now()})
}

// waitFor polls cond until it holds, failing t after a generous bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s", what)
		}
	}
}

// held is a gate a collector's answer waits on, and what opens it, once:
// a test also opens it in a cleanup registered after the exporter's and
// the collector's (cleanups run last first: they wait for that answer).
func held() (<-chan struct{}, func()) {
	c := make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(c) }) }
	return c, let
}

// TestFullBatchExportsAtOnce: a full batch goes out without waiting for
// the schedule delay; the rest waits for it, or for Flush.
func TestFullBatchExportsAtOnce(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", Sampler: "always_on", BatchSize: 4, QueueSize: 16, BatchDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	request(exp)
	request(exp) // four spans: a batch
	waitFor(t, "the full batch's export", func() bool { return col.n.Load() == 1 })
	request(exp)
	if n := exp.spans.pending(); n != 2 {
		t.Fatalf("%d spans pending, want the last request's 2", n)
	}
	if _, err := exp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exported(t, col); len(got) != 6 || col.n.Load() != 2 {
		t.Fatalf("%d spans in %d exports, want 6 in 2", len(got), col.n.Load())
	}
}

// TestFullQueueDropsAndSays: while an export is stuck, spans beyond the
// queue are dropped (never blocking the request), and the next export
// says how many; nothing queued is lost.
func TestFullQueueDropsAndSays(t *testing.T) {
	t.Parallel()
	release, let := held()
	col := newCollector(t, func(w http.ResponseWriter) { <-release })
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", Sampler: "always_on", BatchSize: 2, QueueSize: 4, BatchDelay: time.Hour, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	t.Cleanup(let)
	// The background export, not Flush, may be the one to say.
	var mu sync.Mutex
	var said []error
	exp.spans.onError = func(err error) { mu.Lock(); said = append(said, err); mu.Unlock() }
	request(exp) // a batch: the loop takes it and its export hangs
	waitFor(t, "the first export", func() bool { return col.n.Load() == 1 && exp.spans.pending() == 0 })
	start := time.Now()
	request(exp)
	request(exp) // the queue is full
	request(exp) // dropped
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("requests took %v with the export stuck", d)
	}
	if n := exp.spans.pending(); n != 4 {
		t.Fatalf("%d spans pending, want the queue's 4", n)
	}
	let()
	_, err = exp.Flush(context.Background())
	waitFor(t, "every export", func() bool { return col.n.Load() == 3 })
	waitFor(t, "the 2 dropped spans reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		all := errors.Join(append(said, err)...)
		return all != nil && strings.Contains(all.Error(), "2 spans dropped")
	})
	if got := exported(t, col); len(got) != 6 {
		t.Fatalf("%d spans exported, want 6", len(got))
	}
}

// TestFlushWaitsForTheExportInFlight: a Flush returns only once the
// batch the background export took off the queue is sent (on Lambda the
// sandbox may freeze when the flush returns).
func TestFlushWaitsForTheExportInFlight(t *testing.T) {
	t.Parallel()
	release, let := held()
	col := newCollector(t, func(w http.ResponseWriter) { <-release })
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", Sampler: "always_on", BatchSize: 2, BatchDelay: time.Hour, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = exp.Shutdown(context.Background()) })
	t.Cleanup(let)
	request(exp) // a batch: the loop takes it and its export hangs
	waitFor(t, "the background export", func() bool { return col.n.Load() == 1 && exp.spans.pending() == 0 })
	flushed := make(chan error, 1)
	go func() {
		_, err := exp.Flush(context.Background())
		flushed <- err
	}()
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned (%v) with a batch still on its way", err)
	case <-time.After(200 * time.Millisecond):
	}
	let()
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if got := exported(t, col); len(got) != 2 {
		t.Fatalf("%d spans exported when Flush returned, want 2", len(got))
	}
}

// TestSpansEndOnce: an attempt or request ended twice is one span, and
// a span ended after Shutdown is dropped, not sent.
func TestSpansEndOnce(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", Sampler: "always_on", BatchDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := exp.Begin(context.Background(), "POST", "/v1/chat/completions", http.Header{})
	req := httptest.NewRequest("POST", "http://backend/v1/chat/completions", nil)
	a := &telemetry.Attempt{Operation: "chat", Model: "llama"}
	actx := exp.Attempt(ctx, req, a)
	exp.AttemptEnd(actx, a, telemetry.Result{Status: 200})
	exp.AttemptEnd(actx, a, telemetry.Result{Status: 500})
	r := &telemetry.Request{Route: "/v1/chat/completions", Method: "POST", Status: 200, End: time.Now()}
	exp.End(ctx, r)
	exp.End(ctx, r)
	// The attempt's context holds the client span: End with it ends no
	// server span.
	exp.End(actx, r)
	if _, err := exp.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := exported(t, col)
	if len(got) != 2 || got[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || got[1].Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("exported %v, want one client and one server span", got)
	}
	for _, kv := range got[0].Attributes {
		if kv.Key == "http.response.status_code" && kv.Value.GetIntValue() != 200 {
			t.Errorf("the attempt's second end changed its span: %v", kv)
		}
	}
	if _, err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	request(exp)
	if n := exp.spans.pending(); n != 0 {
		t.Errorf("%d spans queued after shutdown", n)
	}
	exp.spans.mu.Lock()
	if n := exp.spans.dropped; n != 0 {
		t.Errorf("%d spans counted as dropped for a full queue after shutdown", n)
	}
	exp.spans.mu.Unlock()
	if n := col.n.Load(); n != 1 {
		t.Errorf("%d exports, want 1", n)
	}
}
