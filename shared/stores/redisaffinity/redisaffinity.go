// Package redisaffinity keeps affinity records in Redis, shared by every
// replica and surviving scale-to-zero: one pipelined write per response,
// one GET per follow-up.
//
// Capacity is per tenant, as in the memory store: each tenant's ids are
// also kept in a sorted set by expiry, and a tenant past PerTenant loses
// its own oldest records, never another tenant's. A record that is gone
// (expired, evicted by Redis, lost with a restart that had no persistence)
// fails closed: the server refuses its id to everyone.
package redisaffinity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

var _ affinity.Store = (*Store)(nil)

// Store is the Redis-backed affinity store.
type Store struct {
	c      redis.UniversalClient
	prefix string
	guard  *store.Guard
	// PerTenant is how many records a tenant keeps; default
	// affinity.DefaultPerTenant.
	PerTenant int
}

// New uses c (the limiter's Redis, see redisclient.NewClient) with keys
// prefix + "resp:" + id, and prefix + "resp-tenant:" + tenant for each
// tenant's ids. Every call goes through a circuit breaker (the limiter's
// kind, shared/store, with its defaults): while Redis is failing, calls
// fail at once instead of after their timeout, and the server's policy for
// an unreadable record applies (a follow-up is refused: isolation fails
// closed; an unrecorded response is logged and its creator told). log,
// when not nil, is told when the breaker opens and closes.
func New(c redis.UniversalClient, prefix string, log *slog.Logger) *Store {
	// Closed: the server refuses what it cannot read (isolation fails
	// closed), so no call here goes ahead without the store.
	return &Store{c: c, prefix: prefix, guard: store.NewGuard("redisaffinity", store.PolicyClosed, store.NewBreaker(0, 0), log)}
}

func (s *Store) key(id string) string           { return s.prefix + "resp:" + id }
func (s *Store) tenantKey(tenant string) string { return s.prefix + "resp-tenant:" + tenant }

// call runs one Redis call through the breaker; ctx is the caller's.
func (s *Store) call(ctx context.Context, op string, fn func() error) error {
	if err := s.guard.Call(ctx, op, 0, func(context.Context) error { return redisclient.Classify(fn()) }); err != nil {
		return fmt.Errorf("redisaffinity: %s: %w", op, err)
	}
	return nil
}

// putScript sets KEYS[1] (a record) to ARGV[1] for ARGV[2] ms unless it
// holds another tenant's record: ARGV[3] is the tenant's prefix of the
// encoded form (tenant + separator), which no other tenant's record starts
// with. It returns 1 when it wrote, 0 when the id is someone else's. One
// key, so any cluster slot serves it; compare and set in one step, so two
// replicas racing for one id cannot both win (a plain SET would let a
// second tenant overwrite the owner).
const putScript = `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[3]) ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`

// trimScript deletes KEYS[1] only when it is ARGV[1]'s (the tenant's
// prefix, as in putScript): a tenant's trim never removes an id that its
// set holds but another tenant owns.
const trimScript = `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`

// Put records id's owner for ttl, in one pipeline (the record, compared
// and set by putScript; the tenant's set of ids; its size), and trims the
// tenant's oldest records past PerTenant in a second. An id already
// recorded for another tenant is not written: Put returns an error
// wrapping affinity.ErrTaken and takes the id out of the tenant's set
// again. The keys may live in different cluster slots, so the pipeline is
// not a transaction: a race between two puts of one tenant can keep a
// record or two more than PerTenant for a moment. The scripts are sent
// whole (EVAL, not EVALSHA): a few hundred bytes, and a pipeline cannot
// fall back from NOSCRIPT.
func (s *Store) Put(ctx context.Context, id string, o affinity.Owner, ttl time.Duration) error {
	per := s.PerTenant
	if per <= 0 {
		per = affinity.DefaultPerTenant
	}
	ms := ttl.Milliseconds()
	if ms <= 0 {
		ms = 1
	}
	var over int64
	taken := false
	tk := s.tenantKey(o.Tenant)
	own := ownPrefix(o.Tenant)
	err := s.call(ctx, "put", func() error {
		now := time.Now()
		pipe := s.c.Pipeline()
		set := pipe.Eval(ctx, putScript, []string{s.key(id)}, o.Encode(), ms, own)
		pipe.ZRemRangeByScore(ctx, tk, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		pipe.ZAdd(ctx, tk, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: id})
		pipe.PExpire(ctx, tk, ttl)
		card := pipe.ZCard(ctx, tk)
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		if n, err := set.Int64(); err != nil {
			return err
		} else if n == 0 {
			taken = true
			return s.c.ZRem(ctx, tk, id).Err()
		}
		over = card.Val() - int64(per)
		return nil
	})
	if err != nil {
		return err
	}
	if taken {
		return fmt.Errorf("redisaffinity: put %q: %w", id, affinity.ErrTaken)
	}
	if over <= 0 {
		return nil
	}
	return s.call(ctx, "trim", func() error {
		old, err := s.c.ZPopMin(ctx, tk, over).Result()
		if err != nil {
			return err
		}
		pipe := s.c.Pipeline()
		n := 0
		for _, z := range old {
			if m, ok := z.Member.(string); ok && m != id {
				// One key per command: keys may be in different slots.
				pipe.Eval(ctx, trimScript, []string{s.key(m)}, own)
				n++
			}
		}
		if n == 0 {
			return nil
		}
		_, err = pipe.Exec(ctx)
		return err
	})
}

// ownPrefix is how every record of tenant starts (Owner.Encode).
func ownPrefix(tenant string) string { return affinity.Owner{Tenant: tenant}.Encode()[:len(tenant)+1] }

// Get returns id's owner; ok is false for an unknown or expired id.
func (s *Store) Get(ctx context.Context, id string) (affinity.Owner, bool, error) {
	var v string
	found := true
	err := s.call(ctx, "get", func() error {
		var err error
		v, err = s.c.Get(ctx, s.key(id)).Result()
		if errors.Is(err, redis.Nil) {
			found = false // an answer: Redis is fine
			return nil
		}
		return err
	})
	if err != nil || !found {
		return affinity.Owner{}, false, err
	}
	o, err := affinity.Decode(v)
	return o, err == nil, err
}

// Delete forgets id.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.call(ctx, "delete", func() error { return s.c.Del(ctx, s.key(id)).Err() })
}

// Breaker is the store's breaker state now and how often it opened.
func (s *Store) Breaker() (store.BreakerState, uint64) { return s.guard.Breaker().Snapshot() }
