package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
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
	// Timeout is the budget of one limiter call. Reads, writes and waiting
	// for a pooled connection are bounded by it (the caller's context deadline
	// bounds them too). Default 50ms.
	Timeout time.Duration
}

// NewClient builds a Redis client tuned for a limiter with a tight budget.
// It does no I/O: the first command dials.
//
//   - no retries: a retry cannot fit in the budget, and the caller's failure
//     policy and breaker decide what a failure means;
//   - one dial attempt per command, bounded by the context (go-redis itself
//     stops dialing after PoolSize failures and probes once a second);
//   - context deadlines bound socket reads and writes;
//   - MinIdleConns 0, so nothing is dialed before it is needed (cold start);
//   - no CLIENT SETINFO and no maintenance-notification handshake, so a new
//     connection costs the dial, TLS and HELLO/AUTH only;
//   - with Credentials, streaming credentials: open connections re-AUTH when
//     the password changes (see ClientOptions.Credentials).
//
// The default pool (10 per GOMAXPROCS) suits a single-core replica.
func NewClient(o ClientOptions) (*redis.Client, error) {
	if o.URL == "" {
		return nil, errors.New("redisstore: empty Redis URL")
	}
	opts, err := redis.ParseURL(o.URL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			// url.Error quotes the whole URL, password included.
			return nil, fmt.Errorf("redisstore: parse Redis URL: %w", uerr.Err)
		}
		return nil, fmt.Errorf("redisstore: parse Redis URL: %w", err)
	}
	if o.Password != "" {
		opts.Password = o.Password
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 50 * time.Millisecond
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = -1
	}
	if opts.DialerRetries == 0 {
		opts.DialerRetries = 1
	}
	if opts.DialTimeout == 0 {
		// The context bounds a dial within a take; this bounds Warm's and
		// go-redis' own background probes.
		opts.DialTimeout = max(timeout, 2*time.Second)
	}
	if opts.ReadTimeout == 0 {
		opts.ReadTimeout = timeout
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = timeout
	}
	if opts.PoolTimeout == 0 {
		opts.PoolTimeout = timeout
	}
	if o.Credentials != nil {
		interval := o.CredentialsInterval
		if interval <= 0 {
			interval = DefaultCredentialsInterval
		}
		// A new connection waits for its first login no longer than a take
		// may take; Warm and the background poll wait up to DialTimeout.
		opts.StreamingCredentialsProvider = newCredentialStream(o.Credentials, interval, timeout, opts.DialTimeout)
	}
	opts.ContextTimeoutEnabled = true
	opts.DisableIdentity = true
	if opts.MaintNotificationsConfig == nil {
		opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	return redis.NewClient(opts), nil
}
