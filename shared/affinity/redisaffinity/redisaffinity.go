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
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/affinity"
)

// Store is the Redis-backed affinity store.
type Store struct {
	c      redis.UniversalClient
	prefix string
	// PerTenant is how many records a tenant keeps; default
	// affinity.DefaultPerTenant.
	PerTenant int
}

// New uses c (the limiter's Redis, see redisstore.NewClient) with keys
// prefix + "resp:" + id, and prefix + "resp-tenant:" + tenant for each
// tenant's ids.
func New(c redis.UniversalClient, prefix string) *Store {
	return &Store{c: c, prefix: prefix}
}

func (s *Store) key(id string) string           { return s.prefix + "resp:" + id }
func (s *Store) tenantKey(tenant string) string { return s.prefix + "resp-tenant:" + tenant }

// Put records id's owner for ttl, in one pipeline (the record, the
// tenant's set of ids, its size), and trims the tenant's oldest records
// past PerTenant in a second. The keys may live in different cluster
// slots, so neither is a transaction: a race between two puts of one
// tenant can keep a record or two more than PerTenant for a moment.
func (s *Store) Put(ctx context.Context, id string, o affinity.Owner, ttl time.Duration) error {
	per := s.PerTenant
	if per <= 0 {
		per = affinity.DefaultPerTenant
	}
	now := time.Now()
	tk := s.tenantKey(o.Tenant)
	pipe := s.c.Pipeline()
	pipe.Set(ctx, s.key(id), o.Encode(), ttl)
	pipe.ZRemRangeByScore(ctx, tk, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
	pipe.ZAdd(ctx, tk, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: id})
	pipe.PExpire(ctx, tk, ttl)
	card := pipe.ZCard(ctx, tk)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisaffinity: put: %w", err)
	}
	over := card.Val() - int64(per)
	if over <= 0 {
		return nil
	}
	old, err := s.c.ZPopMin(ctx, tk, over).Result()
	if err != nil {
		return fmt.Errorf("redisaffinity: trim tenant %q: %w", o.Tenant, err)
	}
	keys := make([]string, 0, len(old))
	for _, z := range old {
		if m, ok := z.Member.(string); ok && m != id {
			keys = append(keys, s.key(m))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	pipe = s.c.Pipeline()
	for _, k := range keys {
		pipe.Del(ctx, k) // one key per command: keys may be in different slots
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisaffinity: trim tenant %q: %w", o.Tenant, err)
	}
	return nil
}

// Get returns id's owner; ok is false for an unknown or expired id.
func (s *Store) Get(ctx context.Context, id string) (affinity.Owner, bool, error) {
	v, err := s.c.Get(ctx, s.key(id)).Result()
	if errors.Is(err, redis.Nil) {
		return affinity.Owner{}, false, nil
	}
	if err != nil {
		return affinity.Owner{}, false, fmt.Errorf("redisaffinity: get: %w", err)
	}
	o, err := affinity.Decode(v)
	return o, err == nil, err
}

// Delete forgets id.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := s.c.Del(ctx, s.key(id)).Err(); err != nil {
		return fmt.Errorf("redisaffinity: delete: %w", err)
	}
	return nil
}
