// Package listener owns the HTTP host's client connections: a cap on how
// many are open, where idle ones give way to new ones and those without a
// complete header hold a share; a refusal answered at the cap; and a
// lingering close after an early answer, so that a client still sending
// its body reads the answer instead of a reset that would drop it.
// Lambda has no connections: none of this applies there.
//
// It is a net.Listener wrapper with no handler logic, apart from package
// server (the HTTP handler) so that the connections' policy reads and
// tests on its own. The two meet at two points: the refusal's answer,
// which server renders from its one error catalogue and hands over as
// Options.Refusal, and Linger, by which server's handler asks for the
// lingering close of the request's connection.
package listener

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/rawconn"
)

// Options bounds the client connections of an HTTP host (one replica).
// The fields with yaml names are the config file's top-level settings of
// those names (server.Settings holds them); the others are the host's.
type Options struct {
	// MaxConns caps the open client connections. At the cap the least
	// recently used idle connection (a kept-alive one between requests,
	// or one lingering after its answer) is closed to make room, as nginx
	// reclaims keep-alive connections when worker_connections run out;
	// only when none is idle is the new connection answered 503
	// too_many_connections (Retry-After: 1) and closed, and the refusals
	// are logged (at most one line a second). The gateway lowers it at
	// start to what the open-file limit allows. Default DefaultMaxConns;
	// negative = no cap, and none of the bounds below apply.
	MaxConns int `yaml:"max_connections" json:"max_connections"`
	// MaxPending caps the connections that have not yet sent a complete
	// request header (a raw connect, a trickled header); at it the
	// oldest of them is closed to make room. At most MaxConns. Default
	// MaxConns/4 (at least 1).
	MaxPending int `yaml:"max_pending_connections" json:"max_pending_connections"`
	// IdleTimeout is the http.Server's IdleTimeout, which Attach reads:
	// above the high-water mark (HighWater of MaxConns) a connection
	// going idle gets min(IdleTimeout, PressureIdleTimeout) instead.
	IdleTimeout time.Duration `yaml:"-" json:"-"`
	// PressureIdleTimeout and PressureLingerTime are the idle timeout and
	// the lingering time above the high-water mark; both return to their
	// configured values below it. Defaults DefaultPressureIdleTimeout and
	// DefaultPressureLingerTime.
	PressureIdleTimeout time.Duration `yaml:"-" json:"-"`
	PressureLingerTime  time.Duration `yaml:"-" json:"-"`
	// LingerTime bounds, in all, the reading and discarding of a body
	// still arriving after an early answer (413, 401, …), so that the
	// client reads the answer instead of a reset (nginx's
	// lingering_time). Default DefaultLingerTime.
	LingerTime time.Duration `yaml:"lingering_time" json:"lingering_time"`
	// LingerTimeout bounds each wait for more of it (nginx's
	// lingering_timeout), at most LingerTime. Default DefaultLingerTimeout.
	LingerTimeout time.Duration `yaml:"lingering_timeout" json:"lingering_timeout"`
	// LingerBytes bounds how much is discarded. Default DefaultLingerBytes.
	LingerBytes int64 `yaml:"lingering_max_bytes" json:"lingering_max_bytes"`
	// SendTimeout ends a connection whose answer makes no write progress
	// for this long (nginx's send_timeout): the deadline is armed before
	// each write of at most writeChunk bytes, a keepalive comment's
	// included, so a client that stops reading cannot hold a connection,
	// nor the backend request and the reservation behind it. It applies
	// with or without a cap. Default DefaultSendTimeout.
	SendTimeout time.Duration `yaml:"send_timeout" json:"send_timeout"`
	// PlainConns leaves each accepted connection's reads and writes to
	// net, as the runtime makes them, rather than raw system calls
	// (package rawconn says what those give up). Default false: raw.
	// The file sets it as raw_syscalls (server.Settings.Conns).
	PlainConns bool `yaml:"-" json:"-"`
	// Refusal renders, for the cap maxConns, the whole answer to a
	// connection refused at the cap, as HTTP/1.1 writes it: status line,
	// headers (Connection: close among them) and body. New renders it
	// once. The HTTP host passes server.TooManyConnections, so that the
	// refusal is worded where every other error is. Default: a 503 with
	// Retry-After: 1 and no body.
	Refusal func(maxConns int) []byte `yaml:"-" json:"-"`
	// Probe, when set, is given the first bytes a connection refused at
	// the cap sent and may return the whole answer to write instead of
	// the refusal (nil: refused). The HTTP host passes
	// server.LivenessAtCap, so that a liveness probe is answered at the
	// cap as at any time: it needs no descriptor beyond the refusal's
	// and no store, and a replica busy at its cap is not restarted for
	// it. Default nil: every connection beyond the cap is refused.
	Probe func(head []byte) []byte `yaml:"-" json:"-"`
	// Log receives the refusals and the high-water transitions (default:
	// none).
	Log *slog.Logger `yaml:"-" json:"-"`
}

// Defaults for the zero values of Options (WithDefaults).
const (
	DefaultMaxConns            = 4096
	DefaultLingerTime          = 30 * time.Second
	DefaultLingerTimeout       = 5 * time.Second
	DefaultLingerBytes         = 64 << 20
	DefaultSendTimeout         = time.Minute
	DefaultPressureIdleTimeout = 5 * time.Second
	DefaultPressureLingerTime  = 2 * time.Second
)

// The high-water mark, in percent of MaxConns: at or above highWater
// the idle and lingering times shrink; they return once the open
// connections fall below lowWater (the gap keeps a count that hovers at
// the mark from logging a transition per connection).
const (
	highWater = 80
	lowWater  = 70
)

// pendingGrace is how long a connection may take to send its first
// header, from net/http's first read of it, before it may give way: a
// burst of clients that connect at once on a loaded host is not a slow
// one, and is refused (503) at the cap rather than cut. pendingScan
// bounds the pending connections looked at per accept.
const (
	pendingGrace = time.Second
	pendingScan  = 64
)

// stallGrace is how long an answer's write may make no progress before,
// at the cap, its connection gives way as an idle one does: a client that
// stopped reading holds no slot for the whole SendTimeout, and a slow one
// still reading (a write of writeChunk bytes within stallGrace) keeps its
// stream. writeChunk bounds one write, so that progress is seen within a
// large answer too.
const (
	stallGrace = 3 * time.Second
	writeChunk = 32 << 10
)

// refusalRead bounds the wait for a refused connection's request (so
// that the client is answered after it sent one: an answer before it is
// "unsolicited" to an HTTP client), and refusalTime then the answer's
// write and a short read of what came with the request. The refusals in
// progress are bounded by a quarter of the cap, at most maxRefusing (each
// holds a descriptor); beyond it Accept waits for one to end.
//
// refusalRead was 100 ms until a fresh make test, its race pass beside
// the first, starved a client's goroutine between its connect and its
// write for longer than that: Go's transport calls an answer that comes
// first "unsolicited" and fails the request. 500 ms still bounds what an
// idle connection holds: maxRefusing slots refuse 256 connections a
// second however slowly their clients write.
const (
	refusalRead = 500 * time.Millisecond
	refusalTime = time.Second
	maxRefusing = 128
)

// Refusing is the bound on refusals in progress with a cap of maxConns:
// a quarter of it, between 1 and 128. The open-file clamp counts them.
func Refusing(maxConns int) int { return min(max(maxConns/4, 1), maxRefusing) }

// copyPool holds the lingering close's 32 KiB discard buffers.
var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Listener wraps an HTTP host's listener: it counts the open connections
// and keeps them within Options.MaxConns (idle ones give way, pending
// ones within their share), and closes a connection that a handler marked
// (an answer given before the body was read) by lingering: write side
// shut, then what the client still sends read and discarded within
// LingerTime, LingerTimeout and LingerBytes. Attach it to the
// http.Server that serves it: it follows each connection's state through
// ConnState, and handlers mark a connection with Linger.
//
// Nothing here keys on the remote address: behind an ingress every
// connection comes from a few addresses, so the order of arrival and of
// idleness is all that decides.
type Listener struct {
	net.Listener
	opt      Options
	refusing chan struct{} // a slot per refusal in progress
	refused  atomic.Int64  // refusals not yet logged
	logged   atomic.Int64  // unix nanoseconds of the last refusal line
	answer   []byte        // the refusal, rendered once

	mu       sync.Mutex
	open     int
	idle     connList    // oldest idle first: kept-alive or lingering
	pending  connList    // oldest first: no complete header yet
	busy     connList    // oldest first: serving a request
	pressure atomic.Bool // at or above the high-water mark; written under mu
	evicted  uint64      // connections closed to make room, for the tests and the log
}

// WithDefaults returns o with its zero (or negative) bounds replaced by
// their defaults, a zero MaxConns by DefaultMaxConns (a negative one is no
// cap). New applies it; the HTTP host applies it first to size
// MaxConns within its open-file limit.
func (o Options) WithDefaults() Options {
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.LingerTime <= 0 {
		o.LingerTime = DefaultLingerTime
	}
	if o.LingerTimeout <= 0 {
		o.LingerTimeout = DefaultLingerTimeout
	}
	if o.LingerBytes <= 0 {
		o.LingerBytes = DefaultLingerBytes
	}
	if o.MaxPending <= 0 {
		o.MaxPending = max(o.MaxConns/4, 1)
	}
	if o.PressureIdleTimeout <= 0 {
		o.PressureIdleTimeout = DefaultPressureIdleTimeout
	}
	if o.PressureLingerTime <= 0 {
		o.PressureLingerTime = DefaultPressureLingerTime
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = DefaultSendTimeout
	}
	return o
}

// Check reports every problem with o (defaults applied) under at, by the
// gateway config's field names (lingering_time, lingering_timeout,
// max_pending_connections). The gateway's config check calls it;
// New trusts what it accepts.
func (o Options) Check(at problem.At) {
	o = o.WithDefaults()
	if o.MaxConns > 0 && o.MaxPending > o.MaxConns {
		at.Add("max_pending_connections", "must not exceed %s (%d), got %d", at.Name("max_connections"), o.MaxConns, o.MaxPending)
	}
	if o.LingerTimeout > o.LingerTime {
		at.Add("lingering_timeout", "must not exceed %s (%s), got %s", at.Name("lingering_time"), o.LingerTime, o.LingerTimeout)
	}
}

// New wraps ln; zero fields of o take their defaults.
func New(ln net.Listener, o Options) *Listener {
	o = o.WithDefaults()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	answer := []byte(bareRefusal)
	if o.Refusal != nil {
		answer = o.Refusal(o.MaxConns)
	}
	return &Listener{Listener: ln, opt: o, answer: answer, refusing: make(chan struct{}, Refusing(o.MaxConns))}
}

// bareRefusal is the refusal without Options.Refusal.
const bareRefusal = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"

// Attach makes srv tell l about its connections: ConnState for their
// state, ConnContext for the handlers' marks; it reads srv.IdleTimeout
// for the shortened one above the high-water mark. Call it before
// srv.Serve(l).
func (l *Listener) Attach(srv *http.Server) {
	l.opt.IdleTimeout = srv.IdleTimeout
	srv.ConnState = l.ConnState
	srv.ConnContext = l.ConnContext
}

// Accept returns the next connection within the cap, making room: with
// the pending share full it closes the oldest slow pending connections
// (evictPendingLocked); at the cap it closes the least recently used
// idle one, else the oldest slow pending one, else the oldest busy one
// whose answer's write has made no progress for stallGrace
// (evictStalledLocked). A connection that still finds no room is
// answered and closed in the background: only busy connections whose
// clients read are left, and none of them is closed to make room.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Reads and writes as raw system calls: on one core they would
		// otherwise wake the runtime's sysmon after every idle spell
		// (package rawconn).
		if !l.opt.PlainConns {
			c = rawconn.Wrap(c)
		}
		if l.opt.MaxConns <= 0 {
			l.mu.Lock()
			l.open++
			l.mu.Unlock()
			return &conn{Conn: c, l: l}, nil
		}
		// Closing a victim under the lock is one close(2): cheaper than
		// collecting them.
		now := time.Now()
		l.mu.Lock()
		for l.pending.n >= l.opt.MaxPending && l.evictPendingLocked(now) {
		}
		if l.open >= l.opt.MaxConns && !l.evictLocked(l.idle.head) && !l.evictPendingLocked(now) {
			l.evictStalledLocked(now)
		}
		full := l.open >= l.opt.MaxConns
		var lc *conn
		if !full {
			lc = &conn{Conn: c, l: l}
			l.open++
			l.pending.push(lc)
			l.watermarkLocked()
		}
		l.mu.Unlock()
		if full {
			l.refuse(c)
			continue
		}
		return lc, nil
	}
}

// evictLocked closes c, when not nil, and releases its slot, reporting
// whether it did. c's own Close, when net/http calls it, is then a
// second one: it releases nothing again and does not linger.
func (l *Listener) evictLocked(c *conn) bool {
	if c == nil {
		return false
	}
	c.closed.Store(true)
	l.releaseLocked(c)
	l.evicted++
	_ = c.Conn.Close()
	return true
}

// evictPendingLocked closes the oldest pending connection that net/http
// has been reading for pendingGrace without a complete header, looking
// at the oldest pendingScan of them; it reports whether it found one. A
// connection net/http has not begun to read is not slow, the gateway is
// (a burst on a loaded host): it is never cut for that.
func (l *Listener) evictPendingLocked(now time.Time) bool {
	i := 0
	for c := l.pending.head; c != nil && i < pendingScan; c, i = c.next, i+1 {
		if r := c.reading.Load(); r != 0 && now.UnixNano()-r >= int64(pendingGrace) {
			return l.evictLocked(c)
		}
	}
	return false
}

// evictStalledLocked closes the oldest busy connection whose answer's
// write has made no progress for stallGrace, reporting whether it found
// one: its client stopped reading, and its handler's next write fails,
// which ends the request (its backend request, its reservation settled)
// well before SendTimeout. It runs only at the cap with nothing idle or
// pending to close, so the scan of the busy ones is rare.
func (l *Listener) evictStalledLocked(now time.Time) bool {
	for c := l.busy.head; c != nil; c = c.next {
		if w := c.writing.Load(); w != 0 && now.UnixNano()-w >= int64(stallGrace) {
			return l.evictLocked(c)
		}
	}
	return false
}

// releaseLocked takes c off its list and gives back its slot, once.
func (l *Listener) releaseLocked(c *conn) {
	if c.released {
		return
	}
	c.released = true
	if c.list != nil {
		c.list.remove(c)
	}
	l.open--
	l.watermarkLocked()
}

// watermarkLocked enters or leaves the pressure regime at the marks,
// logging each transition once. Entering it shortens the idle deadline
// of the connections already idle.
func (l *Listener) watermarkLocked() {
	if l.opt.MaxConns <= 0 {
		return
	}
	pct := l.open * 100 / l.opt.MaxConns
	switch {
	case !l.pressure.Load() && pct >= highWater:
		l.pressure.Store(true)
		l.opt.Log.Warn("connections above the high-water mark: idle and lingering times shortened",
			"open", l.open, "max_connections", l.opt.MaxConns, "idle_timeout", l.pressureIdle().String(), "lingering_time", l.lingerTime().String())
		for c := l.idle.head; c != nil; c = c.next {
			_ = c.Conn.SetReadDeadline(c.since.Add(l.pressureIdle()))
		}
	case l.pressure.Load() && pct < lowWater:
		l.pressure.Store(false)
		l.opt.Log.Info("connections back below the high-water mark: idle and lingering times restored",
			"open", l.open, "max_connections", l.opt.MaxConns)
	}
}

// pressureIdle is the idle timeout above the high-water mark.
func (l *Listener) pressureIdle() time.Duration {
	if l.opt.IdleTimeout > 0 {
		return min(l.opt.IdleTimeout, l.opt.PressureIdleTimeout)
	}
	return l.opt.PressureIdleTimeout
}

// lingerTime is the lingering time now (l.mu held).
func (l *Listener) lingerTime() time.Duration {
	if l.pressure.Load() {
		return min(l.opt.LingerTime, l.opt.PressureLingerTime)
	}
	return l.opt.LingerTime
}

// ConnState follows each connection's state (http.Server.ConnState): a
// connection leaves the pending share once its first header is in, and
// is idle, and so may give way, from the end of one request to the
// start of the next.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.released {
		return
	}
	switch state {
	case http.StateActive:
		if c.list != nil {
			c.list.remove(c)
		}
		l.busy.push(c)
	case http.StateHijacked:
		if c.list != nil {
			c.list.remove(c)
		}
	case http.StateIdle:
		if c.list != nil {
			c.list.remove(c)
		}
		c.since = time.Now()
		// Armed whether or not the pressure is on now: net/http sets the
		// idle deadline right after this hook, and the regime may begin
		// in between. Had the arm followed the pressure of this moment,
		// the watermark's shortened deadline would then be overwritten
		// by the minute-long one, and the connection kept its slot
		// (fresh-machine CI caught it: TestListenerHighWater).
		c.armIdle.Store(true)
		l.idle.push(c)
	case http.StateClosed:
		l.releaseLocked(c)
	}
}

// Counts reports the open, idle and pending connections and how many were
// closed to make room.
func (l *Listener) Counts() (open, idle, pending int, evicted uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.idle.n, l.pending.n, l.evicted
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
	// Waiting for a slot leaves the next connections in the kernel's
	// accept queue, where they hold no descriptor of ours.
	l.refusing <- struct{}{}
	go func() {
		defer func() { <-l.refusing }()
		_ = c.SetReadDeadline(time.Now().Add(refusalRead))
		bufp := copyPool.Get().(*[]byte)
		n, _ := c.Read(*bufp) // the request's first bytes: an answer before them is "unsolicited"
		answer := l.answer
		if l.opt.Probe != nil {
			if a := l.opt.Probe((*bufp)[:n]); a != nil {
				answer = a
			}
		}
		copyPool.Put(bufp)
		_ = c.SetDeadline(time.Now().Add(refusalTime))
		if _, err := c.Write(answer); err == nil {
			// Read what came with the request, so that closing does not
			// reset the answer away (the lingering close, in small).
			lingerOn(c, refusalTime, refusalTime, 64<<10)
		}
		_ = c.Close()
	}()
}

// ConnContext puts the connection in its requests' contexts, for
// an early answer's lingering close (http.Server.ConnContext, Linger).
func (l *Listener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*conn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

type connKey struct{}

// conn is one counted client connection. Its list fields, released and
// since belong to l.mu.
type conn struct {
	net.Conn
	l          *Listener
	linger     atomic.Bool // an early answer: linger on close
	closed     atomic.Bool
	list       *connList // the list c is on, or nil
	prev, next *conn
	since      time.Time    // when it went idle
	reading    atomic.Int64 // unix nanoseconds of net/http's first read; 0 before
	released   bool         // its slot is given back
	armIdle    atomic.Bool  // the next read deadline is the idle one: shortened under pressure
	writing    atomic.Int64 // unix nanoseconds when the write in progress last made progress; 0 when none
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

// Read notes when net/http first reads c, for the pending share.
func (c *conn) Read(p []byte) (int, error) {
	if c.reading.Load() == 0 {
		c.reading.Store(time.Now().UnixNano())
	}
	return c.Conn.Read(p)
}

// Write writes p in parts of at most writeChunk bytes, each under a
// deadline SendTimeout from its start (net/http sets no write deadline:
// this is the only one), and notes when the write in progress last made
// progress, for evictStalledLocked.
func (c *conn) Write(p []byte) (n int, err error) {
	for len(p) > 0 {
		now := time.Now()
		c.writing.Store(now.UnixNano())
		_ = c.Conn.SetWriteDeadline(now.Add(c.l.opt.SendTimeout)) // a closed connection's Write says so
		m, err := c.Conn.Write(p[:min(len(p), writeChunk)])
		n += m
		if err != nil {
			c.writing.Store(0)
			return n, err
		}
		p = p[m:]
	}
	c.writing.Store(0)
	return n, nil
}

// SetReadDeadline sets the deadline net/http asks for, except the idle
// one above the high-water mark (net/http sets it right after ConnState
// reports StateIdle), which it shortens: whether the pressure is on is
// read here, when the deadline is set, so a regime that began after the
// hook still shortens it.
func (c *conn) SetReadDeadline(t time.Time) error {
	if c.armIdle.Load() && c.armIdle.Swap(false) && c.l.pressure.Load() {
		if short := time.Now().Add(c.l.pressureIdle()); t.IsZero() || short.Before(t) {
			t = short
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// Close closes the connection, lingering first when a handler marked it;
// a lingering connection is idle meanwhile (its answer is out), so it
// gives way like one. A second Close (http.Server.Close at the end of the
// shutdown grace, or after an eviction) only closes.
func (c *conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return c.Conn.Close()
	}
	if c.linger.Load() {
		l := c.l
		l.mu.Lock()
		if c.released { // evicted in the meantime
			l.mu.Unlock()
			return c.Conn.Close()
		}
		if c.list != nil {
			c.list.remove(c)
		}
		c.since = time.Now()
		l.idle.push(c)
		total := l.lingerTime()
		l.mu.Unlock()
		lingerOn(c.Conn, total, min(l.opt.LingerTimeout, total), l.opt.LingerBytes)
	}
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return err
}

// connList is an intrusive list of connections, oldest first: pushing
// and removing allocate nothing.
type connList struct {
	head, tail *conn
	n          int
}

func (q *connList) push(c *conn) {
	c.list, c.prev, c.next = q, q.tail, nil
	if q.tail != nil {
		q.tail.next = c
	} else {
		q.head = c
	}
	q.tail = c
	q.n++
}

func (q *connList) remove(c *conn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.tail = c.prev
	}
	c.list, c.prev, c.next = nil, nil, nil
	q.n--
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

// Linger has the connection that ctx's request came on close by
// lingering (an answer given before its body was read); nothing when the
// request did not come through a Listener (tests, Lambda).
func Linger(ctx context.Context) {
	if c := connOf(ctx); c != nil {
		c.linger.Store(true)
	}
}

// connOf is the connection ctx's request came on through a Listener, else
// nil.
func connOf(ctx context.Context) *conn {
	c, _ := ctx.Value(connKey{}).(*conn)
	return c
}
