// Package redisaffinity keeps affinity records in Redis, shared by every
// replica and surviving scale-to-zero: one SET with EX per response, one GET
// per follow-up.
package redisaffinity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/affinity"
)

// Store is the Redis-backed affinity store.
type Store struct {
	c      redis.UniversalClient
	prefix string
}

// New uses c (the limiter's Redis, see redisstore.NewClient) with keys
// prefix + "resp:" + id.
func New(c redis.UniversalClient, prefix string) *Store {
	return &Store{c: c, prefix: prefix + "resp:"}
}

// Put records id's owner for ttl.
func (s *Store) Put(ctx context.Context, id string, o affinity.Owner, ttl time.Duration) error {
	if err := s.c.Set(ctx, s.prefix+id, o.Encode(), ttl).Err(); err != nil {
		return fmt.Errorf("redisaffinity: put: %w", err)
	}
	return nil
}

// Get returns id's owner; ok is false for an unknown or expired id.
func (s *Store) Get(ctx context.Context, id string) (affinity.Owner, bool, error) {
	v, err := s.c.Get(ctx, s.prefix+id).Result()
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
	if err := s.c.Del(ctx, s.prefix+id).Err(); err != nil {
		return fmt.Errorf("redisaffinity: delete: %w", err)
	}
	return nil
}
