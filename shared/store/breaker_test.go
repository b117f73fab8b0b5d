package store

import (
	"context"
	"errors"
	"fmt"
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
		{"a few failures among many answers do not open it", []step{
			{do: "ok"}, {do: "ok"}, {do: "ok"}, {do: "ok"},
			{do: "fail"}, {do: "ok"}, {do: "fail"}, {do: "ok"},
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
					b.Success(now, probe)
				case "fail":
					b.Failure(now, now, probe)
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

// TestBreakerBurst: one tenant's burst of 100 concurrent calls on a
// loaded host, five of which in a row miss their deadline while the store
// answers the others, opens nothing (were such misses counted, five in a
// row would open the one breaker for every tenant); a store that answers nobody opens it
// after threshold calls as before, however slowly each fails.
func TestBreakerBurst(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	b := NewBreaker(DefaultBreakerThreshold, time.Hour)
	for i := range 100 { // all begun at t0, ending over 100 ms
		end := t0.Add(time.Duration(i+1) * time.Millisecond)
		if i >= 40 && i < 45 {
			if b.Failure(t0, end, false) {
				t.Fatalf("call %d: five missed deadlines in a burst the store answered opened the breaker", i)
			}
			continue
		}
		b.Success(end, false)
	}
	if s, opens := b.Snapshot(); s != BreakerClosed || opens != 0 {
		t.Fatalf("after the burst: %s, %d opens", s, opens)
	}
	// Then the store goes silent: calls begun after its last answer, each
	// failing at its 2 s bound, one after another.
	at := t0.Add(time.Second)
	for i := range DefaultBreakerThreshold {
		opened := b.Failure(at, at.Add(2*time.Second), false)
		at = at.Add(2 * time.Second)
		if opened != (i == DefaultBreakerThreshold-1) {
			t.Fatalf("failure %d of a silent store: opened %v", i, opened)
		}
	}
}

// TestCallQueuedNotCounted: a call that could not get a pooled
// connection in time (the gateway's own queue, ErrQueued) is not a store
// failure.
// A configuration error (ErrMisconfigured: one tenant's keys answered
// MOVED) is not one either: it must not skip the store for every tenant.
func TestCallQueuedNotCounted(t *testing.T) {
	t.Parallel()
	for _, mark := range []error{ErrQueued, ErrMisconfigured} {
		b := NewBreaker(2, time.Hour)
		for range 10 {
			if _, err := b.call(context.Background(), func() error { return fmt.Errorf("take: %w", mark) }); !errors.Is(err, mark) {
				t.Fatalf("err %v", err)
			}
		}
		if s, _ := b.Snapshot(); s != BreakerClosed {
			t.Fatalf("%v opened the breaker: %s", mark, s)
		}
	}
}
