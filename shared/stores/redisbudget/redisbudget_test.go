package redisbudget_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/budgettest"
	"github.com/llmgw/gateway/shared/stores/redisbudget"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/redis/go-redis/v9"
)

// newClient returns a client of srv closed at the end of the test, with the
// limiter's tuning (no retries) and the given timeout.
func newClient(t testing.TB, srv *redistest.Server, timeout time.Duration) *redis.Client {
	t.Helper()
	c, err := redisclient.NewClient(redisclient.ClientOptions{URL: srv.URL(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixes atomic.Int64

// uniquePrefix keeps parallel tests on one server apart.
func uniquePrefix() string { return fmt.Sprintf("t%d:", prefixes.Add(1)) }

func newStore(t testing.TB, c redisbudget.Client, now func() time.Time) *redisbudget.Store {
	t.Helper()
	s, err := redisbudget.New(c, redisbudget.Config{KeyPrefix: uniquePrefix(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the shared store semantics on a real redis-server
// and on a three-primary cluster (a cluster client: a tenant's and its
// levels' keys share one hash tag, so one script touches them in one
// slot), with the scripts' clock set by the tests (the Now seam), so
// minutes, days, months and leases pass without waiting.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, k := range redistest.Kinds(t) {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			client, err := redisclient.New(redisclient.ClientOptions{URL: k.URL, Cluster: k.Cluster, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = client.Close() })
			budgettest.Run(t, func(t *testing.T, now func() time.Time) budget.Store {
				return newStore(t, client, now)
			})
		})
	}
}

// TestRedisTime runs on Redis's own clock: windows and resets come from
// TIME, and a short lease expires in real time.
func TestRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv, 5*time.Second), nil)
	ctx := context.Background()
	lim := budget.Limits{TokensPerMinute: 100, TokenQuota: 1000, QuotaPeriod: budget.PeriodMonth}

	before := time.Now()
	d, err := s.Reserve(ctx, "a", "1", budget.Request{Limits: lim, Min: 10, Want: 80, Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Granted != 80 || d.TPM.Remaining != 20 || d.Quota.Remaining != 920 {
		t.Fatalf("%+v", d)
	}
	// loopback Redis shares this machine's clock
	if wantTPM := before.Truncate(time.Minute).Add(time.Minute); d.TPM.Reset.Sub(wantTPM).Abs() > time.Minute {
		t.Errorf("tpm reset %s, want about %s", d.TPM.Reset, wantTPM)
	}
	u := before.UTC()
	if wantQ := time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC); !d.Quota.Reset.Equal(wantQ) && before.Add(time.Minute).Month() == before.Month() {
		t.Errorf("quota reset %s, want %s", d.Quota.Reset, wantQ)
	}

	time.Sleep(400 * time.Millisecond) // the lease ends
	d, err = s.Reserve(ctx, "a", "2", budget.Request{Limits: lim, Min: 0, Want: 0, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d.Quota.Used != 80 {
		t.Fatalf("expired reservation not charged (a lease end charges, never refunds): %+v", d)
	}
	st, err := s.Settle(ctx, "a", "1", budget.Charge{Tokens: 30})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Expired || st.Refunded != 50 || st.Overrun != 0 {
		t.Fatalf("late settle %+v", st)
	}
}

// TestKeys checks the hash tag (one Cluster slot per tenant) and that every
// key has a TTL.
func TestKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv, 5*time.Second)
	s, err := redisbudget.New(client, redisbudget.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := s.Keys("acme")
	for _, k := range keys {
		if k[:len("{llmgw:budget:acme}:")] != "{llmgw:budget:acme}:" {
			t.Errorf("key %q lacks the tenant hash tag", k)
		}
	}
	lim := budget.Limits{TokensPerMinute: 100, TokenQuota: 1000, QuotaPeriod: budget.PeriodDay}
	if _, err := s.Reserve(ctx, "acme", "1", budget.Request{Limits: lim, Min: 1, Want: 10, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		ttl, err := client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 25*time.Hour+2*time.Minute {
			t.Errorf("key %s: ttl %s", k, ttl)
		}
	}
	// After the settle the records are gone; the windows stay until the
	// quota day ends.
	if _, err := s.Settle(ctx, "acme", "1", budget.Charge{Tokens: 5}); err != nil {
		t.Fatal(err)
	}
	n, err := client.Exists(ctx, keys[1], keys[2]).Result()
	if err != nil || n != 0 {
		t.Errorf("records left after settle: %d, %v", n, err)
	}
}

// TestLevelKeys: a level's keys carry the tenant's hash tag (one Cluster
// slot for every level of a tenant) and expire with their windows, so
// per-user accounts cost nothing once idle.
func TestLevelKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv, 5*time.Second)
	s, err := redisbudget.New(client, redisbudget.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lv := []budget.Level{{Name: "user:u1", Limits: budget.Limits{SpendPerDay: 100}}}
	if _, err := s.Reserve(ctx, "acme", "1", budget.Request{Min: 1, Want: 1, MoneyMin: 1, MoneyWant: 10, Lease: time.Minute, Levels: lv}); err != nil {
		t.Fatal(err)
	}
	keys, err := client.Keys(ctx, "*user:u1*").Result()
	if err != nil || len(keys) != 3 {
		t.Fatalf("level keys %v, %v", keys, err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "{llmgw:budget:acme}:l:user:u1:") {
			t.Errorf("key %q lacks the tenant hash tag", k)
		}
		// The day's spend is kept till the month's end at most (the
		// windows hash outlives the month window it may refund into).
		if ttl, err := client.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > 32*24*time.Hour {
			t.Errorf("key %s: ttl %s, %v", k, ttl, err)
		}
	}
	if st, err := s.Settle(ctx, "acme", "1", budget.Charge{Tokens: 1, Money: 3, Levels: lv}); err != nil || !st.Found {
		t.Fatalf("settle %+v, %v", st, err)
	}
	if n, err := client.Exists(ctx, "{llmgw:budget:acme}:l:user:u1:r", "{llmgw:budget:acme}:l:user:u1:d").Result(); err != nil || n != 0 {
		t.Errorf("level records left after settle: %d, %v", n, err)
	}
}

// TestScriptCacheFlushed: after SCRIPT FLUSH (a restart, a failover) the
// store falls back to EVAL and goes on.
func TestScriptCacheFlushed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newStore(t, newClient(t, srv, 5*time.Second), nil)
	ctx := context.Background()
	if err := s.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Do("SCRIPT", "FLUSH")
	lim := budget.Limits{TokensPerMinute: 100}
	if d, err := s.Reserve(ctx, "a", "1", budget.Request{Limits: lim, Min: 1, Want: 5, Lease: time.Minute}); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	srv.Do("SCRIPT", "FLUSH")
	if st, err := s.Settle(ctx, "a", "1", budget.Charge{Tokens: 1}); err != nil || st.Refunded != 4 {
		t.Fatalf("%+v, %v", st, err)
	}
}

// TestFailurePolicy stops Redis under a Ledger: a TPM-only tenant follows
// the policy, a tenant with a quota always fails closed, and no call waits
// longer than the timeout.
func TestFailurePolicy(t *testing.T) {
	t.Parallel()
	tenants := []budget.TenantBudget{
		{Tenant: "tpm", Limits: budget.Limits{TokensPerMinute: 1000, MaxOutputTokens: 200}},
		{Tenant: "quota", Limits: budget.Limits{TokenQuota: 1000, QuotaPeriod: budget.PeriodDay}},
	}
	ask := budget.Ask{PromptBound: 50}
	for _, tc := range []struct {
		policy    string
		tpmOpen   bool
		howToFail string
	}{
		{budget.PolicyOpen, true, "stop"},
		{budget.PolicyClosed, false, "stop"},
		{budget.PolicyOpen, true, "pause"},
	} {
		t.Run(tc.policy+" "+tc.howToFail, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			const timeout = 100 * time.Millisecond
			s := newStore(t, newClient(t, srv, timeout), nil)
			l, err := budget.New(budget.Config{FailurePolicy: tc.policy, Timeout: timeout, SettleTimeout: timeout}, tenants, s)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if d, err := l.Reserve(ctx, "tpm", "warm", ask); err != nil || !d.Allowed || d.Degraded {
				t.Fatalf("healthy: %+v, %v", d, err)
			}
			switch tc.howToFail {
			case "stop":
				srv.Stop()
			case "pause":
				srv.Pause(2 * time.Second)
			}
			start := time.Now()
			d, err := l.Reserve(ctx, "tpm", "1", ask)
			if took := time.Since(start); took > 5*timeout {
				t.Errorf("reserve took %s with a %s timeout", took, timeout)
			}
			if tc.tpmOpen {
				if err != nil || !d.Allowed || !d.Degraded || d.OutputCap != 200 || !d.RewriteCap {
					t.Errorf("tpm tenant, policy open: %+v, %v", d, err)
				}
			} else if !errors.Is(err, budget.ErrUnavailable) || d.Allowed || !d.Degraded {
				t.Errorf("tpm tenant, policy closed: %+v, %v", d, err)
			}
			d, err = l.Reserve(ctx, "quota", "2", ask)
			if !errors.Is(err, budget.ErrUnavailable) || d.Allowed {
				t.Errorf("quota tenant: %+v, %v (a quota fails closed)", d, err)
			}
			if _, err := l.Settle(ctx, "tpm", "warm", 10); !errors.Is(err, budget.ErrUnavailable) {
				t.Errorf("settle with the store down: %v", err)
			}
			if st := l.Stats(); st.StoreErrors != 2 || st.SettleErrors != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestSharedAcrossReplicas: two stores (two replicas, two pools) on one
// Redis draw on one budget, and either may settle the other's reservation.
func TestSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	var stores [2]*redisbudget.Store
	for i := range stores {
		s, err := redisbudget.New(newClient(t, srv, 5*time.Second), redisbudget.Config{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	ctx := context.Background()
	lim := budget.Limits{TokenQuota: 100, QuotaPeriod: budget.PeriodDay}
	req := budget.Request{Limits: lim, Min: 60, Want: 60, Lease: time.Minute}
	if d, err := stores[0].Reserve(ctx, "a", "1", req); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	if d, err := stores[1].Reserve(ctx, "a", "2", req); err != nil || d.Allowed || d.RefusedBy != budget.LimitQuota {
		t.Fatalf("second replica overshot: %+v, %v", d, err)
	}
	if st, err := stores[1].Settle(ctx, "a", "1", budget.Charge{Tokens: 10}); err != nil || st.Refunded != 50 {
		t.Fatalf("%+v, %v", st, err)
	}
	if d, err := stores[1].Reserve(ctx, "a", "2", req); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
}

// TestSettleAfterFlush: a store that loses its data between a
// reservation and its settle (FLUSHALL on a real redis-server) must not
// charge the settle 0 and log nothing: the settle finds no counter, the
// ledger recreates it with the actual usage, in the quota window too, and
// logs it.
func TestSettleAfterFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv, 5*time.Second)
	s := newStore(t, client, nil)
	var logs bytes.Buffer
	lim := budget.Limits{TokensPerMinute: 100_000, TokenQuota: 1_000_000, QuotaPeriod: budget.PeriodDay}
	l, err := budget.New(budget.Config{Log: slog.New(slog.NewTextHandler(&logs, nil))}, []budget.TenantBudget{{Tenant: "a", Limits: lim}}, s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d, err := l.Reserve(ctx, "a", "1", budget.Ask{PromptBound: 100, ClientCap: 900}); err != nil || !d.Allowed {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	if err := client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := l.Settle(ctx, "a", "1", 420)
	if err != nil || !st.NoCounter || !st.Recreated || st.Actual != 420 {
		t.Fatalf("settle after FLUSHALL: %+v, %v", st, err)
	}
	if !strings.Contains(logs.String(), "found no counter") {
		t.Errorf("not logged: %s", logs.String())
	}
	// The next reservation sees the usage in both windows.
	d, err := l.Reserve(ctx, "a", "2", budget.Ask{PromptBound: 10, ClientCap: 10})
	if err != nil || d.TPM.Used != 420+20 || d.Quota.Used != 420+20 {
		t.Fatalf("after the recreated settle: %+v, %v", d, err)
	}
	// A settle of an id already settled, with the counter there, is the
	// no-op it always was.
	if st, err := l.Settle(ctx, "a", "1", 420); err != nil || st.Found || st.NoCounter || st.Recreated {
		t.Fatalf("second settle: %+v, %v", st, err)
	}
}

// TestSettlesARecordOfTheOldFormat: a reservation written before spend
// limits (a record of six fields) settles after the upgrade: a rolling
// deploy leaves such records in Redis for up to two leases.
func TestSettlesARecordOfTheOldFormat(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv, 5*time.Second)
	ctx := context.Background()
	s := newStore(t, client, nil)
	lim := budget.Limits{TokensPerMinute: 1000}
	if _, err := s.Reserve(ctx, "a", "new", budget.Request{Limits: lim, Min: 100, Want: 100, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	keys := s.Keys("a")
	// What the old script wrote for the same reservation under id "old":
	// granted 100 in the current minute window, no quota, a minute's lease.
	rec, err := client.HGet(ctx, keys[1], "new").Result()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(rec, "|")
	if len(f) != 10 {
		t.Fatalf("record %q: want ten fields", rec)
	}
	if err := client.HSet(ctx, keys[1], "old", strings.Join(f[:6], "|")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ZAdd(ctx, keys[2], redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMicro()), Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HIncrBy(ctx, keys[0], "tu", 100).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Settle(ctx, "a", "old", budget.Charge{Tokens: 30, Money: budget.KeepReserved})
	if err != nil || !st.Found || st.Reserved != 100 || st.Actual != 30 || st.MoneyReserved != 0 {
		t.Fatalf("settle of the old record: %+v, %v", st, err)
	}
	d, err := s.Reserve(ctx, "a", "probe", budget.Request{Limits: lim, Lease: time.Minute})
	if err != nil || d.TPM.Used != 130 {
		t.Fatalf("minute used %d, want 100 + 30: %v", d.TPM.Used, err)
	}
}

// TestSettleAfterFlushAndAReservation: Redis restarts empty while a
// stream runs, and another request's reservation makes the tenant's
// counter again before the stream's settle comes. The settle found a
// counter without its record and was dropped; it carries its
// reservation's time, the counter is younger: charged, once.
func TestSettleAfterFlushAndAReservation(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := newClient(t, srv, 5*time.Second)
	s := newStore(t, client, nil)
	lim := budget.Limits{TokensPerMinute: 100_000, TokenQuota: 1_000_000, QuotaPeriod: budget.PeriodDay}
	l, err := budget.New(budget.Config{}, []budget.TenantBudget{{Tenant: "a", Limits: lim}}, s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := l.Reserve(ctx, "a", "1", budget.Ask{PromptBound: 100, ClientCap: 900})
	if err != nil || !d.Allowed || d.ReservedAt.IsZero() {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	if err := client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // Redis TIME moves on: the counter is younger
	if d, err := l.Reserve(ctx, "a", "2", budget.Ask{PromptBound: 10, ClientCap: 10}); err != nil || !d.Allowed {
		t.Fatalf("reserve after FLUSHALL: %+v, %v", d, err)
	}
	usage := budget.Charge{Tokens: 420, Money: budget.KeepReserved, ReservedAt: d.ReservedAt}
	st, err := l.SettleCharge(ctx, "a", "1", usage)
	if err != nil || !st.Lost || !st.Recreated || st.Actual != 420 {
		t.Fatalf("settle after FLUSHALL and a reservation: %+v, %v", st, err)
	}
	// Charged once: a second settle finds the tombstone.
	if st, err := l.SettleCharge(ctx, "a", "1", usage); err != nil || st.Found || st.Lost || st.Recreated {
		t.Fatalf("second settle: %+v, %v", st, err)
	}
	w, err := l.Windows(ctx, "a", budget.Scope{}, "probe")
	if err != nil || w.TPM.Used != 420+20 || w.Quota.Used != 420+20 {
		t.Fatalf("windows: %+v, %v", w, err)
	}
}
