package redisclient

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/store"
)

// ClusterSetting names the store section's setting that picks the client
// kind, for the messages of the configuration errors that it fixes.
const ClusterSetting = "store.redis_cluster"

// Classify returns err marked for a guard's breaker, its message kept and
// its causes still found by errors.Is: go-redis's pool timeout
// (ErrPoolTimeout: no pooled connection within the pool timeout, the
// gateway's own queue rather than the store) with store.ErrQueued; a
// Redis Cluster's answer that the gateway's configuration is wrong with
// store.ErrMisconfigured and what to fix: MOVED or ASK (a single-node
// client on a cluster node, for a key on another node), CROSSSLOT (one
// script's keys in several slots), and a cluster client's "cluster
// support disabled" (a cluster client on a server that is not one).
// Otherwise err itself. Every Redis store passes it what a guarded call
// failed with.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.ErrPoolTimeout) {
		return marked{err, store.ErrQueued}
	}
	if hint := misconfiguration(err); hint != "" {
		return misconfigured{err, hint}
	}
	return err
}

// misconfiguration is what to fix when err is a server's answer that the
// client kind or the keys do not suit it; "" for any other error.
func misconfiguration(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return ""
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "MOVED "), strings.HasPrefix(msg, "ASK "):
		return "the Redis is a cluster and this key is on another node: set " + ClusterSetting + ": true"
	case strings.HasPrefix(msg, "CROSSSLOT"):
		return "one call's keys span the slots of a clustered Redis: their hash tags must match"
	case strings.Contains(msg, "cluster support disabled"):
		return "the Redis is not a cluster: set " + ClusterSetting + ": false"
	}
	return ""
}

// marked is an error with a sentinel of package store beside its cause.
type marked struct {
	error
	mark error
}

func (m marked) Unwrap() []error { return []error{m.error, m.mark} }

// misconfigured is a configuration error: the server's answer and what
// to fix.
type misconfigured struct {
	error
	hint string
}

func (m misconfigured) Error() string   { return m.error.Error() + ": " + m.hint }
func (m misconfigured) Unwrap() []error { return []error{m.error, store.ErrMisconfigured} }
