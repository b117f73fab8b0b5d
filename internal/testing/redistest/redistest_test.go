package redistest

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr := s.Addr()
	if s.URL() != "redis://"+addr {
		t.Errorf("URL() = %q, want redis://%s", s.URL(), addr)
	}
	s.Do("SET", "k", "v")
	pid := s.PID()
	if pid == 0 {
		t.Fatal("PID() = 0 while running")
	}

	s.Stop()
	if s.PID() != 0 {
		t.Error("PID() != 0 after Stop")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after Stop: err = %v, want connection refused", err)
	}
	s.Stop() // idempotent

	s.Restart()
	if s.Addr() != addr {
		t.Errorf("Restart moved the server: %s, want %s", s.Addr(), addr)
	}
	if s.PID() == pid {
		t.Error("Restart kept the old process")
	}
	s.Do("PING")
}

func TestPassword(t *testing.T) {
	t.Parallel()
	s := StartWith(t, Options{Password: "s3cret"})
	s.Do("PING") // authenticates with the password
	noAuth := &Server{t: t, port: s.port}
	if err := noAuth.do(time.Second, "SET", "k", "v"); err == nil {
		t.Error("SET without AUTH succeeded; want NOAUTH")
	}
}

// TestPause checks causality: a command sent after Pause returns waits for
// the pause to end. Only ordering is asserted (reply not before the pause
// end as measured from before Pause was sent), never an upper bound.
func TestPause(t *testing.T) {
	t.Parallel()
	s := Start(t)
	const d = 300 * time.Millisecond
	before := time.Now()
	s.Pause(d)
	s.Do("SET", "k", "v") // a write: CLIENT PAUSE ALL blocks everything
	if got := time.Since(before); got < d {
		t.Errorf("command answered %s after the pause began, before its %s end", got, d)
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	s := Start(t)
	const d = 300 * time.Millisecond
	before := time.Now()
	done := s.Sleep(d)
	if err := <-done; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	if got := time.Since(before); got < d {
		t.Errorf("DEBUG SLEEP %s answered after %s", d, got)
	}
	s.Do("PING")
}

// fatalRecorder captures a Fatalf and ends the goroutine, as testing does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestMissingBinaryFails: without redis-server the test fails (it is never
// skipped) and says how to install it.
func TestMissingBinaryFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	if !strings.Contains(rec.msg, "apt-get install -y redis-server") {
		t.Errorf("Fatalf message %q does not say how to install redis-server", rec.msg)
	}
}

// TestCluster: three primaries join into one cluster within a few
// seconds; each serves only its slots (a key of another node's slot is
// answered MOVED), and a command on two keys of different slots is
// refused with CROSSSLOT, as a managed cluster does.
func TestCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t)
	t.Logf("cluster of %d started in %s: %s", len(c.Nodes), time.Since(start), c.URL())
	moved := 0
	for _, n := range c.Nodes {
		// "a" is slot 15495, "b" 3300: every node but one owns neither.
		if err := n.do(time.Second, "SET", "a", "1"); err != nil {
			if !strings.HasPrefix(err.Error(), "MOVED 15495 ") {
				t.Fatalf("SET a on %s: %v, want MOVED 15495", n.Addr(), err)
			}
			moved++
		}
		if err := n.do(time.Second, "MSET", "a", "1", "b", "2"); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
			t.Errorf("MSET over two slots on %s: %v, want CROSSSLOT", n.Addr(), err)
		}
	}
	if moved != 2 {
		t.Errorf("%d of 3 nodes answered MOVED for one key, want 2", moved)
	}
	for _, n := range c.Nodes {
		n.Stop()
		if n.PID() != 0 {
			t.Errorf("node %s still running after Stop", n.Addr())
		}
	}
}
