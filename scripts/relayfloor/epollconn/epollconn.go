// Package epollconn is a prototype for the backend leg: TCP connections
// whose read readiness is owned by an epoll instance of the package's own,
// so that a connection is read once per readiness, as nginx reads, instead
// of read-to-find-out (Go's netpoller tries read(2) first; on a streaming
// connection idle between SSE events that try answers EAGAIN, the
// goroutine parks and reads again when woken: two reads per event).
//
// Why an epoll of its own: every Go read starts with the runtime's
// pollReset, which drops readiness that arrived since the last read, and
// the runtime keeps epoll's flags to itself, so a reader that waits first
// on the runtime's poller can miss data or a FIN that arrived with the last
// data, for good. Here one Poller goroutine stays inside a single
// RawConn.Read on the epoll descriptor (registered in the runtime's poller,
// so the goroutine parks like any other; readiness is never reset), takes
// every ready connection with one epoll_wait, and hands each its flags.
// A connection's Read waits for its flags after a short read, reads at
// once after a full one (more may be queued; edge-triggered epoll will not
// say so again) or when the peer's FIN is pending (EPOLLRDHUP: the next
// read returns EOF, as nginx's pending_eof), and makes the read(2) under
// RawConn.Control, so that Close cannot recycle the descriptor under it.
//
// Per event this replaces the EAGAIN read with a share of one epoll_wait
// (shared by every connection ready at that wake) and one goroutine
// hand-off; it wins when several backend connections are ready per wake.
// Writes, Close and addresses are the wrapped connection's; read deadlines
// are honoured while Read waits.
//
// Opt in by dialing the backend through Dialer:
//
//	tr.DialContext = epollconn.Dialer{Dialer: &net.Dialer{...}}.DialContext
package epollconn

import (
	"context"
	"net"
)

// Dialer dials TCP connections read through the shared Poller; other
// networks, other systems, and connections without a raw descriptor are
// returned as dialed.
type Dialer struct {
	// Dialer dials; nil means a zero net.Dialer.
	Dialer *net.Dialer
	// Poller owns readiness; nil means the process's default Poller,
	// started on first use.
	Poller *Poller
}

// DialContext is net.Dialer.DialContext, with the result wrapped.
func (d Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := d.Dialer
	if nd == nil {
		nd = &net.Dialer{}
	}
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	p := d.Poller
	if p == nil {
		p, err = defaultPoller()
		if err != nil {
			return c, nil // no epoll here: the connection as dialed
		}
	}
	return p.Wrap(c), nil
}
