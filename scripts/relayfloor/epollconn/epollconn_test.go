//go:build linux

package epollconn_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/relayfloor/epollconn"
)

// pair is a wrapped client connection and its server side on loopback.
func pair(t testing.TB, p *epollconn.Poller) (client net.Conn, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	c, err := epollconn.Dialer{Poller: p}.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		if _, ok := c.(*epollconn.Conn); !ok {
			t.Fatalf("dialed %T, want *epollconn.Conn", c)
		}
	}
	s, ok := <-acc
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func newPoller(t testing.TB) *epollconn.Poller {
	t.Helper()
	p, err := epollconn.NewPoller()
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestReadsEverythingInOrder(t *testing.T) {
	t.Parallel()
	p := newPoller(t)
	tests := []struct {
		name    string
		bufSize int
		chunks  []string
		gap     time.Duration
	}{
		{"events apart", 4096, []string{"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"}, 5 * time.Millisecond},
		// The last data and the FIN in one readiness: the read after the
		// data must not wait for an edge that will not come.
		{"events and close together", 4096, []string{"data: 1\n\ndata: 2\n\n", "data: 3\n\n"}, 0},
		{"queued beyond the buffer", 16, []string{strings.Repeat("x", 100) + "\n", "y\n"}, 0},
		{"arrives between reads", 16, []string{"a\n", "b\n", "c\n"}, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, s := pair(t, p)
			go func() {
				for _, ch := range tt.chunks {
					time.Sleep(tt.gap)
					if _, err := s.Write([]byte(ch)); err != nil {
						return
					}
				}
				s.Close()
			}()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReaderSize(c, tt.bufSize)
			var got []byte
			for {
				line, err := br.ReadBytes('\n')
				got = append(got, line...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond) // the relay writing to its client
			}
			if want := strings.Join(tt.chunks, ""); string(got) != want {
				t.Fatalf("read %q, want %q", got, want)
			}
		})
	}
}

func TestDeadlineAndClose(t *testing.T) {
	t.Parallel()
	p := newPoller(t)
	c, _ := pair(t, p)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 16))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 16)); errc <- err }()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
}

// TestHTTPStream is the backend leg as the gateway uses it: an
// http.Transport dialing through the poller, keep-alive, a flushed
// event stream, then a second request on the same connection.
func TestHTTPStream(t *testing.T) {
	t.Parallel()
	p := newPoller(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			_, _ = io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	tr := &http.Transport{DialContext: epollconn.Dialer{Poller: p}.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	for range 3 {
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := "data: a\n\ndata: b\n\ndata: c\n\ndata: d\n\ndata: e\n\n"; string(b) != want {
			t.Fatalf("body %q, want %q", b, want)
		}
	}
}

// BenchmarkRead is one small event written and read through the poller.
func BenchmarkRead(b *testing.B) {
	p := newPoller(b)
	c, s := pair(b, p)
	msg := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}
