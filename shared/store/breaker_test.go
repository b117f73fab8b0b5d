package store

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
		wantState BreakerState  // zero: closed
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"opens after threshold consecutive failures", []step{
			{do: "allow", wantOK: true, wantState: BreakerClosed},
			{do: "fail", wantState: BreakerClosed},
			{do: "fail", wantState: BreakerClosed},
			{do: "fail", wantState: BreakerOpen},
			{at: time.Second, do: "allow", wantOK: false, wantState: BreakerOpen},
		}},
		{"a success resets the count", []step{
			{do: "fail", wantState: BreakerClosed},
			{do: "fail", wantState: BreakerClosed},
			{do: "ok", wantState: BreakerClosed},
			{do: "fail", wantState: BreakerClosed},
			{do: "fail", wantState: BreakerClosed},
			{do: "allow", wantOK: true, wantState: BreakerClosed},
		}},
		{"one probe after cooldown, success closes", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: BreakerOpen},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: BreakerHalfOpen},
			{at: 2 * time.Second, do: "allow", wantOK: false, wantState: BreakerHalfOpen},
			{at: 2 * time.Second, do: "ok", wantState: BreakerClosed},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantState: BreakerClosed},
		}},
		{"failed probe reopens for a cooldown", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: BreakerOpen},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: BreakerHalfOpen},
			{at: 2 * time.Second, do: "fail", wantState: BreakerOpen},
			{at: 3 * time.Second, do: "allow", wantOK: false, wantState: BreakerOpen},
			{at: 4 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: BreakerHalfOpen},
		}},
		{"abandoned probe lets the next take probe", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: BreakerOpen},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: BreakerHalfOpen},
			{at: 2 * time.Second, do: "abandon", wantState: BreakerOpen},
			{at: 2 * time.Second, do: "allow", wantOK: true, wantProbe: true, wantState: BreakerHalfOpen},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := NewBreaker(3, 2*time.Second)
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

// TestCall: failures open the breaker, which then answers ErrBreakerOpen without
// calling; a caller that left is not a store failure.
func TestCall(t *testing.T) {
	t.Parallel()
	b := NewBreaker(2, time.Hour)
	boom := errors.New("boom")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		if _, err := b.call(gone, func() error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("caller gone: err %v, want boom", err)
		}
	}
	if s, _ := b.Snapshot(); s != BreakerClosed {
		t.Fatalf("failures of callers that left opened the breaker: %s", s)
	}
	ctx := context.Background()
	if ch, _ := b.call(ctx, func() error { return boom }); ch != unchanged {
		t.Fatalf("first failure: %v", ch)
	}
	if ch, _ := b.call(ctx, func() error { return boom }); ch != opened {
		t.Fatalf("second failure: %v, want opened", ch)
	}
	called := false
	if _, err := b.call(ctx, func() error { called = true; return nil }); !errors.Is(err, ErrBreakerOpen) || called {
		t.Fatalf("open breaker: err %v, called %v; want ErrBreakerOpen without a call", err, called)
	}
}
