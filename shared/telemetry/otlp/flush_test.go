package otlp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/telemetry"
)

// TestFlushBoundedByFlushTimeout: with a collector that takes every
// export and never answers, Flush and Shutdown give up at flush_timeout
// even when their context has no deadline, and a second Shutdown returns
// at once (a stop after the final flush adds no wait).
func TestFlushBoundedByFlushTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	col := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(col.Close)
	t.Cleanup(func() { close(release) })
	const bound = 200 * time.Millisecond
	exp, err := New(Config{TracesURL: col.URL + "/v1/traces", MetricsURL: col.URL + "/v1/metrics", Sampler: "always_on",
		Interval: time.Hour, Timeout: time.Minute, Settings: telemetry.Settings{FlushTimeout: bound}})
	if err != nil {
		t.Fatal(err)
	}
	exp.End(exp.Begin(context.Background(), http.MethodPost, "/v1/chat/completions", http.Header{}),
		&telemetry.Request{Route: "/v1/chat/completions", Method: http.MethodPost, Status: 200})
	for _, tc := range []struct {
		name string
		call func(context.Context) (time.Duration, error)
	}{{"flush", exp.Flush}, {"shutdown", exp.Shutdown}} { // in order: a flush after the stop has nothing to wait for
		name, call := tc.name, tc.call
		start := time.Now()
		d, err := call(context.Background())
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || d < bound || took > bound+900*time.Millisecond {
			t.Errorf("%s: err %v, said %s, took %s; want the deadline at %s", name, err, d, took, bound)
		}
	}
	if d, err := exp.Shutdown(context.Background()); d != 0 || err != nil {
		t.Errorf("second shutdown: %s, %v; want at once", d, err)
	}
}
