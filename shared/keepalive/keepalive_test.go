package keepalive

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// flushErrorWriter flushes with FlushError, as net/http's writer and the
// Lambda adapter's do.
type flushErrorWriter struct {
	*httptest.ResponseRecorder
	flushes int
	err     error
}

func (w *flushErrorWriter) FlushError() error { w.flushes++; return w.err }

// plainFlusher has only http.Flusher's Flush.
type plainFlusher struct {
	http.ResponseWriter
	flushes int
}

func (w *plainFlusher) Flush() { w.flushes++ }

// wrapper hides its writer's methods but for Unwrap (a middleware's).
type wrapper struct{ http.ResponseWriter }

func (w wrapper) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// noFlush can neither flush nor unwrap.
type noFlush struct{ http.ResponseWriter }

func TestFlusherOf(t *testing.T) {
	t.Parallel()
	fe := &flushErrorWriter{ResponseRecorder: httptest.NewRecorder(), err: errors.New("gone")}
	pf := &plainFlusher{ResponseWriter: httptest.NewRecorder()}
	for _, c := range []struct {
		name    string
		w       http.ResponseWriter
		flushes func() int
		want    error
	}{
		{"FlushError", fe, func() int { return fe.flushes }, fe.err},
		{"Flush", pf, func() int { return pf.flushes }, nil},
		{"through Unwrap", wrapper{wrapper{fe}}, func() int { return fe.flushes }, fe.err},
		{"neither", noFlush{httptest.NewRecorder()}, func() int { return 0 }, http.ErrNotSupported},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := c.flushes()
			if err := FlusherOf(c.w).FlushError(); !errors.Is(err, c.want) {
				t.Fatalf("flush: %v, want %v", err, c.want)
			}
			if c.want != http.ErrNotSupported && c.flushes() != before+1 {
				t.Fatalf("the writer's own flush was not called")
			}
		})
	}
}

// failingWrite fails every Write.
type failingWrite struct{ *flushErrorWriter }

func (w failingWrite) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestWriteFlush: one call writes and flushes; a failed write is not
// flushed, and says so.
func TestWriteFlush(t *testing.T) {
	t.Parallel()
	now := func() time.Time { return time.Unix(0, 0) }
	fe := &flushErrorWriter{ResponseRecorder: httptest.NewRecorder()}
	k := Start(fe, 0, now)
	n, flushed, err := k.WriteFlush([]byte("data: x\n\n"))
	if n != 9 || !flushed || err != nil || fe.flushes != 1 || fe.Body.String() != "data: x\n\n" {
		t.Fatalf("WriteFlush: %d %v %v, %d flushes, body %q", n, flushed, err, fe.flushes, fe.Body.String())
	}
	bad := &flushErrorWriter{ResponseRecorder: httptest.NewRecorder()}
	k = Start(failingWrite{bad}, 0, now)
	if _, flushed, err := k.WriteFlush([]byte("data: x\n\n")); flushed || err == nil || bad.flushes != 0 {
		t.Fatalf("a failed write: flushed %v, %v, %d flushes", flushed, err, bad.flushes)
	}
	if k.Stop() {
		t.Error("a writer that never committed says its headers went out")
	}
}

// TestClock: the writer's own clock, watched, is the backend's last data:
// a comment goes out only when it is older than the interval; a nil
// writer has no clock.
func TestClock(t *testing.T) {
	t.Parallel()
	if (*Writer)(nil).Clock() != nil {
		t.Fatal("a nil writer has a clock")
	}
	start := time.Unix(1_000_000, 0)
	var at atomic.Int64
	at.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, at.Load()) }
	rec := &flushErrorWriter{ResponseRecorder: httptest.NewRecorder()}
	k := Start(rec, 15*time.Second, now) // the timer's own firing is 15 s away: fire is called by hand
	defer k.Stop()
	k.Watch(k.Clock())
	at.Store(start.Add(20 * time.Second).UnixNano())
	k.Clock().Store(start.Add(10 * time.Second).UnixNano())
	k.fire()
	if rec.Body.Len() != 0 {
		t.Fatalf("data 10 s ago with a 15 s interval: a comment went out: %q", rec.Body.String())
	}
	k.Clock().Store(start.Add(time.Second).UnixNano())
	k.fire()
	if got := rec.Body.String(); got != string(keepaliveComment) {
		t.Fatalf("data 19 s ago: body %q, want one comment", got)
	}
}
