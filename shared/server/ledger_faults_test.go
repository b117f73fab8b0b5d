package server

// The ledger under store faults, on a real redis-server behind a loopback
// proxy that blackholes it or stops it mid-stream.

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/stores/redisbudget"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/redis/go-redis/v9"
)

// faultTimeout bounds each store call: long enough that a busy machine
// (the race detector, other tests) is not taken for an outage, short
// enough that the blackholed settle gives up within the test.
const faultTimeout = 2 * time.Second

// faultLedger is a strict ledger on a real redis-server reached through
// a proxy, for one tenant with a daily quota.
func faultLedger(t *testing.T, quota int64) (*budget.Ledger, *redistest.Server, *redistest.Proxy) {
	t.Helper()
	srv := redistest.Start(t)
	px := redistest.NewProxy(t, srv.Addr(), 0)
	st, _ := redisBudgetStore(t, px.URL(), faultTimeout)
	l, err := budget.New(budget.Config{Timeout: faultTimeout, SettleTimeout: faultTimeout, BreakerThreshold: 1000},
		[]budget.TenantBudget{{Tenant: "t1", Limits: budget.Limits{TokenQuota: quota, QuotaPeriod: budget.PeriodDay}}}, st)
	if err != nil {
		t.Fatal(err)
	}
	return l, srv, px
}

// redisBudgetStore is a budget store on the Redis server at url, through
// a client of its own whose calls time out after timeout; the client is
// closed when the test ends.
func redisBudgetStore(tb testing.TB, url string, timeout time.Duration) (*redisbudget.Store, *redis.Client) {
	tb.Helper()
	c, err := redisclient.NewClient(redisclient.ClientOptions{URL: url, Timeout: timeout})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	st, err := redisbudget.New(c, redisbudget.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return st, c
}

// quotaUsed reads the tenant's quota counter with a one-token probe
// reservation (which it then settles at 0).
func quotaUsed(t *testing.T, l *budget.Ledger, probe string) int64 {
	t.Helper()
	ctx := context.Background()
	d, err := l.Reserve(ctx, "t1", probe, budget.Ask{PromptBound: 1, ClientCap: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("probe: %+v %v", d, err)
	}
	if _, err := l.Settle(ctx, "t1", probe, 0); err != nil {
		t.Fatal(err)
	}
	return d.Quota.Used - d.Granted
}

// waitReplayed waits until the ledger has replayed n settles.
func waitReplayed(t *testing.T, l *budget.Ledger, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().Replayed < n {
		if time.Now().After(deadline) {
			t.Fatalf("settles never replayed: %+v", l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLedgerStoreFaults: a stream in flight when the store goes away
// (blackholed, or redis-server stopped and started again) settles
// against a store that does not answer: the access log says
// budget_settle "unsettled" and budget_charged 0, not the reservation,
// and the settle is replayed once the store answers a later request, so
// the tenant pays the stream's real usage (4 tokens), not its
// reservation (1,000 and more) and not nothing. On the earlier code the
// settle was dropped and its reservation held the quota until its lease
// ended, then was refunded whole.
func TestLedgerStoreFaults(t *testing.T) {
	for _, fault := range []string{"blackhole", "restart"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			l, srv, px := faultLedger(t, 1_000_000)
			release := make(chan struct{})
			g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = l }, &recordingBackend{h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n")
				w.(http.Flusher).Flush()
				<-release // the client's only request: held until the store is gone
				_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\ndata: [DONE]\n\n")
			}})
			before := quotaUsed(t, l, "probe-0")

			req, _ := http.NewRequest("POST", g.srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`))
			done := make(chan *http.Response, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					close(done)
					return
				}
				_, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				done <- resp
			}()
			waitLog(t, g, 0) // nothing logged yet: the stream is in flight
			time.Sleep(50 * time.Millisecond)
			switch fault {
			case "blackhole":
				px.Blackhole(true)
			case "restart":
				srv.Stop()
			}
			close(release)
			resp := <-done
			if resp == nil {
				return
			}
			entry := g.lastLog(t)
			if entry["budget_settle"] != "unsettled" || entry["budget_charged"] != float64(0) || entry["budget_reserved"].(float64) < 1000 {
				t.Fatalf("access log for a settle the store never confirmed: budget_settle %v, budget_charged %v, budget_reserved %v",
					entry["budget_settle"], entry["budget_charged"], entry["budget_reserved"])
			}
			if st := l.Stats(); st.Pending != 1 {
				t.Fatalf("settle not kept for replay: %+v", st)
			}
			switch fault {
			case "blackhole":
				px.Blackhole(false)
			case "restart":
				srv.Restart()
			}
			_ = quotaUsed(t, l, "probe-1") // the store answers: the replay starts
			waitReplayed(t, l, 1)
			if fault == "restart" {
				// redis-server started empty (no persistence): the counter
				// is gone with the reservation, and the replay finds
				// nothing to settle; the charge cannot be kept across a
				// store that lost its data.
				return
			}
			after := quotaUsed(t, l, "probe-2")
			if got := after - before; got != 4 {
				t.Fatalf("quota used went from %d to %d: charged %d, want the stream's usage 4", before, after, got)
			}
		})
	}
}

// waitLog fails when the access log has more than n lines.
func waitLog(t *testing.T, g *testGateway, n int) {
	t.Helper()
	if l := g.log.lines(t); len(l) > n {
		t.Fatalf("%d access-log lines, want %d", len(l), n)
	}
}

// TestLedgerReserveGivenUp: a reservation the store applied but whose
// answer the gateway never got (the proxy drops the store's replies: the
// request is refused 503) is released once the store answers again,
// instead of holding 37,000 tokens of the quota until its lease ends.
// The release is a settle at 0 for its id, a no-op had it never landed.
func TestLedgerReserveGivenUp(t *testing.T) {
	t.Parallel()
	l, _, px := faultLedger(t, 1_000_000)
	ctx := context.Background()
	before := quotaUsed(t, l, "probe-0")
	px.DropReplies(true)
	if _, err := l.Reserve(ctx, "t1", "lost", budget.Ask{PromptBound: 37000, ClientCap: 1}); err == nil {
		t.Fatal("a store whose replies are dropped answered")
	}
	if st := l.Stats(); st.Pending != 1 {
		t.Fatalf("the release is not kept: %+v", st)
	}
	px.DropReplies(false)
	// The client drops the connection that timed out; the next call
	// opens another and is answered.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := l.Reserve(ctx, "t1", "probe-1", budget.Ask{PromptBound: 1, ClientCap: 1}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store never answered again")
		}
	}
	_, _ = l.Settle(ctx, "t1", "probe-1", 0)
	waitReplayed(t, l, 1)
	if after := quotaUsed(t, l, "probe-2"); after != before {
		t.Fatalf("quota used %d after the store came back, %d before: the given-up reservation holds it", after, before)
	}
}
