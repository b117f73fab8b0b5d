package redisclient

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// ticks lets the poller's ticker fire n times on the bubble's clock and
// returns once the poller has handled each (or is blocked elsewhere).
func ticks(n int, interval time.Duration) {
	time.Sleep(time.Duration(n) * interval)
	synctest.Wait()
}

// TestCredentialStream runs each case in a synctest bubble: the poller's
// ticker and the fetch budgets are timers on the bubble's clock, so a
// case waits for exactly the ticks it needs instead of polling real time.
func TestCredentialStream(t *testing.T) {
	t.Parallel()

	t.Run("change pushed to every connection, no change pushed to none", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, changePushed)
	})
	t.Run("same listener twice is one subscription; any unsubscribe ends it", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, sameListenerTwice)
	})
	t.Run("a failed poll keeps the current credentials", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, failedPollKeeps)
	})
	t.Run("no credentials yet: the first connection waits at most its budget", func(t *testing.T) {
		t.Parallel()
		synctest.Test(t, firstConnectionWaits)
	})
}

func changePushed(t *testing.T) {
	const interval = 10 * time.Millisecond
	src := newSource("token-1")
	cs := newCredentialStream(src.fetch, interval, time.Second, time.Second)
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
	ticks(3, interval)
	if got := src.calls.Load(); got < calls+3 {
		t.Fatalf("%d polls in three ticks, want 3", got-calls)
	}
	if len(a.got()) != 0 || len(b.got()) != 0 {
		t.Fatalf("told of unchanged credentials: %v %v", a.got(), b.got())
	}
	src.pass.Store("token-2")
	ticks(1, interval)
	if len(a.got()) != 1 || len(b.got()) != 1 || a.got()[0] != "oid:token-2" {
		t.Fatalf("one tick after the change, pushed %v and %v; want oid:token-2 to each once", a.got(), b.got())
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
}

func sameListenerTwice(t *testing.T) {
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
}

func failedPollKeeps(t *testing.T) {
	const interval = 5 * time.Millisecond
	src := newSource("good")
	cs := newCredentialStream(src.fetch, interval, time.Second, time.Second)
	l := &listener{}
	_, unsub, err := cs.Subscribe(l)
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	down := errors.New("identity endpoint down")
	src.err.Store(&down)
	calls := src.calls.Load()
	ticks(3, interval)
	if got := src.calls.Load(); got < calls+3 {
		t.Fatalf("%d failing polls in three ticks, want 3", got-calls)
	}
	c, unsub2, err := cs.Subscribe(&listener{})
	if err != nil {
		t.Fatalf("a new connection failed while old credentials are cached: %v", err)
	}
	defer unsub2()
	if _, p := c.BasicAuth(); p != "good" || len(l.got()) != 0 {
		t.Fatalf("credentials %q, pushes %v", p, l.got())
	}
}

func firstConnectionWaits(t *testing.T) {
	const budget = 30 * time.Millisecond
	src := newSource("late")
	src.block = make(chan struct{})
	cs := newCredentialStream(src.fetch, time.Hour, budget, time.Second)
	start := time.Now()
	_, _, err := cs.Subscribe(&listener{})
	if !errors.Is(err, errNoCredentials) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want errNoCredentials wrapping the deadline", err)
	}
	if d := time.Since(start); d != budget {
		t.Fatalf("Subscribe waited %v with a %v budget", d, budget)
	}
	if cs.running() {
		t.Fatal("a failed subscription left the poller running")
	}
	// Warm's prime has the longer budget and gets them.
	time.AfterFunc(50*time.Millisecond, func() { close(src.block) })
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
}

// running reports whether the poller runs.
func (s *credentialStream) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop != nil
}
