package redisclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/auth"
)

// DefaultCredentialsInterval is how often ClientOptions.Credentials is asked
// for newer credentials while connections are open, when
// ClientOptions.CredentialsInterval is zero. An Entra token is refreshed at
// least 5 minutes before it expires, so a 30 s poll re-authenticates every
// connection long before the old token stops being accepted.
const DefaultCredentialsInterval = 30 * time.Second

// errNoCredentials is returned to go-redis for a new connection when no
// credentials could be had within its budget.
var errNoCredentials = errors.New("store: no Redis credentials yet")

// credentialStream gives go-redis credentials that change while connections
// live: go-redis's StreamingCredentialsProvider. Each connection subscribes
// when it is dialed; when the password changes (an Entra token was
// refreshed), every subscribed connection is told and go-redis sends AUTH on
// it, without a redial. Credentials read only at dial time
// (CredentialsProviderContext) would leave a pooled connection logged in with
// its first token, which Azure Managed Redis and Azure Cache for Redis
// disconnect when that token expires.
//
// The source is a pull function, so while any connection is subscribed it is
// polled every interval and a change is pushed. A failed poll keeps the last
// credentials, which stay valid until their token expires, and is retried at
// the next tick.
type credentialStream struct {
	source func(ctx context.Context) (username, password string, err error)
	// interval is the poll period while connections are subscribed.
	interval time.Duration
	// firstWait bounds how long a new connection waits for credentials when
	// none were fetched yet: the limiter's per-call budget, so a take never
	// waits longer for a login than it would for Redis itself.
	firstWait time.Duration
	// fetchTimeout bounds one background poll and Warm's wait.
	fetchTimeout time.Duration

	mu         sync.Mutex
	creds      auth.Credentials // nil until the first successful fetch
	user, pass string
	listeners  map[auth.CredentialsListener]struct{}
	stop       chan struct{} // closes the running poller; nil when none runs
}

var _ auth.StreamingCredentialsProvider = (*credentialStream)(nil)

func newCredentialStream(source func(context.Context) (string, string, error), interval, firstWait, fetchTimeout time.Duration) *credentialStream {
	return &credentialStream{
		source:       source,
		interval:     interval,
		firstWait:    firstWait,
		fetchTimeout: fetchTimeout,
		listeners:    map[auth.CredentialsListener]struct{}{},
	}
}

// Subscribe registers a connection's listener and returns the credentials to
// log in with. Subscribing the same listener again is one subscription, and
// any of its unsubscribe functions ends it (the contract go-redis relies on).
func (s *credentialStream) Subscribe(l auth.CredentialsListener) (auth.Credentials, auth.UnsubscribeFunc, error) {
	s.mu.Lock()
	have := s.creds != nil
	s.mu.Unlock()
	if !have {
		// The first connection fetches in its own budget; it subscribes only
		// afterwards, so it is not told of the credentials it logs in with.
		ctx, cancel := context.WithTimeout(context.Background(), s.firstWait)
		_, err := s.fetch(ctx)
		cancel()
		if err != nil {
			return nil, nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners[l] = struct{}{}
	if s.stop == nil {
		s.stop = make(chan struct{})
		go s.poll(s.stop)
	}
	return s.creds, func() error { s.unsubscribe(l); return nil }, nil
}

func (s *credentialStream) unsubscribe(l auth.CredentialsListener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, l)
	if len(s.listeners) == 0 && s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
}

// prime fetches the first credentials if there are none, bounded by ctx and
// fetchTimeout: Store.Warm calls it so that the first connection does not
// have to wait for a token within a take's budget.
func (s *credentialStream) prime(ctx context.Context) error {
	s.mu.Lock()
	have := s.creds != nil
	s.mu.Unlock()
	if have {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.fetchTimeout)
	defer cancel()
	_, err := s.fetch(ctx)
	return err
}

// poll asks the source for newer credentials every interval until stop is
// closed, and pushes a change to every subscribed connection.
func (s *credentialStream) poll(stop chan struct{}) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.fetchTimeout)
		_, _ = s.fetch(ctx) // a failure keeps the current credentials
		cancel()
	}
}

// fetch reads the source and, when the credentials changed, stores them and
// tells every subscribed connection. It returns the current credentials.
func (s *credentialStream) fetch(ctx context.Context) (auth.Credentials, error) {
	user, pass, err := s.source(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoCredentials, err)
	}
	s.mu.Lock()
	if s.creds != nil && s.user == user && s.pass == pass {
		c := s.creds
		s.mu.Unlock()
		return c, nil
	}
	c := auth.NewBasicCredentials(user, pass)
	s.creds, s.user, s.pass = c, user, pass
	listeners := make([]auth.CredentialsListener, 0, len(s.listeners))
	for l := range s.listeners {
		listeners = append(listeners, l)
	}
	s.mu.Unlock()
	// A listener only marks its connection for AUTH; go-redis sends it when
	// the connection is next idle, so this never blocks on the network.
	for _, l := range listeners {
		l.OnNext(c)
	}
	return c, nil
}

// PrimeCredentials waits for the first credentials of a client NewClient
// built with Credentials (others return at once), so that the wait is
// spent in a warm-up, whose budget is the dial timeout, rather than in a
// call on the request path.
func PrimeCredentials(ctx context.Context, c interface{ Options() *redis.Options }) error {
	if cs, ok := c.Options().StreamingCredentialsProvider.(*credentialStream); ok {
		return cs.prime(ctx)
	}
	return nil
}
