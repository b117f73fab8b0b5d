package rawconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Conn is a *net.TCPConn whose Read and Write are raw system calls.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn
	r  op // the read in progress, under r.mu
	w  op // the write in progress, under w.mu
}

// op is one Read's or Write's state, for the function RawConn calls with
// the descriptor: kept here, and that function bound once (Wrap), so a
// call allocates nothing.
type op struct {
	mu  sync.Mutex
	p   []byte
	n   int
	err error // the system call's errno
	f   func(fd uintptr) bool
}

// Wrap is c with raw reads and writes when it is a TCP connection, else c
// as it is.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &Conn{TCPConn: tc, rc: rc}
	w.r.f, w.w.f = w.read, w.write
	return w
}

// maxRW caps one system call as internal/poll does (1 GiB).
const maxRW = 1 << 30

func (c *Conn) read(fd uintptr) bool {
	for {
		m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(c.r.p))), uintptr(len(c.r.p)))
		switch e {
		case 0:
			c.r.n = int(m)
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // the netpoller parks the reader until readable
		default:
			c.r.err = e
			return true
		}
	}
}

func (c *Conn) write(fd uintptr) bool {
	for c.w.n < len(c.w.p) {
		p := c.w.p[c.w.n:min(len(c.w.p), c.w.n+maxRW)]
		m, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		switch {
		case e == 0 && m > 0:
			c.w.n += int(m)
		case e == 0:
			c.w.err = io.ErrUnexpectedEOF // as internal/poll: no progress
			return true
		case e == syscall.EINTR:
		case e == syscall.EAGAIN:
			return false // the netpoller parks the writer until writable
		default:
			c.w.err = e
			return true
		}
	}
	return true
}

// Read reads as net.Conn's Read does.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	c.r.mu.Lock()
	c.r.p, c.r.n, c.r.err = p[:min(len(p), maxRW)], 0, nil
	err := c.rc.Read(c.r.f)
	n, errno := c.r.n, c.r.err
	c.r.p, c.r.err = nil, nil
	c.r.mu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != nil:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes as net.Conn's Write does: all of p, or an error.
func (c *Conn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	c.w.p, c.w.n, c.w.err = p, 0, nil
	err := c.rc.Write(c.w.f)
	n, errno := c.w.n, c.w.err
	c.w.p, c.w.err = nil, nil
	c.w.mu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case errno == io.ErrUnexpectedEOF:
		return n, c.opError("write", errno)
	case errno != nil:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError is err as net's Read and Write return it: RawConn's own
// *net.OpError (a deadline, a closed connection) is unwrapped first, so
// the error reads "read tcp a->b: i/o timeout", not "read tcp a->b:
// raw-read tcp a->b: …".
func (c *Conn) opError(op string, err error) error {
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
