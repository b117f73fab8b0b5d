package epollconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Poller owns the read readiness of the connections it wraps: one epoll
// descriptor, one goroutine.
type Poller struct {
	epfd int
	file *os.File // epfd, registered in the runtime's poller

	mu     sync.RWMutex
	conns  map[uint64]*Conn // by Conn.id, which epoll carries as its event data
	nextID uint64

	events  []unix.EpollEvent
	waitErr error // epoll_wait's failure; the loop goroutine's alone
	err     error // why the loop ended; under mu
}

var (
	defaultOnce sync.Once
	defaultP    *Poller
	defaultErr  error
)

// defaultPoller is the process's shared Poller, started on first use; it
// lives as long as the process (a package-level singleton, as the
// runtime's own poller is).
func defaultPoller() (*Poller, error) {
	defaultOnce.Do(func() { defaultP, defaultErr = NewPoller() })
	return defaultP, defaultErr
}

// NewPoller creates an epoll instance and starts its goroutine; Close ends
// both.
func NewPoller() (*Poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	// Non-blocking, so that os.NewFile registers it with the runtime's
	// poller: an epoll descriptor is readable while it has ready events.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	p := &Poller{epfd: epfd, file: os.NewFile(uintptr(epfd), "epollconn"), conns: map[uint64]*Conn{}, events: make([]unix.EpollEvent, 256)}
	raw, err := p.file.SyscallConn()
	if err != nil {
		p.file.Close()
		return nil, err
	}
	go p.loop(raw)
	return p, nil
}

// Close stops the goroutine; connections it wraps stop receiving
// readiness and their blocked Reads end with the loop's error.
func (p *Poller) Close() error { return p.file.Close() }

// loop never leaves one RawConn.Read, so the runtime never resets the
// epoll descriptor's readiness: each wake drains epoll and parks again.
func (p *Poller) loop(raw syscall.RawConn) {
	err := raw.Read(p.drain)
	p.mu.Lock()
	p.err = errors.Join(err, p.waitErr)
	if p.err == nil {
		p.err = net.ErrClosed
	}
	conns := p.conns
	p.conns = map[uint64]*Conn{}
	p.mu.Unlock()
	for _, c := range conns {
		c.notify(flagHup)
	}
}

func (p *Poller) drain(fd uintptr) bool {
	for {
		n, err := unix.EpollWait(int(fd), p.events, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			p.waitErr = os.NewSyscallError("epoll_wait", err)
			return true
		}
		p.mu.RLock()
		for _, ev := range p.events[:n] {
			// The id, not the descriptor: an event collected for a
			// connection closed meanwhile must not reach the one that
			// got its descriptor number.
			if c := p.conns[uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32]; c != nil {
				var f uint32 = flagReadable
				if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
					f |= flagHup
				}
				c.notify(f)
			}
		}
		p.mu.RUnlock()
		if n < len(p.events) {
			return false // drained: park until the epoll descriptor is readable
		}
	}
}

// Wrap returns c read through the poller when c is a TCP connection, and
// c itself otherwise.
func (p *Poller) Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &Conn{Conn: tc, raw: raw, p: p, ready: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
	w.readFn = w.readFD
	var regErr error
	cerr := raw.Control(func(fd uintptr) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.err != nil {
			regErr = p.err
			return
		}
		p.nextID++
		w.id = p.nextID
		p.conns[w.id] = w
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(uint32(w.id)), Pad: int32(uint32(w.id >> 32))}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
			delete(p.conns, w.id)
			regErr = err
		}
	})
	if cerr != nil || regErr != nil {
		return c
	}
	// Whatever arrived before the registration raised no edge here: the
	// first Read reads at once.
	w.state.Store(flagReadable)
	return w
}

func (p *Poller) remove(c *Conn) {
	p.mu.Lock()
	if p.conns[c.id] == c {
		delete(p.conns, c.id)
		// Closing the descriptor removes it from epoll too; deleting it
		// first keeps a recycled descriptor number from being confused.
		_ = c.raw.Control(func(fd uintptr) { _ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil) })
	}
	p.mu.Unlock()
}

const (
	flagReadable = 1 << iota
	flagHup      // EPOLLRDHUP, EPOLLHUP or EPOLLERR: a read will not block
)

// Conn is a TCP connection whose reads wait for the Poller's readiness.
// Reads are not concurrent (one reader per connection, as every net.Conn
// user has).
type Conn struct {
	// Conn is the wrapped connection, embedded as the interface so that
	// none of *net.TCPConn's io.WriterTo or io.ReaderFrom bypasses Read.
	net.Conn
	raw syscall.RawConn
	p   *Poller
	id  uint64 // the poller's key for this connection, never reused

	state atomic.Uint32 // flags delivered since the reader last took them
	ready chan struct{} // one slot: flags were delivered
	kick  chan struct{} // one slot: the read deadline changed

	drained bool // the last read was short: wait for readiness
	hup     bool // FIN or error pending: never wait again

	mu       sync.Mutex
	deadline time.Time
	timer    *time.Timer
	closed   atomic.Bool

	buf    []byte
	n      int
	err    error
	readFn func(fd uintptr)
}

func (c *Conn) notify(f uint32) {
	c.state.Or(f)
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

func (c *Conn) readFD(fd uintptr) {
	for {
		n, err := syscall.Read(int(fd), c.buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		c.n, c.err = n, err
		return
	}
}

// Read reads into p once the poller has reported the socket readable, or
// at once when the last read may have left data or a FIN behind.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.drained && !c.hup {
			if err := c.wait(); err != nil {
				return 0, err
			}
		}
		c.buf = p
		cerr := c.raw.Control(c.readFn)
		n, err := c.n, c.err
		c.buf, c.n, c.err = nil, 0, nil
		switch {
		case cerr != nil:
			return 0, c.opErr(cerr)
		case errors.Is(err, syscall.EAGAIN):
			// Readiness that an earlier read already consumed; the
			// socket, not a flag, says whether a read would block.
			c.drained, c.hup = true, false
			continue
		case err != nil:
			return 0, c.opErr(err)
		case n == 0:
			return 0, io.EOF
		}
		c.drained = n < len(p)
		return n, nil
	}
}

// take moves delivered flags into the reader's state.
func (c *Conn) take() bool {
	f := c.state.Swap(0)
	if f&flagHup != 0 {
		c.hup = true
	}
	return f != 0
}

// wait blocks until the poller delivers readiness, the connection or the
// poller closes, or the read deadline passes.
func (c *Conn) wait() error {
	for {
		if c.take() {
			return nil
		}
		if c.closed.Load() {
			return c.opErr(net.ErrClosed)
		}
		var expired <-chan time.Time
		c.mu.Lock()
		if !c.deadline.IsZero() {
			d := time.Until(c.deadline)
			if d <= 0 {
				c.mu.Unlock()
				return c.opErr(os.ErrDeadlineExceeded)
			}
			if c.timer == nil {
				c.timer = time.NewTimer(d)
			} else {
				c.timer.Reset(d)
			}
			expired = c.timer.C
		}
		c.mu.Unlock()
		select {
		case <-c.ready:
		case <-c.kick:
		case <-expired:
			return c.opErr(os.ErrDeadlineExceeded)
		}
	}
}

func (c *Conn) opErr(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// SetReadDeadline sets the deadline Read honours while it waits (reads
// themselves never block).
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// SetDeadline sets the read deadline here and the write deadline on the
// wrapped connection.
func (c *Conn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

// Close takes the connection off the poller, wakes a blocked Read, and
// closes the wrapped connection.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return c.Conn.Close()
	}
	c.p.remove(c)
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return c.Conn.Close()
}

var _ net.Conn = (*Conn)(nil)
