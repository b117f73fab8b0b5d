package redisclient

import (
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/store"
)

// Queued returns err marked with store.ErrQueued when it is go-redis's
// pool timeout (ErrPoolTimeout: no pooled connection within the pool
// timeout, the gateway's own queue rather than the store), so that a
// guard's breaker counts it for nothing; otherwise err itself. The
// message stays err's, and errors.Is still finds ErrPoolTimeout. Every
// Redis store passes it what a guarded call failed with.
func Queued(err error) error {
	if err == nil || !errors.Is(err, redis.ErrPoolTimeout) {
		return err
	}
	return queued{err}
}

// queued is a pool timeout marked with store.ErrQueued.
type queued struct{ error }

func (q queued) Unwrap() []error { return []error{q.error, store.ErrQueued} }
