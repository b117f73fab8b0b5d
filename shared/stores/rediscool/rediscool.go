// Package rediscool shares the cooldowns backends ask for between
// replicas through the limiter's Redis: one key per endpoint whose TTL is
// what is left of its cooldown, set only when that lengthens it, so a new
// cooldown never shortens a longer one on any replica. TTLs, not stored
// times: replicas' clocks need not agree.
package rediscool

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

// Store implements route.Shared on Redis.
type Store struct {
	c      redis.UniversalClient
	prefix string
	guard  *store.Guard
	keys   sync.Map // *route.Pool → []string: its endpoints' keys, in config order
}

var _ route.Shared = (*Store)(nil)

// extend sets KEYS[1] to live ARGV[1] ms unless it already lives longer.
var extend = redis.NewScript(`
local left = redis.call('PTTL', KEYS[1])
if left < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
  return 1
end
return 0`)

// left returns each key's PTTL (negative = none): one round trip for a
// whole pool. A pool's keys share its hash tag (Store.key), so a Redis
// Cluster, or a proxy over shards such as Azure Managed Redis's
// EnterpriseCluster, keeps them in one slot and serves them in one
// script rather than refusing it with CROSSSLOT.
var left = redis.NewScript(`
local r = {}
for i, k in ipairs(KEYS) do r[i] = redis.call('PTTL', k) end
return r`)

// New uses c (a client whose answer timeout suits a per-request read,
// see redisclient.New) with keys prefix + "cool:{" + pool + "}|" +
// endpoint: the pool's name is their hash tag, so one pool's keys are in
// one cluster slot.
// Calls go through a circuit breaker and fail open: a replica that cannot
// reach the store routes on its own view, which holds every cooldown it
// saw itself.
func New(c redis.UniversalClient, prefix string, log *slog.Logger) *Store {
	return &Store{c: c, prefix: prefix, guard: store.NewGuard("rediscool", store.PolicyOpen, store.NewBreaker(0, 0), log)}
}

// poolKeys is p's endpoint keys, built once per pool.
func (s *Store) poolKeys(p *route.Pool) []string {
	if ks, ok := s.keys.Load(p); ok {
		return ks.([]string)
	}
	ks := make([]string, len(p.Endpoints))
	for i, e := range p.Endpoints {
		ks[i] = s.key(e)
	}
	s.keys.Store(p, ks)
	return ks
}

// key is e's key, under its pool's hash tag. A pool name holding a brace
// still tags the key with one slot per pool (Redis hashes up to the first
// "}" after the first "{"), though not its whole name.
func (s *Store) key(e *route.Endpoint) string {
	return s.prefix + "cool:{" + e.Pool + "}|" + e.Name
}

// Publish records that e cools for d from now, unless a longer cooldown
// is recorded.
func (s *Store) Publish(ctx context.Context, e *route.Endpoint, d time.Duration) error {
	ms := d.Milliseconds()
	if ms <= 0 {
		return nil
	}
	err := s.guard.Call(ctx, "publish", 0, func(ctx context.Context) error {
		return redisclient.Classify(extend.Run(ctx, s.c, []string{s.key(e)}, ms).Err())
	})
	if err != nil {
		return fmt.Errorf("rediscool: publish %s: %w", e.Name, err)
	}
	return nil
}

// Fetch reads what is left of every cooldown of p's endpoints.
func (s *Store) Fetch(ctx context.Context, p *route.Pool, dst []time.Duration) error {
	ks := s.poolKeys(p)
	var got []int64
	err := s.guard.Call(ctx, "fetch", 0, func(ctx context.Context) error {
		var err error
		got, err = left.Run(ctx, s.c, ks).Int64Slice()
		return redisclient.Classify(err)
	})
	if err != nil {
		return fmt.Errorf("rediscool: fetch %s: %w", p.Name, err)
	}
	for i := range dst {
		dst[i] = 0
		if i < len(got) && got[i] > 0 {
			dst[i] = time.Duration(got[i]) * time.Millisecond
		}
	}
	return nil
}
