package listener

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// flood answers /big with 32 KiB writes, each flushed, until a write
// fails, and reports that failure on failed; other paths answer at once.
func flood(failed chan<- error) http.Handler {
	chunk := make([]byte, 32<<10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			return
		}
		rc := http.NewResponseController(w)
		for {
			_, err := w.Write(chunk)
			if err == nil {
				err = rc.Flush()
			}
			if err != nil {
				failed <- err
				return
			}
		}
	})
}

// askBig opens a connection and asks for /big.
func askBig(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSendTimeout: a client that stops reading its answer has its
// connection ended once a write makes no progress for SendTimeout, and
// the handler's write fails with a timeout. Before, nothing bounded the
// write: the handler and the connection waited for ever.
func TestSendTimeout(t *testing.T) {
	t.Parallel()
	failed := make(chan error, 1)
	addr, _, _ := serveListener(t, Options{MaxConns: 4, SendTimeout: 500 * time.Millisecond}, time.Minute, flood(failed))
	askBig(t, addr)
	select {
	case err := <-failed:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("write failed with %v, want the send timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write to a client that reads nothing still waits after 10 s")
	}
}

// TestStalledAnswerGivesWay: at the cap, with every connection busy, a
// connection whose answer has made no write progress for stallGrace
// gives way to a new one, as an idle one does, while a slow client that
// still reads keeps its answer. Before, a busy connection was never
// closed to make room: the new one was refused until the stalled write
// ended.
func TestStalledAnswerGivesWay(t *testing.T) {
	t.Parallel()
	failed := make(chan error, 2)
	addr, ln, _ := serveListener(t, Options{MaxConns: 2, SendTimeout: time.Minute}, time.Minute, flood(failed))
	stalled := askBig(t, addr)
	slow := askBig(t, addr)
	var read atomic.Int64
	go func() { // 32 KiB every 50 ms: slow, but reading
		buf := make([]byte, 32<<10)
		for {
			n, err := io.ReadFull(slow, buf)
			read.Add(int64(n))
			if err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	time.Sleep(stallGrace + 500*time.Millisecond)
	keptAlive(t, addr) // served, not refused
	_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, stalled); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("the stalled connection is still open")
	}
	before := read.Load()
	time.Sleep(300 * time.Millisecond)
	if read.Load() == before {
		t.Error("the slow reader's answer stopped")
	}
	if _, _, _, evicted := ln.Counts(); evicted != 1 {
		t.Errorf("%d connections closed to make room, want the stalled one", evicted)
	}
}
