// Package redisclient builds the Redis client of every store of shared
// state (URL, TLS, credentials and their rotation, timeouts, pool
// warm-up), so that the stores on one Redis connect, log in and time out
// the same way. The stores beside it (redislimit, redisbudget,
// redisaffinity, rediscool) send their commands and scripts on its
// clients; nothing else builds one.
package redisclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/llmgw/gateway/shared/store"
)

// ClientOptions configures NewClient.
type ClientOptions struct {
	// URL is redis://[user[:password]@]host[:port][/db][?options] or
	// rediss:// for TLS, as go-redis ParseURL reads it. Options given in the
	// URL's query (pool_size, dial_timeout, ...) win over the defaults below.
	URL string
	// Password, when set, overrides the URL's password.
	Password string
	// Credentials, when set, supplies the username and password instead:
	// Azure Managed Redis and Azure Cache for Redis with Microsoft Entra ID
	// take the identity's object id as the username and an access token as
	// the password. A new connection logs in with the current credentials,
	// and every open connection sends AUTH again when they change (a token
	// refresh), so no connection outlives the token it logged in with and no
	// restart is needed. It is asked every CredentialsInterval while
	// connections are open; it should answer from memory.
	Credentials func(ctx context.Context) (username, password string, err error)
	// CredentialsInterval is how often Credentials is asked for a change.
	// Default DefaultCredentialsInterval.
	CredentialsInterval time.Duration
	// Timeout bounds the store's answer: every socket read and write on an
	// established connection (the caller's context deadline bounds them
	// too). Default store.DefaultTimeout.
	Timeout time.Duration
	// DialTimeout is the dial budget: it bounds establishing a connection
	// (dial, TLS, the first login and its round trip) and waiting for a
	// pool turn while the pool fills, none of which Timeout bounds, so a
	// cold pool on a healthy store is not mistaken for a failing one. A
	// caller whose command may wait for a connection gives its context
	// Timeout + DialTimeout. Default store.DefaultDialTimeout.
	DialTimeout time.Duration
	// Cluster, when set, makes New build a Redis Cluster client (OSS
	// cluster API: ElastiCache and MemoryDB in cluster mode, Valkey or
	// Redis with cluster-enabled, Azure Managed Redis with the OSSCluster
	// policy): it learns the slots from the URL's node and every
	// ?addr=host:port beside it, and follows MOVED and ASK. Default false:
	// one node, or a proxy that hides the shards (Azure Managed Redis's
	// EnterpriseCluster policy). The store section's redis_cluster.
	Cluster bool
	// MaxPoolSize lowers the client's pool (each node's, with Cluster)
	// to at most this many connections, hence descriptors; it never
	// raises go-redis's default (10 per GOMAXPROCS, 5 per node of a
	// cluster). Default 0: the default. A pool_size in the URL's query
	// wins.
	MaxPoolSize int
}

// NewClient builds a Redis client tuned for a store with a tight budget.
// It does no I/O: the first command dials.
//
//   - no retries: a retry cannot fit in the budget, and the caller's failure
//     policy and breaker decide what a failure means;
//   - one dial attempt per command, bounded by DialTimeout and the context
//     (go-redis itself stops dialing after PoolSize failures and probes once
//     a second);
//   - Timeout and context deadlines bound socket reads and writes, except
//     a new connection's handshake (HELLO/AUTH), which is part of
//     establishing it and gets the dial budget (establishingConn);
//   - a pool turn is waited for up to DialTimeout: while the pool fills,
//     a command waits for a connection being established;
//   - MinIdleConns 0, so nothing is dialed before it is needed (cold start);
//     WarmPool establishes the pool in the background;
//   - no CLIENT SETINFO and no maintenance-notification handshake, so a new
//     connection costs the dial, TLS and HELLO/AUTH only;
//   - with Credentials, streaming credentials: open connections re-AUTH when
//     the password changes (see ClientOptions.Credentials).
//
// The default pool (10 per GOMAXPROCS) suits a single-core replica.
func NewClient(o ClientOptions) (*redis.Client, error) {
	if o.URL == "" {
		return nil, errors.New("store: empty Redis URL")
	}
	opts, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, parseError(err)
	}
	tune(opts, o)
	return redis.NewClient(opts), nil
}

// parseError is a URL's parse error without the URL, which url.Error
// quotes whole, password included.
func parseError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return fmt.Errorf("store: parse Redis URL: %w", err)
}

// tune applies o and the store's tuning (NewClient's list) to opts, which
// the URL set: what the URL's query set wins.
func tune(opts *redis.Options, o ClientOptions) {
	if o.Password != "" {
		opts.Password = o.Password
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = store.DefaultTimeout
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = -1
	}
	if opts.DialerRetries == 0 {
		opts.DialerRetries = 1
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = o.DialTimeout
		if opts.DialTimeout <= 0 {
			opts.DialTimeout = store.DefaultDialTimeout
		}
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = timeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = timeout
	}
	if opts.PoolTimeout == 0 {
		opts.PoolTimeout = opts.DialTimeout
	}
	if opts.PoolSize == 0 && o.MaxPoolSize > 0 {
		opts.PoolSize = min(o.MaxPoolSize, 10*runtime.GOMAXPROCS(0))
	}
	if opts.Dialer == nil {
		dial, budget := redis.NewDialer(opts), opts.DialTimeout
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return establishing(c, budget), nil
		}
	}
	if o.Credentials != nil {
		interval := o.CredentialsInterval
		if interval <= 0 {
			interval = DefaultCredentialsInterval
		}
		// A new connection's first login is part of establishing it: it
		// waits up to the dial budget, as Warm and the background poll do.
		opts.StreamingCredentialsProvider = newCredentialStream(o.Credentials, interval, opts.DialTimeout, opts.DialTimeout)
	}
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true
	if opts.MaintNotificationsConfig == nil {
		opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
}

// WarmPool establishes c's pool (dial, TLS, login) at once: PoolSize PINGs
// in parallel, each of which finds no idle connection while the pool is
// empty and so establishes one, and leaves them idle in it. A burst right
// after a start, when scale-from-zero brings one, then finds connections
// ready. Call it in the background: readiness must not wait for a store.
// It reports the first failure, with how many PINGs failed.
//
// (Holding each connection with c.Conn() would pin exactly PoolSize, but
// go-redis cannot initialize a Conn's connection with streaming
// credentials: it panics, v9.23.)
// A cluster client's pool of every primary is established the same way.
func WarmPool(ctx context.Context, c redis.UniversalClient) error {
	switch c := c.(type) {
	case *redis.Client:
		return warmPool(ctx, c)
	case *redis.ClusterClient:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return warmPool(ctx, n) })
	}
	return nil
}

func warmPool(ctx context.Context, c *redis.Client) error {
	n := c.Options().PoolSize
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.Ping(ctx).Err() })
	}
	wg.Wait()
	failed, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			failed++
			first = cmp.Or(first, err)
		}
	}
	if first != nil {
		return fmt.Errorf("store: warm pool: %d of %d connections: %w", failed, n, first)
	}
	return nil
}

// establishing wraps a new connection so that its handshake, the
// round trip of HELLO/AUTH that go-redis sends before the first command,
// is bounded by the dial budget rather than the answer timeout go-redis
// sets for every read and write: until the first reply byte arrives, a
// deadline earlier than now + budget is moved to it. The handshake is part
// of establishing the connection (a TLS session's first records, a managed
// Redis checking an Entra token); a take that waits for it is waiting for a
// connection, not for a failing store. Afterwards deadlines pass
// through unchanged. A connection that go-redis can health-check (a
// syscall.Conn) stays one.
func establishing(c net.Conn, budget time.Duration) net.Conn {
	e := &establishingConn{Conn: c, budget: budget}
	if sc, ok := c.(syscall.Conn); ok {
		return &establishingSyscallConn{establishingConn: e, sc: sc}
	}
	return e
}

type establishingConn struct {
	net.Conn
	budget      time.Duration
	established atomic.Bool
}

func (c *establishingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.established.Load() {
		c.established.Store(true)
	}
	return n, err
}

func (c *establishingConn) extend(t time.Time) time.Time {
	if t.IsZero() || c.established.Load() {
		return t
	}
	if floor := time.Now().Add(c.budget); t.Before(floor) {
		return floor
	}
	return t
}

func (c *establishingConn) SetDeadline(t time.Time) error {
	return c.Conn.SetDeadline(c.extend(t))
}

func (c *establishingConn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.extend(t))
}

func (c *establishingConn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.extend(t))
}

// establishingSyscallConn keeps the socket reachable for go-redis's
// health check of idle connections.
type establishingSyscallConn struct {
	*establishingConn
	sc syscall.Conn
}

func (c *establishingSyscallConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }
