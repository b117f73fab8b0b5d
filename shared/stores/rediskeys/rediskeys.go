// Package rediskeys keeps the gateway keys made at run time in Redis,
// shared by every replica: one hash whose fields are the keys' public
// ids and whose values are their records (digests, never secrets). A
// verification is one HGET by public id, on a cache miss only
// (keys.Verifier); a revocation is one HDEL.
package rediskeys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

// Store implements keys.Store on Redis.
type Store struct {
	c    redis.UniversalClient
	hash string
	now  func() time.Time
	// guard fails closed: a key the store cannot be asked about is not
	// served (keys.Verifier answers 503).
	guard *store.Guard
}

var _ keys.Store = (*Store)(nil)

// New uses c with the hash prefix + "keys:{keys}": one key, in one
// cluster slot (its hash tag), so a Redis Cluster serves every call.
func New(c redis.UniversalClient, prefix string, log *slog.Logger) *Store {
	return &Store{c: c, hash: prefix + "keys:{keys}", now: time.Now,
		guard: store.NewGuard("rediskeys", store.PolicyClosed, store.NewBreaker(0, 0), log)}
}

func (s *Store) call(ctx context.Context, op string, fn func(context.Context) error) error {
	err := s.guard.Call(ctx, op, 0, func(ctx context.Context) error { return redisclient.Classify(fn(ctx)) })
	if err != nil {
		return fmt.Errorf("rediskeys: %s: %w", op, err)
	}
	return nil
}

// Get returns id's record (past its expiry or not: the verifier
// judges); keys.ErrNotFound when none.
func (s *Store) Get(ctx context.Context, id string) (keys.Record, error) {
	var raw string
	err := s.call(ctx, "get", func(ctx context.Context) error {
		var err error
		raw, err = s.c.HGet(ctx, s.hash, id).Result()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	})
	if err != nil {
		return keys.Record{}, err
	}
	if raw == "" {
		return keys.Record{}, keys.ErrNotFound
	}
	var r keys.Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return keys.Record{}, fmt.Errorf("rediskeys: record %s: %w", id, err)
	}
	return r, nil
}

// Put stores r under its id, replacing what was there.
func (s *Store) Put(ctx context.Context, r keys.Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("rediskeys: %w", err)
	}
	return s.call(ctx, "put", func(ctx context.Context) error { return s.c.HSet(ctx, s.hash, r.ID, b).Err() })
}

// Delete removes id.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.call(ctx, "delete", func(ctx context.Context) error { return s.c.HDel(ctx, s.hash, id).Err() })
}

// IDs lists the ids of the keys held, one HKEYS (keys.IDLister): the
// verifier reads it once per cache TTL, so an id nobody holds costs no
// read per attempt.
func (s *Store) IDs(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.call(ctx, "ids", func(ctx context.Context) error {
		var err error
		ids, err = s.c.HKeys(ctx, s.hash).Result()
		return err
	})
	return ids, err
}

// List returns the live records by id, and deletes those past their
// expiry.
func (s *Store) List(ctx context.Context) ([]keys.Record, error) {
	var all map[string]string
	err := s.call(ctx, "list", func(ctx context.Context) error {
		var err error
		all, err = s.c.HGetAll(ctx, s.hash).Result()
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]keys.Record, 0, len(all))
	var gone []string
	for id, raw := range all {
		var r keys.Record
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			return nil, fmt.Errorf("rediskeys: record %s: %w", id, err)
		}
		if !s.now().Before(r.Expires) {
			gone = append(gone, id)
			continue
		}
		out = append(out, r)
	}
	if len(gone) > 0 {
		_ = s.call(ctx, "prune", func(ctx context.Context) error { return s.c.HDel(ctx, s.hash, gone...).Err() })
	}
	keys.SortByID(out)
	return out, nil
}
