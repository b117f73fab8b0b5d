package server

// The HTTP host's client connections: a cap on how many are open, and a
// lingering close after an early answer, so that a client still sending
// its body reads the answer instead of a reset (issue 22). Lambda has no
// connections: none of this applies there.

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// ConnOptions bounds the client connections of an HTTP host.
type ConnOptions struct {
	// MaxConns caps the open client connections; a connection beyond it
	// is answered 503 too_many_connections (Retry-After: 1) and closed,
	// and the refusals are logged (at most one line a second). 0 = no cap.
	MaxConns int
	// LingerTime bounds, in all, the discarding of what a client still
	// sends after an early answer (nginx's lingering_time). Default
	// DefaultLingerTime.
	LingerTime time.Duration
	// LingerTimeout bounds each wait for more of it (nginx's
	// lingering_timeout), at most LingerTime. Default DefaultLingerTimeout.
	LingerTimeout time.Duration
	// LingerBytes bounds how much is discarded. Default DefaultLingerBytes.
	LingerBytes int64
	// Log receives the refusals (default: none).
	Log *slog.Logger
}

// Defaults for the zero values of ConnOptions, and DefaultMaxConns for a
// MaxConns the config leaves out (zero is no cap), which the gateway's
// wiring (shared/assemble) applies.
const (
	DefaultMaxConns      = 4096
	DefaultLingerTime    = 30 * time.Second
	DefaultLingerTimeout = 5 * time.Second
	DefaultLingerBytes   = 64 << 20
)

// refusalTime bounds what one refused connection may hold: the answer's
// write and a short read of what the client sent with it. maxRefusing
// bounds the refusals in progress; beyond it a connection is closed
// unanswered.
const (
	refusalTime = time.Second
	maxRefusing = 128
)

// copyPool holds the lingering close's 32 KiB discard buffers.
var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Listener wraps an HTTP host's listener: it counts the open connections,
// refuses those beyond ConnOptions.MaxConns, and closes a connection that
// a handler marked (an answer given before the body was read) by
// lingering: write side shut, then what the client still sends read and
// discarded within LingerTime, LingerTimeout and LingerBytes. Set
// http.Server.ConnContext to its ConnContext so handlers can mark.
type Listener struct {
	net.Listener
	opt      ConnOptions
	open     atomic.Int64
	refusing atomic.Int64
	refused  atomic.Int64 // refusals not yet logged
	logged   atomic.Int64 // unix nanoseconds of the last refusal line
	answer   []byte       // the refusal, rendered once
}

// withDefaults returns o with its zero (or negative) bounds replaced by
// their defaults.
func (o ConnOptions) withDefaults() ConnOptions {
	if o.LingerTime <= 0 {
		o.LingerTime = DefaultLingerTime
	}
	if o.LingerTimeout <= 0 {
		o.LingerTimeout = DefaultLingerTimeout
	}
	if o.LingerBytes <= 0 {
		o.LingerBytes = DefaultLingerBytes
	}
	return o
}

// Check reports every problem with o (defaults applied) under at, by the
// gateway config's field names (lingering_time, lingering_timeout). The
// gateway's config check calls it; NewListener trusts what it accepts.
func (o ConnOptions) Check(at problem.At) {
	o = o.withDefaults()
	if o.LingerTimeout > o.LingerTime {
		at.Add("lingering_timeout", "must not exceed %s (%s), got %s", at.Name("lingering_time"), o.LingerTime, o.LingerTimeout)
	}
}

// NewListener wraps ln; zero fields of o take their defaults.
func NewListener(ln net.Listener, o ConnOptions) *Listener {
	o = o.withDefaults()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	e := tooManyConnections(o.MaxConns)
	body := e.JSON()
	answer := "HTTP/1.1 " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + "\r\n" +
		"Content-Type: application/json\r\nRetry-After: " + retryAfterSeconds(e.RetryAfter) + "\r\n" +
		"Connection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	return &Listener{Listener: ln, opt: o, answer: append([]byte(answer), body...)}
}

// Accept returns the next connection within the cap; those beyond it are
// answered and closed in the background.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.opt.MaxConns > 0 && l.open.Load() >= int64(l.opt.MaxConns) {
			l.refuse(c)
			continue
		}
		l.open.Add(1)
		return &conn{Conn: c, l: l}, nil
	}
}

// refuse answers a connection beyond the cap and closes it, logging the
// refusals at most once a second.
func (l *Listener) refuse(c net.Conn) {
	l.refused.Add(1)
	now := time.Now().UnixNano()
	if last := l.logged.Load(); now-last >= int64(time.Second) && l.logged.CompareAndSwap(last, now) {
		l.opt.Log.Warn("connection refused: max_connections reached",
			"max_connections", l.opt.MaxConns, "refused", l.refused.Swap(0), "remote", c.RemoteAddr().String())
	}
	if l.refusing.Add(1) > maxRefusing {
		l.refusing.Add(-1)
		_ = c.Close()
		return
	}
	go func() {
		defer l.refusing.Add(-1)
		_ = c.SetDeadline(time.Now().Add(refusalTime))
		if _, err := c.Write(l.answer); err == nil {
			// Read what came with the request, so that closing does not
			// reset the answer away (the lingering close, in small).
			lingerOn(c, refusalTime, refusalTime, 64<<10)
		}
		_ = c.Close()
	}()
}

// ConnContext puts the connection in its requests' contexts, for
// an early answer's lingering close (http.Server.ConnContext).
func (l *Listener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

type connKey struct{}

// conn is one counted client connection.
type conn struct {
	net.Conn
	l      *Listener
	linger atomic.Bool // an early answer: linger on close
	closed atomic.Bool
}

type closeWriter interface{ CloseWrite() error }

// CloseWrite shuts the write side (net/http calls it before closing a
// connection whose request body it did not read).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close closes the connection, lingering first when a handler marked it.
// A second Close (http.Server.Close at the end of the shutdown grace) cuts
// a linger short.
func (c *conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return c.Conn.Close()
	}
	if c.linger.Load() {
		lingerOn(c.Conn, c.l.opt.LingerTime, c.l.opt.LingerTimeout, c.l.opt.LingerBytes)
	}
	err := c.Conn.Close()
	c.l.open.Add(-1)
	return err
}

// lingerOn shuts c's write side (the answer is out) and reads and
// discards what the client still sends, until it closes, sends nothing
// for timeout, or total or max bytes have passed. Then closing c cannot
// reset the answer away before the client read it: a TCP stack that gets
// data for a closed socket answers with a reset, and the peer's stack may
// then drop the answer it had not yet read (RFC 9112 §9.6).
func lingerOn(c net.Conn, total, timeout time.Duration, max int64) {
	if cw, ok := c.(closeWriter); ok {
		_ = cw.CloseWrite()
	}
	end := time.Now().Add(total)
	bufp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bufp)
	for n := int64(0); n < max; {
		dl := time.Now().Add(timeout)
		if dl.After(end) {
			dl = end
		}
		if c.SetReadDeadline(dl) != nil {
			return
		}
		m, err := c.Read(*bufp)
		n += int64(m)
		if err != nil {
			return
		}
	}
}

// connOf is r's connection when it came through a Listener, else nil.
func connOf(r *http.Request) *conn {
	c, _ := r.Context().Value(connKey{}).(*conn)
	return c
}
