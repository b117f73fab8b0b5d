// Package keepalive owns a stream's writes to the client while a backend
// may still be silent: SSE comments fill the gaps so no proxy in between
// cuts the stream for idleness, and the relay's events go through the
// same writer so a comment never lands inside an event.
package keepalive

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// keepaliveComment is an SSE comment: every SSE parser ignores it, the
// OpenAI SDKs included, and every proxy sees bytes.
var keepaliveComment = []byte(": keepalive\n\n")

// Writer owns a stream's writes to the client: its
// timer writes a comment whenever nothing was written for an interval,
// and the relay writes events through it, under one mutex, so a comment
// never lands inside an event. The headers go out with the first comment
// or the first backend's headers, whichever comes first; from then on a
// failure is an SSE error event, while the endpoint may still change until
// the first event (the server's attempts).
type Writer struct {
	mu sync.Mutex
	// clock is an activity clock beside the lock (Clock): the relay
	// stores it right after each WriteFlush, on the cache line that call
	// just took, rather than on one more line per event elsewhere.
	clock atomic.Int64
	w     http.ResponseWriter
	// flush is w's own flush (FlusherOf): an interface, called as one,
	// where a method value would be a closure object of its own, one
	// more line of memory each event loads.
	flush ErrorFlusher
	every time.Duration
	now   func() time.Time
	t     *time.Timer
	last  time.Time // last comment, or the headers' commit
	// activity, once the stream is relaying, is the idle reader's clock of
	// the backend's last data (each is written at once): the relay's
	// writes then cost no clock read of their own.
	activity *atomic.Int64
	started  bool // headers sent
	stopped  bool
	sent     int       // comments sent
	first    time.Time // when the first comment went out
}

// Start starts a stream's writer; every <= 0 sends no comments
// (the writer still orders the headers and the relay's writes).
func Start(w http.ResponseWriter, every time.Duration, now func() time.Time) *Writer {
	k := &Writer{w: w, flush: FlusherOf(w), every: every, now: now, last: now()}
	if every > 0 {
		k.mu.Lock()
		k.t = time.AfterFunc(every, k.fire)
		k.mu.Unlock()
	}
	return k
}

func (k *Writer) fire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	now := k.now()
	last := k.last
	if k.activity != nil {
		if a := time.Unix(0, k.activity.Load()); a.After(last) {
			last = a
		}
	}
	if quiet := now.Sub(last); quiet < k.every {
		k.t.Reset(k.every - quiet)
		return
	}
	if !k.started {
		SetHeaders(k.w.Header())
		k.w.WriteHeader(http.StatusOK)
		k.started = true
	}
	if _, err := k.w.Write(keepaliveComment); err != nil {
		k.stopped = true // the client is gone; the request's context ends it
		return
	}
	_ = k.flush.FlushError()
	k.sent++
	if k.first.IsZero() {
		k.first = now
	}
	k.last = now
	k.t.Reset(k.every)
}

// Commit hands the stream to a backend's answer: writeHeader runs unless a
// comment already sent the headers. It reports whether it ran.
func (k *Writer) Commit(writeHeader func()) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.started {
		return false
	}
	writeHeader()
	k.started = true
	k.last = k.now()
	return true
}

// Write writes one or more whole events (the relay never writes less).
func (k *Writer) Write(p []byte) (int, error) {
	k.mu.Lock()
	n, err := k.w.Write(p)
	k.mu.Unlock()
	return n, err
}

// WriteFlush writes one or more whole events and flushes them, under one
// lock: the relay's one call per read (sse.WriteFlusher). flushed says
// the flush was made (the write succeeded); err is the write's or the
// flush's.
func (k *Writer) WriteFlush(p []byte) (n int, flushed bool, err error) {
	k.mu.Lock()
	n, err = k.w.Write(p)
	if err == nil {
		err, flushed = k.flush.FlushError(), true
	}
	k.mu.Unlock()
	return n, flushed, err
}

// Clock is an activity clock (Unix nanoseconds) that lives beside the
// writer's lock, for the stream's idle reader to keep the backend's last
// data in and Watch to watch: a relay that stores it after each write
// then touches one line of memory per event for both, not two (at 500
// streams each was a cache miss, about 0.5% of the CPU per event apiece).
// nil on a nil Writer.
func (k *Writer) Clock() *atomic.Int64 {
	if k == nil {
		return nil
	}
	return &k.clock
}

// Watch makes the backend's last data (the idle reader's clock) count as
// activity, so comments fill only real gaps.
func (k *Writer) Watch(activity *atomic.Int64) {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.activity = activity
	k.mu.Unlock()
}

// Flush flushes what was written, under the same mutex as the comments.
func (k *Writer) Flush() error {
	k.mu.Lock()
	err := k.flush.FlushError()
	k.mu.Unlock()
	return err
}

// ErrorFlusher flushes and says whether it could (net/http's
// FlushError).
type ErrorFlusher interface{ FlushError() error }

// FlusherOf is w's flush, found once: its FlushError (net/http's writer
// and the Lambda adapter's have it, so every flush reaches the adapter),
// else its Flush, looking through writers that Unwrap as
// http.ResponseController does. A stream flushes once per event, and the
// controller's search on every flush is per-event work that the
// zero-logic floor the benchmarks measure streams against does not do. A
// writer that cannot flush gets http.ErrNotSupported, as from the
// controller.
func FlusherOf(w http.ResponseWriter) ErrorFlusher {
	for {
		switch t := w.(type) {
		case ErrorFlusher:
			return t
		case http.Flusher:
			return flushOnly{t}
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return cannotFlush{}
		}
	}
}

// flushOnly is an http.Flusher's flush, which cannot fail.
type flushOnly struct{ http.Flusher }

func (f flushOnly) FlushError() error { f.Flush(); return nil }

// cannotFlush is the flush of a writer that has none.
type cannotFlush struct{}

func (cannotFlush) FlushError() error { return http.ErrNotSupported }

// Stop ends the comments; the caller owns the writer again. It reports
// whether the headers were sent, and is safe on a nil keepalive.
func (k *Writer) Stop() (started bool) {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	if k.t != nil {
		k.t.Stop()
	}
	return k.started
}

// Started reports whether the headers went out (a nil keepalive never
// sends them).
func (k *Writer) Started() bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.started
}

// Stats is what the access log records; call it after stop.
func (k *Writer) Stats() (sent int, first time.Time) {
	if k == nil {
		return 0, time.Time{}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.sent, k.first
}

// SetHeaders sets a stream answer's headers: an event stream, not cached,
// not buffered by a proxy (X-Accel-Buffering), with no Content-Length.
func SetHeaders(h http.Header) {
	h.Del("Content-Length")
	h["Content-Type"] = eventStream
	h["Cache-Control"] = noCache
	h["X-Accel-Buffering"] = no
}

// The values SetHeaders sets, shared by every stream: a header value is
// never written in place (http.Header.Add appends to a full slice, so
// it copies), and net/http copies them when the headers are written.
var (
	eventStream = []string{"text/event-stream"}
	noCache     = []string{"no-cache"}
	no          = []string{"no"}
)
