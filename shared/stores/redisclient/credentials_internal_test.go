package redisclient

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/auth"
)

// listener records what a connection is told.
type listener struct {
	mu   sync.Mutex
	next []string
}

func (l *listener) OnNext(c auth.Credentials) {
	u, p := c.BasicAuth()
	l.mu.Lock()
	l.next = append(l.next, u+":"+p)
	l.mu.Unlock()
}

func (l *listener) OnError(error) {}

func (l *listener) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.next...)
}

// source is a credentials source whose password the test changes.
type source struct {
	pass  atomic.Value // string
	calls atomic.Int64
	err   atomic.Pointer[error]
	block chan struct{}
}

func newSource(pass string) *source {
	s := &source{}
	s.pass.Store(pass)
	return s
}

func (s *source) fetch(ctx context.Context) (string, string, error) {
	s.calls.Add(1)
	if s.block != nil {
		select {
		case <-s.block:
		case <-ctx.Done():
			return "", "", ctx.Err()
		}
	}
	if err := s.err.Load(); err != nil {
		return "", "", *err
	}
	return "oid", s.pass.Load().(string), nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCredentialStream(t *testing.T) {
	t.Parallel()

	t.Run("change pushed to every connection, no change pushed to none", func(t *testing.T) {
		t.Parallel()
		src := newSource("token-1")
		cs := newCredentialStream(src.fetch, 10*time.Millisecond, time.Second, time.Second)
		a, b := &listener{}, &listener{}
		c, unsubA, err := cs.Subscribe(a)
		if err != nil {
			t.Fatal(err)
		}
		if u, p := c.BasicAuth(); u != "oid" || p != "token-1" {
			t.Fatalf("first credentials %s:%s", u, p)
		}
		_, unsubB, err := cs.Subscribe(b)
		if err != nil {
			t.Fatal(err)
		}
		calls := src.calls.Load()
		eventually(t, "a few polls", func() bool { return src.calls.Load() >= calls+3 })
		if len(a.got()) != 0 || len(b.got()) != 0 {
			t.Fatalf("told of unchanged credentials: %v %v", a.got(), b.got())
		}
		src.pass.Store("token-2")
		eventually(t, "the change reaching both", func() bool { return len(a.got()) == 1 && len(b.got()) == 1 })
		if a.got()[0] != "oid:token-2" {
			t.Fatalf("pushed %v", a.got())
		}
		// A new connection logs in with the newest credentials.
		c, unsubC, err := cs.Subscribe(&listener{})
		if err != nil {
			t.Fatal(err)
		}
		if _, p := c.BasicAuth(); p != "token-2" {
			t.Fatalf("new connection got %s", p)
		}
		for _, u := range []auth.UnsubscribeFunc{unsubA, unsubB, unsubC} {
			_ = u()
		}
		if cs.running() {
			t.Fatal("poller still runs with no connection subscribed")
		}
	})

	t.Run("same listener twice is one subscription; any unsubscribe ends it", func(t *testing.T) {
		t.Parallel()
		cs := newCredentialStream(newSource("t").fetch, time.Hour, time.Second, time.Second)
		l := &listener{}
		_, u1, err := cs.Subscribe(l)
		if err != nil {
			t.Fatal(err)
		}
		_, u2, err := cs.Subscribe(l)
		if err != nil {
			t.Fatal(err)
		}
		_ = u2()
		if cs.running() {
			t.Fatal("still subscribed after one unsubscribe")
		}
		_ = u1() // a no-op now
	})

	t.Run("a failed poll keeps the current credentials", func(t *testing.T) {
		t.Parallel()
		src := newSource("good")
		cs := newCredentialStream(src.fetch, 5*time.Millisecond, time.Second, time.Second)
		l := &listener{}
		_, unsub, err := cs.Subscribe(l)
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
		down := errors.New("identity endpoint down")
		src.err.Store(&down)
		calls := src.calls.Load()
		eventually(t, "failing polls", func() bool { return src.calls.Load() >= calls+3 })
		c, unsub2, err := cs.Subscribe(&listener{})
		if err != nil {
			t.Fatalf("a new connection failed while old credentials are cached: %v", err)
		}
		defer unsub2()
		if _, p := c.BasicAuth(); p != "good" || len(l.got()) != 0 {
			t.Fatalf("credentials %q, pushes %v", p, l.got())
		}
	})

	t.Run("no credentials yet: the first connection waits at most its budget", func(t *testing.T) {
		t.Parallel()
		src := newSource("late")
		src.block = make(chan struct{})
		cs := newCredentialStream(src.fetch, time.Hour, 30*time.Millisecond, time.Second)
		start := time.Now()
		_, _, err := cs.Subscribe(&listener{})
		if !errors.Is(err, errNoCredentials) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want errNoCredentials wrapping the deadline", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Subscribe waited %v with a 30ms budget", d)
		}
		if cs.running() {
			t.Fatal("a failed subscription left the poller running")
		}
		// Warm's prime has the longer budget and gets them.
		go func() { time.Sleep(50 * time.Millisecond); close(src.block) }()
		if err := cs.prime(context.Background()); err != nil {
			t.Fatal(err)
		}
		c, unsub, err := cs.Subscribe(&listener{})
		if err != nil {
			t.Fatal(err)
		}
		defer unsub()
		if _, p := c.BasicAuth(); p != "late" {
			t.Fatalf("got %q", p)
		}
	})
}

// running reports whether the poller runs.
func (s *credentialStream) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop != nil
}
