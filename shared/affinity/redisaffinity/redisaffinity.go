// Package redisaffinity keeps affinity records in Redis, shared by every
// replica and surviving scale-to-zero: one SET with EX per response, one GET
// per follow-up.
package redisaffinity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/breaker"
)

// Store is the Redis-backed affinity store.
type Store struct {
	c       redis.UniversalClient
	prefix  string
	breaker *breaker.Breaker
	log     *slog.Logger
}

// New uses c (the limiter's Redis, see redisstore.NewClient) with keys
// prefix + "resp:" + id. Every call goes through a circuit breaker (the
// limiter's kind, shared/breaker, with its defaults): while Redis is
// failing, calls fail at once instead of after their timeout, and the
// server's policy for an unreadable record applies (a follow-up is refused:
// isolation fails closed; an unrecorded response is logged). log, when not
// nil, is told when the breaker opens and closes.
func New(c redis.UniversalClient, prefix string, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{c: c, prefix: prefix + "resp:", breaker: breaker.New(0, 0), log: log}
}

// call runs one Redis call through the breaker; ctx is the caller's.
func (s *Store) call(ctx context.Context, op string, fn func() error) error {
	change, err := s.breaker.Call(ctx, fn)
	switch change {
	case breaker.Opened:
		s.log.Warn("redisaffinity: store failing, breaker open", "op", op, "cooldown", s.breaker.Cooldown(), "err", err)
	case breaker.Recovered:
		s.log.Info("redisaffinity: store recovered, breaker closed")
	}
	if err != nil {
		return fmt.Errorf("redisaffinity: %s: %w", op, err)
	}
	return nil
}

// Put records id's owner for ttl.
func (s *Store) Put(ctx context.Context, id string, o affinity.Owner, ttl time.Duration) error {
	return s.call(ctx, "put", func() error { return s.c.Set(ctx, s.prefix+id, o.Encode(), ttl).Err() })
}

// Get returns id's owner; ok is false for an unknown or expired id.
func (s *Store) Get(ctx context.Context, id string) (affinity.Owner, bool, error) {
	var v string
	found := true
	err := s.call(ctx, "get", func() error {
		var err error
		v, err = s.c.Get(ctx, s.prefix+id).Result()
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
	return s.call(ctx, "delete", func() error { return s.c.Del(ctx, s.prefix+id).Err() })
}

// Breaker is the store's breaker state now and how often it opened.
func (s *Store) Breaker() (breaker.State, uint64) { return s.breaker.Snapshot() }
