package ratelimit_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/internal/testing/syncbuf"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores"
)

// onRedis opens a shared store on Redis as the gateway does (stores.Open,
// sc with cfg's answer and dial timeouts) and returns cfg on it: the store
// section's backend, and its limiter's stores. Each call is a replica of
// its own, with its own pool.
func onRedis(t testing.TB, cfg ratelimit.Config, sc stores.Config) ratelimit.Config {
	t.Helper()
	sc.Backend, sc.TakeTimeout, sc.DialTimeout = stores.Redis, cfg.Timeout, cfg.DialTimeout
	set, err := stores.Open(t.Context(), sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close() })
	cfg.Store, cfg.Shared = ratelimit.StoreRedis, set.Limiter
	return cfg
}

func newLimiter(t testing.TB, cfg ratelimit.Config, limits []ratelimit.TenantLimit, log *slog.Logger) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(cfg, limits, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	ok := []ratelimit.TenantLimit{{Tenant: "a", Requests: 1, Interval: time.Second}}
	for _, tc := range []struct {
		name   string
		cfg    ratelimit.Config
		limits []ratelimit.TenantLimit
		want   []string // every one must appear: all problems at once
	}{
		{name: "bad store and policy", cfg: ratelimit.Config{Store: "etcd", FailurePolicy: "maybe"}, limits: ok,
			want: []string{`store: must be memory or redis, not "etcd"`, `failure_policy: must be open or closed, not "maybe"`}},
		{name: "redis without url", cfg: ratelimit.Config{Store: "redis"}, limits: ok, want: []string{"redis_url: required"}},
		{name: "negatives", cfg: ratelimit.Config{Timeout: -1, BreakerThreshold: -1, BreakerCooldown: -1}, limits: ok,
			want: []string{"timeout", "breaker_threshold", "breaker_cooldown"}},
		{name: "bad limits", limits: []ratelimit.TenantLimit{
			{Tenant: "", Requests: 1, Interval: time.Second},
			{Tenant: "a", Requests: 0, Interval: time.Second},
			{Tenant: "a", Requests: 1, Interval: -time.Second},
		}, want: []string{"limits[0].id: required", "limits[1].requests: must be at least 1", `limits[2].id: duplicate tenant "a"`, "limits[2].interval: must not be negative"}},
		{name: "redis interval below microsecond", cfg: ratelimit.Config{Store: "redis"},
			limits: []ratelimit.TenantLimit{{Tenant: "a", Requests: 1, Interval: 1500 * time.Nanosecond}}, want: []string{"microseconds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := ratelimit.New(tc.cfg, tc.limits, nil)
			if err == nil {
				_ = l.Close()
				t.Fatal("New accepted an invalid config")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestMemoryTake covers the default store: Requests admitted, then refusals
// with a Reset in the future; unknown tenants are errors.
func TestMemoryTake(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, ratelimit.Config{}, []ratelimit.TenantLimit{
		{Tenant: "a", Requests: 3, Interval: time.Hour},
		{Tenant: "b", Requests: 3, Interval: time.Hour}, // same shape, own bucket
		{Tenant: "c", Requests: 1, Interval: time.Hour},
	}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		tenant        string
		allowed       bool
		remaining     uint64
		limit         uint64
		wantErr       error
		resetInFuture bool
	}{
		{tenant: "a", allowed: true, remaining: 2, limit: 3, resetInFuture: true},
		{tenant: "a", allowed: true, remaining: 1, limit: 3, resetInFuture: true},
		{tenant: "a", allowed: true, remaining: 0, limit: 3, resetInFuture: true},
		{tenant: "a", allowed: false, remaining: 0, limit: 3, resetInFuture: true},
		{tenant: "b", allowed: true, remaining: 2, limit: 3, resetInFuture: true},
		{tenant: "c", allowed: true, remaining: 0, limit: 1, resetInFuture: true},
		{tenant: "c", allowed: false, remaining: 0, limit: 1, resetInFuture: true},
		{tenant: "nobody", wantErr: ratelimit.ErrUnknownTenant},
	} {
		d, err := l.Take(ctx, tc.tenant)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("%s: err = %v, want %v", tc.tenant, err, tc.wantErr)
		}
		if err != nil {
			continue
		}
		if d.Allowed != tc.allowed || d.Remaining != tc.remaining || d.Limit != tc.limit || d.Degraded {
			t.Errorf("%s: %+v, want allowed=%v remaining=%d limit=%d", tc.tenant, d, tc.allowed, tc.remaining, tc.limit)
		}
		if tc.resetInFuture && !d.Reset.After(time.Now()) {
			t.Errorf("%s: reset %s not in the future", tc.tenant, d.Reset)
		}
	}
	if s := l.Stats(); s.Takes != 7 || s.Degraded != 0 {
		t.Errorf("stats %+v, want 7 takes, 0 degraded", s)
	}
}

func TestMemoryTakeDoesNotAllocate(t *testing.T) {
	l := newLimiter(t, ratelimit.Config{}, []ratelimit.TenantLimit{{Tenant: "a", Requests: 1 << 40, Interval: time.Hour}}, nil)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { _, _ = l.Take(ctx, "a") }); n != 0 {
		t.Errorf("memory Take allocates %.1f times", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = l.TakeCount(ctx, "a") }); n != 0 {
		t.Errorf("memory TakeCount allocates %.1f times", n)
	}
}

// redisLimits is one tenant with a budget no test exhausts by accident.
var redisLimits = []ratelimit.TenantLimit{{Tenant: "t", Requests: 5, Interval: time.Hour}}

// TestRedisSharedBudget: two limiters (two replicas, two pools) on one
// Redis draw on one budget.
func TestRedisSharedBudget(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := ratelimit.Config{Timeout: 5 * time.Second}
	a := newLimiter(t, onRedis(t, cfg, stores.Config{URL: srv.URL()}), redisLimits, nil)
	b := newLimiter(t, onRedis(t, cfg, stores.Config{URL: srv.URL()}), redisLimits, nil)
	if err := a.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for i := range 10 {
		l := a
		if i%2 == 1 {
			l = b
		}
		d, err := l.Take(context.Background(), "t")
		if err != nil {
			t.Fatal(err)
		}
		if d.Degraded {
			t.Fatalf("take %d degraded", i)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("two replicas admitted %d, want the shared 5", allowed)
	}
	// Another gateway with its own prefix has its own budget.
	other := newLimiter(t, onRedis(t, cfg, stores.Config{URL: srv.URL(), RedisSettings: stores.RedisSettings{KeyPrefix: "other:"}}), redisLimits, nil)
	if d, err := other.Take(context.Background(), "t"); err != nil || !d.Allowed {
		t.Errorf("other prefix: %+v, %v; want allowed", d, err)
	}
}

func TestRedisPassword(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Password: "s3cret"})
	for _, tc := range []struct {
		name, password string
		degraded       bool
	}{
		{"right", "s3cret", false},
		{"wrong", "nope", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs syncbuf.Buffer
			l := newLimiter(t, onRedis(t, ratelimit.Config{Timeout: 5 * time.Second}, stores.Config{URL: srv.URL(), Password: tc.password}),
				redisLimits, slog.New(slog.NewTextHandler(&logs, nil)))
			d, err := l.Take(context.Background(), "t")
			if err != nil {
				t.Fatal(err)
			}
			if d.Degraded != tc.degraded {
				t.Errorf("degraded = %v, want %v", d.Degraded, tc.degraded)
			}
			if strings.Contains(logs.String(), tc.password) {
				t.Errorf("log leaks the password: %s", logs.String())
			}
		})
	}
}

// bound is how long any Take may take against a failing store: ten times
// the timeout as this machine keeps it now (ref: how long a timer of the
// timeout, started with the take, really took to fire), so a busy machine
// that runs every timer late widens the bound with them while a hang (a
// take that waits past its timeout for the store) still exceeds it.
func bound(timeout, ref time.Duration) time.Duration { return 10 * max(timeout, ref) }

// dialTimeout is the tests' dial budget. A take that must wait for a new
// connection (the last one timed out and was closed) may wait Timeout plus
// the dial budget, and against a paused or sleeping Redis the new
// connection's handshake waits all of it; the tests' bound (10 × a 50ms
// timeout) holds for a budget of 100ms. The default, 1s, is for TLS and an
// Entra login in production.
const dialTimeout = 100 * time.Millisecond

// takeTimed takes once and fails the test if the take exceeded bound.
func takeTimed(t *testing.T, l *ratelimit.Limiter, timeout time.Duration) (ratelimit.Decision, error) {
	t.Helper()
	start := time.Now()
	fired := make(chan time.Duration, 1)
	time.AfterFunc(timeout, func() { fired <- time.Since(start) })
	d, err := l.Take(context.Background(), "t")
	took := time.Since(start)
	if ref := <-fired; took > bound(timeout, ref) {
		t.Fatalf("Take took %s, bound %s (a %s timer started with it fired after %s)", took, bound(timeout, ref), timeout, ref)
	}
	return d, err
}

// TestRedisOutage stops Redis mid-run and restarts it: every take returns
// within the bound with the policy, the breaker opens and stops calling the
// store, and the same limiter recovers once Redis is back.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{ratelimit.PolicyOpen, ratelimit.PolicyClosed} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			const timeout = 50 * time.Millisecond
			const threshold = 3
			l := newLimiter(t, onRedis(t, ratelimit.Config{
				Timeout: timeout, DialTimeout: dialTimeout, FailurePolicy: policy,
				BreakerThreshold: threshold, BreakerCooldown: 100 * time.Millisecond,
			}, stores.Config{URL: srv.URL()}), []ratelimit.TenantLimit{{Tenant: "t", Requests: 1000, Interval: time.Hour}}, nil)
			if err := l.Warm(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d, err := takeTimed(t, l, timeout); err != nil || !d.Allowed || d.Degraded {
				t.Fatalf("healthy take: %+v, %v", d, err)
			}

			srv.Stop()
			for i := range threshold + 5 {
				d, err := takeTimed(t, l, timeout)
				switch policy {
				case ratelimit.PolicyOpen:
					if err != nil || !d.Allowed || !d.Degraded {
						t.Fatalf("take %d with Redis down, policy open: %+v, %v; want allowed and degraded", i, d, err)
					}
				case ratelimit.PolicyClosed:
					if !errors.Is(err, ratelimit.ErrUnavailable) || d.Allowed || !d.Degraded || !d.Reset.After(time.Now().Add(-time.Second)) {
						t.Fatalf("take %d with Redis down, policy closed: %+v, %v; want ErrUnavailable with a Reset", i, d, err)
					}
				}
			}
			s := l.Stats()
			if s.BreakerOpens < 1 || s.Breaker == store.BreakerClosed {
				t.Errorf("after %d failures: breaker %s, opens %d; want open", threshold+5, s.Breaker, s.BreakerOpens)
			}
			if s.StoreErrors >= uint64(threshold+5) {
				t.Errorf("store errors %d: the open breaker should have skipped the store", s.StoreErrors)
			}
			if s.Degraded != uint64(threshold+5) {
				t.Errorf("degraded = %d, want %d", s.Degraded, threshold+5)
			}

			srv.Restart()
			// Recovery is automatic: takes keep the bound while the breaker
			// probes and go-redis redials (it probes a refused address once a
			// second); give it a generous, bounded while.
			deadline := time.Now().Add(20 * time.Second)
			for {
				d, err := takeTimed(t, l, timeout)
				if err == nil && !d.Degraded {
					if !d.Allowed {
						t.Fatalf("recovered take refused: %+v", d)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no recovery 20s after restart: %+v, %v, stats %+v", d, err, l.Stats())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if s := l.Stats(); s.Breaker != store.BreakerClosed {
				t.Errorf("after recovery breaker is %s", s.Breaker)
			}
		})
	}
}

// TestRedisSlow blocks Redis (CLIENT PAUSE, which is in effect when Pause
// returns) for far longer than the timeout: takes return within the bound
// with the policy, and normal service resumes after the pause.
func TestRedisSlow(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{ratelimit.PolicyOpen, ratelimit.PolicyClosed} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			const timeout = 50 * time.Millisecond
			l := newLimiter(t, onRedis(t, ratelimit.Config{
				Timeout: timeout, DialTimeout: dialTimeout, FailurePolicy: policy,
				BreakerThreshold: 2, BreakerCooldown: 50 * time.Millisecond,
			}, stores.Config{URL: srv.URL()}), redisLimits, nil)
			if err := l.Warm(context.Background()); err != nil {
				t.Fatal(err)
			}
			const pause = 2 * time.Second
			srv.Pause(pause)
			paused := time.Now()
			for i := range 4 {
				d, err := takeTimed(t, l, timeout)
				if time.Since(paused) > pause {
					break // the machine stalled past the pause; nothing to assert
				}
				if !d.Degraded {
					t.Fatalf("take %d during the pause not degraded: %+v, %v", i, d, err)
				}
				if (policy == ratelimit.PolicyClosed) != errors.Is(err, ratelimit.ErrUnavailable) {
					t.Fatalf("take %d, policy %s: err = %v", i, policy, err)
				}
			}
			deadline := time.Now().Add(pause + 20*time.Second)
			for {
				d, err := takeTimed(t, l, timeout)
				if err == nil && !d.Degraded {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no recovery after the pause: %+v, %v, stats %+v", d, err, l.Stats())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestRedisDebugSleep makes Redis sleep with DEBUG SLEEP 1. The sleep's start
// is not observable, so the test takes in a loop until the sleep is over:
// every take must keep the bound, and at least one take issued while the
// server slept must have been degraded.
func TestRedisDebugSleep(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const timeout = 50 * time.Millisecond
	l := newLimiter(t, onRedis(t, ratelimit.Config{Timeout: timeout, DialTimeout: dialTimeout}, stores.Config{URL: srv.URL()}), redisLimits, nil)
	if err := l.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := srv.Sleep(time.Second)
	// A generous bound, so that a DEBUG SLEEP that never answers fails the
	// test instead of looping until the binary's timeout.
	deadline := time.Now().Add(30 * time.Second)
	degraded := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("DEBUG SLEEP: %v", err)
			}
			if degraded == 0 {
				t.Errorf("no take was degraded during a 1s DEBUG SLEEP")
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("DEBUG SLEEP 1 still unanswered after 30s (%d takes degraded, stats %+v)", degraded, l.Stats())
		}
		d, err := takeTimed(t, l, timeout)
		if err != nil {
			t.Fatal(err)
		}
		if d.Degraded {
			degraded++
		}
	}
}

// TestCallerCancel: a caller that left is not a store failure.
func TestCallerCancel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := newLimiter(t, onRedis(t, ratelimit.Config{}, stores.Config{URL: srv.URL()}), redisLimits, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Take(ctx, "t"); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if s := l.Stats(); s.StoreErrors != 0 || s.Degraded != 0 {
		t.Errorf("a cancelled caller counted against the store: %+v", s)
	}
}

// TestDegradedLogIsRateLimited: an outage logs a warning, not one per take.
func TestDegradedLogIsRateLimited(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Stop()
	var logs syncbuf.Buffer
	l := newLimiter(t, onRedis(t, ratelimit.Config{}, stores.Config{URL: srv.URL(), Password: "pw-in-env"}),
		redisLimits, slog.New(slog.NewTextHandler(&logs, nil)))
	for range 50 {
		if _, err := l.Take(context.Background(), "t"); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "failure policy applied"); n < 1 || n > 3 {
		t.Errorf("%d degraded warnings for 50 takes within a moment; want 1 (rate-limited)", n)
	}
	if strings.Contains(logs.String(), "pw-in-env") {
		t.Error("log leaks the password")
	}
	if s := l.Stats(); s.Degraded != 50 {
		t.Errorf("degraded = %d, want 50", s.Degraded)
	}
}
