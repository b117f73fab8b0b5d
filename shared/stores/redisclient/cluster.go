package redisclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/store"
)

// New builds the client o asks for: NewClient's single-node client, or
// with o.Cluster a Redis Cluster client tuned the same way (every node's
// connections have NewClient's timeouts, dialer, login and pool). Its URL
// is redis[s]://[user[:password]@]host:port[?addr=host:port&...], as
// go-redis ParseClusterURL reads it: one node is enough to learn the
// others. It does no I/O.
func New(o ClientOptions) (redis.UniversalClient, error) {
	if !o.Cluster {
		return NewClient(o)
	}
	if o.URL == "" {
		return nil, errors.New("store: empty Redis URL")
	}
	co, err := redis.ParseClusterURL(o.URL)
	if err != nil {
		return nil, parseError(err)
	}
	// The nodes' options are the cluster's: tune them as one node's.
	n := &redis.Options{
		Username: co.Username, Password: co.Password, TLSConfig: co.TLSConfig,
		MaxRetries: co.MaxRetries, DialerRetries: co.DialerRetries,
		DialTimeout: co.DialTimeout, ReadTimeout: co.ReadTimeout, WriteTimeout: co.WriteTimeout,
		PoolTimeout: co.PoolTimeout, MaintNotificationsConfig: co.MaintNotificationsConfig,
	}
	tune(n, o)
	co.Password, co.MaxRetries, co.DialerRetries = n.Password, n.MaxRetries, n.DialerRetries
	if co.PoolSize == 0 && o.MaxPoolSize > 0 {
		co.PoolSize = min(o.MaxPoolSize, 5*runtime.GOMAXPROCS(0)) // go-redis's cluster default
	}
	co.DialTimeout, co.ReadTimeout, co.WriteTimeout, co.PoolTimeout = n.DialTimeout, n.ReadTimeout, n.WriteTimeout, n.PoolTimeout
	co.Dialer, co.StreamingCredentialsProvider = n.Dialer, n.StreamingCredentialsProvider
	co.ContextTimeoutEnabled, co.DisableIdentity, co.MaintNotificationsConfig = n.ContextTimeoutEnabled, n.DisableIdentity, n.MaintNotificationsConfig
	return redis.NewClusterClient(co), nil
}

// ClusterNodes is how many nodes' pools Conns counts for a cluster
// client whose URL names fewer: the fewest masters a Redis Cluster has.
// The client opens a pool per master it learns (never a replica's: it
// does not read from replicas), so a larger cluster holds more.
const ClusterNodes = 3

// Conns is the most connections c's pools may hold together, hence the
// descriptors it may take: its pool size, times the nodes for a cluster
// client (those its URL names, at least ClusterNodes).
func Conns(c redis.UniversalClient) int {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		o := c.Options()
		return o.PoolSize * max(ClusterNodes, len(o.Addrs))
	}
	return 0
}

// CheckKind asks the server whether it is a Redis Cluster and reports a
// configuration error (store.ErrMisconfigured, naming ClusterSetting)
// when c's kind does not match it: a single-node client on a cluster
// node (INFO's cluster_enabled:1) would get MOVED for every key on
// another node, a cluster client on a server without cluster support
// gets no slots and fails every call. Any other failure (the store not
// reachable) is returned as it is: the kind is not known. A proxy that
// hides its shards (Azure Managed Redis's EnterpriseCluster) reports
// cluster_enabled:0 and suits a single-node client.
func CheckKind(ctx context.Context, c redis.UniversalClient) error {
	if _, ok := c.(*redis.ClusterClient); ok {
		err := c.ClusterInfo(ctx).Err()
		if hint := misconfiguration(err); hint != "" {
			return fmt.Errorf("store: %s is true but the server answered %q: set it to false: %w", ClusterSetting, err, store.ErrMisconfigured)
		}
		return err
	}
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		return err
	}
	if strings.Contains(info, "cluster_enabled:1") {
		return fmt.Errorf("store: the server is a Redis Cluster node (cluster_enabled:1) and %s is false: set it to true: %w", ClusterSetting, store.ErrMisconfigured)
	}
	return nil
}

// Gate is a go-redis hook that, once shut, fails every command of the
// clients it was added to with the configuration error it was shut with,
// without sending it: a client found not to match its server fails
// closed as misconfigured rather than reaching the wrong node. Open
// until Shut.
type Gate struct{ err atomic.Pointer[error] }

var _ redis.Hook = (*Gate)(nil)

// Shut makes every later command fail with err (a store.ErrMisconfigured).
func (g *Gate) Shut(err error) { g.err.Store(&err) }

// DialHook implements redis.Hook.
func (g *Gate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := g.err.Load(); err != nil {
			return nil, *err
		}
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook.
func (g *Gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.err.Load(); err != nil {
			cmd.SetErr(*err)
			return *err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (g *Gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.err.Load(); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(*err)
			}
			return *err
		}
		return next(ctx, cmds)
	}
}
