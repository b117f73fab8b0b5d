package listener

import (
	"bufio"
	"errors"
	"fmt"
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
func serveListener(t *testing.T, o Options, idle time.Duration, h http.Handler) (string, *Listener, *syncbuf.Buffer) {
	t.Helper()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	o.Log = slog.New(slog.NewJSONHandler(logs, nil))
	ln := New(tcp, o)
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
// and the transitions in and out are logged once each. Without the
// shortened timeout an idle connection held its slot for the whole idle
// timeout, and new connections were refused meanwhile.
func TestListenerHighWater(t *testing.T) {
	t.Parallel()
	const max = 10
	addr, ln, logs := serveListener(t, Options{MaxConns: max, PressureIdleTimeout: 300 * time.Millisecond}, time.Minute,
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
	addr, ln, _ := serveListener(t, Options{MaxConns: 1, LingerTime: time.Minute, LingerTimeout: time.Minute}, time.Minute,
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Linger(r.Context())
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
	ln := New(tcp, Options{MaxConns: 10, PressureIdleTimeout: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
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
		o         Options
		wantPlain bool
	}{
		{"raw", Options{MaxConns: 4}, !raw},
		{"raw without a cap", Options{MaxConns: -1}, !raw},
		{"plain", Options{MaxConns: 4, PlainConns: true}, true},
		{"plain without a cap", Options{MaxConns: -1, PlainConns: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			plain := make(chan bool, 1)
			addr, _, _ := serveListener(t, c.o, time.Minute,
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					conn := connOf(r.Context())
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

// TestDefaults: zero Options take the defaults the config file documents
// for the fields the gateway wires into them.
func TestDefaults(t *testing.T) {
	o := Options{}.WithDefaults()
	if o.LingerTime != 30*time.Second || o.LingerTimeout != 5*time.Second || o.LingerBytes != 64<<20 || o.MaxConns != DefaultMaxConns || o.MaxPending != DefaultMaxConns/4 {
		t.Fatalf("Options defaults: %+v", o)
	}
}

// TestListenerRefusal: a connection beyond the cap, with none idle to
// give way, is answered with Options.Refusal rendered for the cap, byte
// for byte, after it sent its request, and closed; without Refusal, with a
// bare 503.
func TestListenerRefusal(t *testing.T) {
	t.Parallel()
	rendered := func(maxConns int) []byte {
		body := fmt.Sprintf("cap %d", maxConns)
		return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	for _, c := range []struct {
		name    string
		refusal func(int) []byte
		want    string
	}{
		{"bare", nil, bareRefusal},
		{"rendered", rendered, string(rendered(1))},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			busy, release := make(chan struct{}), make(chan struct{})
			addr, _, _ := serveListener(t, Options{MaxConns: 1, Refusal: c.refusal}, time.Minute,
				http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
					close(busy)
					<-release
				}))
			defer close(release)
			held, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			if _, err := io.WriteString(held, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			<-busy // the one slot is busy: nothing can give way
			refused, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer refused.Close()
			if _, err := io.WriteString(refused, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = refused.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(refused)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("refusal %q, want %q", got, c.want)
			}
		})
	}
}
