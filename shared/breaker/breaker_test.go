package breaker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBreaker walks the breaker through its states on a fake clock.
func TestBreaker(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	type step struct {
		at        time.Duration // since t0
		do        string        // "allow", "ok", "fail", "abandon"
		wantOK    bool          // for allow
		wantProbe bool          // for allow
		wantState State         // zero: closed
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"opens after threshold consecutive failures", []step{
			{do: "allow", wantOK: true, wantState: Closed},
			{do: "fail", wantState: Closed},
			{do: "fail", wantState: Closed},
			{do: "fail", wantState: Open},
			{at: time.Second, do: "allow", wantOK: false, wantState: Open},
		}},
		{"a success resets the count", []step{
			{do: "fail", wantState: Closed},
			{do: "fail", wantState: Closed},
			{do: "ok", wantState: Closed},
			{do: "fail", wantState: Closed},
			{do: "fail", wantState: Closed},
			{do: "allow", wantOK: true, wantState: Closed},
		}},
		{"one probe after cooldown, success closes", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: Open},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: HalfOpen},
			{at: 2 * time.Second, do: "allow", wantOK: false, wantState: HalfOpen},
			{at: 2 * time.Second, do: "ok", wantState: Closed},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantState: Closed},
		}},
		{"failed probe reopens for a cooldown", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: Open},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: HalfOpen},
			{at: 2 * time.Second, do: "fail", wantState: Open},
			{at: 3 * time.Second, do: "allow", wantOK: false, wantState: Open},
			{at: 4 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: HalfOpen},
		}},
		{"abandoned probe lets the next take probe", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: Open},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: HalfOpen},
			{at: 2 * time.Second, do: "abandon", wantState: Open},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: HalfOpen},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := New(3, 2*time.Second)
			probe := false
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.do {
				case "allow":
					p, ok := b.Allow(now)
					if ok != s.wantOK || p != s.wantProbe {
						t.Fatalf("step %d: allow = (probe %v, ok %v), want (%v, %v)", i, p, ok, s.wantProbe, s.wantOK)
					}
					if ok {
						probe = p // the take that got through reports next
					}
				case "ok":
					b.Success(probe)
				case "fail":
					b.Failure(now, probe)
				case "abandon":
					b.Abandon(probe)
				}
				if state, _ := b.Snapshot(); state != s.wantState {
					t.Fatalf("step %d (%s): state %s, want %s", i, s.do, state, s.wantState)
				}
			}
		})
	}
}

// TestCall: failures open the breaker, which then answers ErrOpen without
// calling; a caller that left is not a store failure.
func TestCall(t *testing.T) {
	t.Parallel()
	b := New(2, time.Hour)
	boom := errors.New("boom")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		if _, err := b.Call(gone, func() error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("caller gone: err %v, want boom", err)
		}
	}
	if s, _ := b.Snapshot(); s != Closed {
		t.Fatalf("failures of callers that left opened the breaker: %s", s)
	}
	ctx := context.Background()
	if ch, _ := b.Call(ctx, func() error { return boom }); ch != Unchanged {
		t.Fatalf("first failure: %v", ch)
	}
	if ch, _ := b.Call(ctx, func() error { return boom }); ch != Opened {
		t.Fatalf("second failure: %v, want Opened", ch)
	}
	called := false
	if _, err := b.Call(ctx, func() error { called = true; return nil }); !errors.Is(err, ErrOpen) || called {
		t.Fatalf("open breaker: err %v, called %v; want ErrOpen without a call", err, called)
	}
}
