// Package redisbudget is a budget.Store kept in Redis, so that every replica
// of the gateway (and every replica after a scale to zero) draws on one
// token budget per tenant. Its clients come from redisclient.NewClient,
// whose timeouts and no-retry policy suit it.
//
// Reserve and Settle are each one atomic Lua script, one round trip
// (EVALSHA; EVAL once after the server's script cache was emptied). The
// scripts run budget.Memory's algorithm step for step with Redis TIME as
// the clock, so replicas with skewed clocks agree on windows and leases.
// The conformance tests of package budgettest hold both stores to it.
//
// A tenant's three keys share the hash tag {prefix+tenant}, so Redis
// Cluster keeps them in one slot and the scripts can touch them together.
// Every key has a TTL: the windows hash lives until its latest window ends,
// the records until every lease and window they refer to has ended. Idle
// tenants cost nothing.
package redisbudget

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/redis/go-redis/v9"
)

var _ budget.Store = (*Store)(nil)

// DefaultKeyPrefix prefixes every key when Config.KeyPrefix is empty.
const DefaultKeyPrefix = "llmgw:budget:"

// Config tunes a Store.
type Config struct {
	// KeyPrefix prefixes every key, so several gateways can share one
	// Redis. Default DefaultKeyPrefix.
	KeyPrefix string
	// ReserveClient, when set, runs Reserve (and Warm's second pool) while
	// the client New was given runs Settle: a reservation is on the request
	// path and wants a client whose answer timeout is the budget's tight
	// one, a settle may wait longer (go-redis bounds every socket read by
	// its client's ReadTimeout, so the two need two clients).
	ReserveClient Client
	// Now, when set, replaces Redis TIME as the scripts' clock. It exists
	// for tests that cross windows and leases without waiting; production
	// leaves it nil so that every replica reads Redis's one clock.
	Now func() time.Time
}

// Client is what the store needs of a Redis client: *redis.Client,
// *redis.ClusterClient, *redis.Ring and every redis.UniversalClient.
type Client interface {
	redis.Scripter
}

// Store is a budget.Store in Redis. It does not own the client.
type Store struct {
	client Client
	fast   Client // Reserve's: Config.ReserveClient, else client
	prefix string
	now    func() time.Time
}

// New returns a Store on client. It does no I/O.
func New(client Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisbudget: nil client")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	fast := cfg.ReserveClient
	if fast == nil {
		fast = client
	}
	return &Store{client: client, fast: fast, prefix: cfg.KeyPrefix, now: cfg.Now}, nil
}

// Keys returns tenant's keys: windows, records and deadlines (for
// operators and tests).
func (s *Store) Keys(tenant string) []string {
	return s.keys(tenant, nil)
}

// keys returns the keys of tenant's account, then of each level's: every
// one under the tenant's hash tag, so Redis Cluster keeps a tenant's
// levels in its slot and one script touches them together. A level's
// name ends before ":w", ":r" or ":d", so no two accounts share a key.
func (s *Store) keys(tenant string, levels []budget.Level) []string {
	tag := "{" + s.prefix + tenant + "}"
	k := make([]string, 0, 3*(1+len(levels)))
	k = append(k, tag+":w", tag+":r", tag+":d")
	for _, l := range levels {
		a := tag + ":l:" + l.Name
		k = append(k, a+":w", a+":r", a+":d")
	}
	return k
}

func (s *Store) nowArg() string {
	if s.now == nil {
		return ""
	}
	return strconv.FormatInt(s.now().UnixMicro(), 10)
}

// limitArgs appends an account's limits to the reserve script's ARGV.
func limitArgs(args []any, lim budget.Limits) []any {
	period := 0
	if lim.TokenQuota > 0 {
		period = int(lim.QuotaPeriod)
	}
	return append(args, lim.TokensPerMinute, lim.TokenQuota, period, lim.SpendPerMinute, lim.SpendPerDay, lim.SpendPerMonth)
}

// windows reads one account's windows from the reserve script's reply.
func windows(lim budget.Limits, res []int64) budget.Windows {
	w := budget.Windows{TPM: budget.NewWindow(lim.TokensPerMinute, res[0], time.Unix(res[2], 0))}
	if lim.TokenQuota > 0 {
		w.Quota = budget.NewWindow(lim.TokenQuota, res[1], time.Unix(res[3], 0))
	}
	if lim.Spends() {
		w.Spend[0] = budget.NewWindow(lim.SpendPerMinute, res[4], time.Unix(res[2], 0))
		w.Spend[1] = budget.NewWindow(lim.SpendPerDay, res[5], time.Unix(res[7], 0))
		w.Spend[2] = budget.NewWindow(lim.SpendPerMonth, res[6], time.Unix(res[8], 0))
	}
	return w
}

// Reserve implements budget.Store: the tenant and its levels in one
// script, one round trip.
func (s *Store) Reserve(ctx context.Context, tenant, id string, r budget.Request) (budget.Decision, error) {
	if err := r.Validate(); err != nil {
		return budget.Decision{}, err
	}
	n := 1 + len(r.Levels)
	args := make([]any, 0, 7+6*n)
	args = append(args, s.nowArg(), id, r.Min, r.Want, r.Lease.Microseconds(), r.MoneyMin, r.MoneyWant)
	args = limitArgs(args, r.Limits)
	for _, l := range r.Levels {
		args = limitArgs(args, l.Limits)
	}
	res, err := reserveScript.Run(ctx, s.fast, s.keys(tenant, r.Levels), args...).Int64Slice()
	if err != nil {
		return budget.Decision{}, fmt.Errorf("redisbudget: reserve: %w", redisclient.Classify(err))
	}
	if len(res) != 6+9*n {
		return budget.Decision{}, fmt.Errorf("redisbudget: reserve: unexpected reply of %d values", len(res))
	}
	status := res[0]
	d := budget.Decision{
		Allowed:      status == 1 || status == 2,
		Held:         status >= 2,
		Released:     status == 4,
		Granted:      res[1],
		RefusedBy:    budget.Limit(res[2]),
		RefusedLevel: int(res[3]),
		Requested:    r.Min,

		MoneyGranted:   res[4],
		MoneyRequested: r.MoneyMin,
	}
	if status == 1 {
		d.ReservedAt = time.UnixMicro(res[5])
	}
	t := windows(r.Limits, res[6:])
	d.TPM, d.Quota, d.Spend = t.TPM, t.Quota, t.Spend
	if len(r.Levels) > 0 {
		d.Levels = make([]budget.Windows, len(r.Levels))
		for i, l := range r.Levels {
			d.Levels[i] = windows(l.Limits, res[6+9*(i+1):])
			d.Levels[i].Name = l.Name
		}
	}
	return d, nil
}

// Settle implements budget.Store: the tenant and actual.Levels in one
// script.
func (s *Store) Settle(ctx context.Context, tenant, id string, actual budget.Charge) (budget.Settlement, error) {
	at := int64(0)
	if !actual.ReservedAt.IsZero() {
		at = actual.ReservedAt.UnixMicro()
	}
	res, err := settleScript.Run(ctx, s.client, s.keys(tenant, actual.Levels), s.nowArg(), id, actual.Tokens, actual.Money,
		at, actual.Lease.Microseconds()).Int64Slice()
	if err != nil {
		return budget.Settlement{}, fmt.Errorf("redisbudget: settle: %w", redisclient.Classify(err))
	}
	if len(res) == 0 || res[0] == 0 {
		return budget.Settlement{NoCounter: len(res) >= 2 && res[1] == 1, Lost: len(res) == 3 && res[2] == 1}, nil
	}
	if len(res) != 5 {
		return budget.Settlement{}, fmt.Errorf("redisbudget: settle: unexpected reply of %d values", len(res))
	}
	st := budget.NewSettlement(res[0] == 2, res[1], res[2])
	st.MoneyReserved, st.MoneyActual = res[3], res[4]
	return st, nil
}

// Warm loads the scripts into Redis, which also dials a connection, so
// that the first Reserve is a single EVALSHA round trip; then, when
// Reserve's client is a redis.UniversalClient, it establishes that
// client's connection pools (redisclient.WarmPool), so that a burst of first
// reservations finds connections ready. Call it in the background at
// start; the settle client's owner warms that one.
func (s *Store) Warm(ctx context.Context) error {
	for _, sc := range []*redis.Script{reserveScript, settleScript} {
		if err := sc.Load(ctx, s.fast).Err(); err != nil {
			return fmt.Errorf("redisbudget: warm: %w", err)
		}
	}
	if rc, ok := s.fast.(redis.UniversalClient); ok {
		if err := redisclient.WarmPool(ctx, rc); err != nil {
			return fmt.Errorf("redisbudget: warm: %w", err)
		}
	}
	return nil
}
