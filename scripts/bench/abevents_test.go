package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// stampServer streams events stamped as the stub stamps them, and
// records when each request arrived.
type stampServer struct {
	mu       sync.Mutex
	arrivals []time.Time
}

func (s *stampServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.arrivals = append(s.arrivals, time.Now())
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	for range 3 {
		fmt.Fprintf(w, "data: {\"choices\":[],\"stub_emit_ns\":%d}\n\n", time.Now().UnixNano())
		f.Flush()
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (s *stampServer) firstArrival() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.arrivals) == 0 {
		return time.Time{}
	}
	return s.arrivals[0]
}

// TestSwitchedLoop: both sides relay streams and count their own events,
// the second side gets nothing before the ramp is over, and the results
// carry the A/B's mode and level.
func TestSwitchedLoop(t *testing.T) {
	t.Parallel()
	var sides [2]stampServer
	ts := make([]*target, 2)
	for i := range sides {
		srv := httptest.NewServer(&sides[i])
		t.Cleanup(srv.Close)
		ts[i] = &target{name: []string{"gateway", "floor"}[i], base: srv.URL, token: "t", client: newClient(8)}
		t.Cleanup(ts[i].close)
	}
	const ramp, window = 100 * time.Millisecond, 250 * time.Millisecond
	start := time.Now()
	runs := switchedLoop(context.Background(), ts, 4, ramp, window, 2, 10*time.Second)
	if len(runs) != 2 {
		t.Fatalf("got %d results, want 2", len(runs))
	}
	for i, r := range runs {
		if r.target != ts[i].name || r.mode != abEventsMode || r.level != 4 {
			t.Errorf("result %d: target %q mode %q level %d", i, r.target, r.mode, r.level)
		}
		if r.errCount() != 0 || r.done == 0 || r.events < int64(4*r.done) {
			t.Errorf("%s: %d errors (%v), %d streams done, %d events", r.target, r.errCount(), r.errors, r.done, r.events)
		}
		if r.ttft.N != r.done {
			t.Errorf("%s: %d TTFT samples for %d streams", r.target, r.ttft.N, r.done)
		}
	}
	if first := sides[1].firstArrival(); first.IsZero() || first.Before(start.Add(ramp)) {
		t.Errorf("the second side's first stream arrived %v after the start, want after the ramp (%v)", first.Sub(start), ramp)
	}
}
