//go:build linux

package rawconn_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/rawconn"
)

// pair is a loopback TCP connection: c (wrapped when raw) and its peer.
func pair(t *testing.T, raw bool) (c net.Conn, peer *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		a, _ := ln.Accept()
		accepted <- a
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-accepted
	if a == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	// No test waits forever on a broken Read or Write.
	limit := time.Now().Add(30 * time.Second)
	d.SetDeadline(limit)
	a.SetDeadline(limit)
	c = d
	if raw {
		c = rawconn.Wrap(d)
		if _, ok := c.(*rawconn.Conn); !ok {
			t.Fatalf("Wrap(%T) = %T, want *rawconn.Conn", d, c)
		}
	}
	return c, a.(*net.TCPConn)
}

// TestRoundTrip: 8 MiB each way, far more than a socket buffer holds, so
// that writes stop on EAGAIN and reads wait for data: every byte arrives,
// in order.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c, peer := pair(t, true)
	want := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuv"), 8<<20/32)
	var wg sync.WaitGroup
	var got, echoed []byte
	var werr, perr, rerr error
	wg.Go(func() { _, werr = c.Write(want) })
	wg.Go(func() {
		// The peer reads slowly at first, so the writer meets a full buffer.
		time.Sleep(20 * time.Millisecond)
		got, perr = io.ReadAll(io.LimitReader(peer, int64(len(want))))
		if perr == nil {
			_, perr = peer.Write(got)
		}
	})
	wg.Go(func() { echoed, rerr = io.ReadAll(io.LimitReader(c, int64(len(want)))) })
	wg.Wait()
	if werr != nil || perr != nil || rerr != nil {
		t.Fatalf("write %v, peer %v, read %v", werr, perr, rerr)
	}
	if !bytes.Equal(got, want) || !bytes.Equal(echoed, want) {
		t.Fatalf("peer got %d bytes, echo %d, want %d of the same", len(got), len(echoed), len(want))
	}
}

// TestAsNet: each failure reads as net's own TCPConn reports it (same
// message, same errors.Is targets, same Timeout), wrapped or not.
func TestAsNet(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		do    func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error)
		is    error // errors.Is target, nil: none
		n     int
		nilOK bool
	}{
		{"EOF", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			peer.Close()
			return c.Read(make([]byte, 8))
		}, io.EOF, 0, false},
		{"data then EOF", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			peer.Write([]byte("hi"))
			peer.Close()
			time.Sleep(10 * time.Millisecond)
			return c.Read(make([]byte, 8))
		}, nil, 2, true},
		{"read deadline", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			return c.Read(make([]byte, 8))
		}, os.ErrDeadlineExceeded, 0, false},
		{"read deadline passed", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			c.SetReadDeadline(time.Unix(1, 0))
			return c.Read(make([]byte, 8))
		}, os.ErrDeadlineExceeded, 0, false},
		{"read after close", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			c.Close()
			return c.Read(make([]byte, 8))
		}, net.ErrClosed, 0, false},
		{"close while reading", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			time.AfterFunc(20*time.Millisecond, func() { c.Close() })
			return c.Read(make([]byte, 8))
		}, net.ErrClosed, 0, false},
		{"reset", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			peer.SetLinger(0) // close sends RST
			peer.Close()
			time.Sleep(10 * time.Millisecond)
			return c.Read(make([]byte, 8))
		}, syscall.ECONNRESET, 0, false},
		{"write after reset", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			peer.SetLinger(0)
			peer.Close()
			time.Sleep(10 * time.Millisecond)
			return c.Write([]byte("x"))
		}, syscall.ECONNRESET, 0, false},
		{"write deadline on a full buffer", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			return c.Write(make([]byte, 64<<20)) // the peer never reads
		}, os.ErrDeadlineExceeded, -1, false},
		{"write after close", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			c.Close()
			return c.Write([]byte("x"))
		}, net.ErrClosed, 0, false},
		{"empty read", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			return c.Read(nil)
		}, nil, 0, true},
		{"empty write", func(t *testing.T, c net.Conn, peer *net.TCPConn) (int, error) {
			return c.Write(nil)
		}, nil, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var msgs [2]string
			var ns [2]int
			for i, raw := range []bool{false, true} {
				c, peer := pair(t, raw)
				n, err := tc.do(t, c, peer)
				ns[i] = n
				if tc.nilOK {
					if err != nil {
						t.Fatalf("raw=%v: %v, want none", raw, err)
					}
					if n != tc.n {
						t.Fatalf("raw=%v: n = %d, want %d", raw, n, tc.n)
					}
					continue
				}
				if err == nil {
					t.Fatalf("raw=%v: no error", raw)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("raw=%v: %v is not %v", raw, err, tc.is)
				}
				if tc.n >= 0 && n != tc.n {
					t.Errorf("raw=%v: n = %d, want %d", raw, n, tc.n)
				}
				var ne net.Error
				if tc.is == os.ErrDeadlineExceeded && (!errors.As(err, &ne) || !ne.Timeout()) {
					t.Errorf("raw=%v: %v: not a net.Error that timed out", raw, err)
				}
				// Ports differ between the two pairs: compare the text with them out.
				msgs[i] = portless(err.Error(), c)
			}
			if msgs[0] != msgs[1] {
				t.Errorf("error text differs:\n net: %s\n raw: %s", msgs[0], msgs[1])
			}
			if tc.n < 0 && (ns[1] <= 0 || ns[1] >= 64<<20) {
				t.Errorf("a write cut by its deadline wrote %d bytes, want some and not all", ns[1])
			}
		})
	}
}

func portless(s string, c net.Conn) string {
	return strings.NewReplacer(c.LocalAddr().String(), "LOCAL", c.RemoteAddr().String(), "REMOTE").Replace(s)
}

// TestWrapOthers: a connection that is not TCP is returned as it is.
func TestWrapOthers(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := rawconn.Wrap(a); got != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want it unchanged", got)
	}
}

// TestConcurrentReadersAndWriters: Read and Write may be called from
// several goroutines, as net.Conn's may (each call whole, in some order).
func TestConcurrentReadersAndWriters(t *testing.T) {
	t.Parallel()
	c, peer := pair(t, true)
	const writers, each = 8, 200
	msg := []byte("0123456789abcdef")
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				if _, err := c.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(writers*each*len(msg))))
		got <- b
	}()
	wg.Wait()
	b := <-got
	if want := bytes.Repeat(msg, writers*each); !bytes.Equal(b, want) {
		t.Fatalf("peer got %d bytes, want %d copies of %q whole", len(b), writers*each, msg)
	}
	go peer.Write(bytes.Repeat(msg, writers*each))
	// The readers wait on the pair's own limit, not a short deadline (a
	// busy machine may hold the peer's write back): the reader that
	// completes the count releases the others with a deadline passed.
	var total sync.Mutex
	n := 0
	for range writers {
		wg.Go(func() {
			buf := make([]byte, len(msg))
			for {
				m, err := c.Read(buf)
				total.Lock()
				n += m
				done := n >= writers*each*len(msg)
				total.Unlock()
				if done {
					c.SetReadDeadline(time.Unix(1, 0))
				}
				if done || err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	if n != writers*each*len(msg) {
		t.Fatalf("readers read %d bytes, want %d", n, writers*each*len(msg))
	}
}
