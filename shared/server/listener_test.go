package server

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
)

// serveListener serves h on a loopback Listener with o and idle, and
// returns its address and log.
func serveListener(t *testing.T, o ConnOptions, idle time.Duration, h http.Handler) (string, *Listener, *syncbuf.Buffer) {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	o.Log = slog.New(slog.NewJSONHandler(logs, nil))
	ln := NewListener(tcp, o)
	srv := &http.Server{Handler: h, IdleTimeout: idle, ReadHeaderTimeout: time.Minute}
	ln.Attach(srv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tcp.Addr().String(), ln, logs
}

// keptAlive opens a connection, sends one request and reads its answer,
// leaving the connection idle.
func keptAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return c
}

// closedWithin reports whether the server closed c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestListenerHighWater: at the high-water mark (80% of the cap) idle
// connections get the short idle timeout instead of the server's minute,
// and the transitions in and out are logged once each. Before issue 32
// an idle connection held its slot for the whole idle timeout.
func TestListenerHighWater(t *testing.T) {
	t.Parallel()
	const max = 10
	addr, ln, logs := serveListener(t, ConnOptions{MaxConns: max, PressureIdleTimeout: 300 * time.Millisecond}, time.Minute,
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	below := keptAlive(t, addr) // idle before the mark: shortened when it is reached
	var conns []net.Conn
	for range max*highWater/100 - 1 {
		conns = append(conns, keptAlive(t, addr))
	}
	for i, c := range append(conns, below) {
		if !closedWithin(c, 10*time.Second) {
			t.Fatalf("idle connection %d open after 10s above the high-water mark (idle timeout 1m)", i)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if open, _, _, _ := ln.Counts(); open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("connections still counted open after they closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Below the mark the idle timeout is the server's again.
	calm := keptAlive(t, addr)
	if closedWithin(calm, time.Second) {
		t.Error("below the high-water mark an idle connection was closed early")
	}
	out := logs.String()
	if n := strings.Count(out, "above the high-water mark"); n != 1 {
		t.Errorf("%d lines for entering the high-water regime, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "back below the high-water mark"); n != 1 {
		t.Errorf("%d lines for leaving it, want 1:\n%s", n, out)
	}
}

// TestListenerLingeringGivesWay: a connection lingering after an early
// answer is idle (its answer is out): at the cap it gives way to a new
// connection instead of holding its slot for lingering_time.
func TestListenerLingeringGivesWay(t *testing.T) {
	t.Parallel()
	addr, ln, _ := serveListener(t, ConnOptions{MaxConns: 1, LingerTime: time.Minute, LingerTimeout: time.Minute}, time.Minute,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c := connOf(r); c != nil {
				c.linger.Store(true)
			}
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusUnauthorized)
		}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A body announced and trickled: the server answers early and lingers.
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\nab"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("early answer: %v %v", err, resp)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, idle, _, _ := ln.Counts(); idle == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lingering connection is not counted idle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	next := keptAlive(t, addr) // served: the lingering one gave way
	_ = next
	if _, _, _, evicted := ln.Counts(); evicted != 1 {
		t.Errorf("evicted %d, want the lingering connection", evicted)
	}
}

// TestListenerPressureAfterIdleHook: the pressure regime that begins
// between net/http's StateIdle hook and its idle read deadline still
// shortens that deadline. Before the fix the arm followed the pressure
// at the hook, the minute-long deadline overwrote the watermark's short
// one, and the connection held its slot (TestListenerHighWater failed
// one fresh-machine run in a few).
func TestListenerPressureAfterIdleHook(t *testing.T) {
	t.Parallel()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := NewListener(tcp, ConnOptions{MaxConns: 10, PressureIdleTimeout: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = ln.Close() })
	client, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	ln.ConnState(nc, http.StateIdle) // no pressure yet
	ln.mu.Lock()
	ln.pressure.Store(true) // the regime begins (the watermark's own pass is beside the point)
	ln.mu.Unlock()
	if err := nc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil { // net/http's idle deadline
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := nc.Read(make([]byte, 1)); done <- err }()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read: %v, want the shortened idle deadline's timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle deadline set after the regime began was not shortened (still waiting after 10s; the minute-long one stands)")
	}
}

// TestListenerPlainConns: the listener's connections read and write with
// raw system calls (package rawconn, Linux's) unless PlainConns keeps
// net's own *net.TCPConn, with a cap and without, and either way they
// serve.
func TestListenerPlainConns(t *testing.T) {
	t.Parallel()
	raw := runtime.GOOS == "linux"
	for _, c := range []struct {
		name      string
		o         ConnOptions
		wantPlain bool
	}{
		{"raw", ConnOptions{MaxConns: 4}, !raw},
		{"raw without a cap", ConnOptions{MaxConns: -1}, !raw},
		{"plain", ConnOptions{MaxConns: 4, PlainConns: true}, true},
		{"plain without a cap", ConnOptions{MaxConns: -1, PlainConns: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			plain := make(chan bool, 1)
			addr, _, _ := serveListener(t, c.o, time.Minute,
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					conn := connOf(r)
					if conn == nil {
						t.Error("the request's connection is not the listener's")
						return
					}
					_, ok := conn.Conn.(*net.TCPConn)
					plain <- ok
				}))
			_ = keptAlive(t, addr)
			if got := <-plain; got != c.wantPlain {
				t.Fatalf("net's own connection: %v, want %v", got, c.wantPlain)
			}
		})
	}
}
