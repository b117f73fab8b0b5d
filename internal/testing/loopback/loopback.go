// Package loopback finds free ports on 127.0.0.1 and waits for a server
// to accept connections there: what the tools and test libraries under
// scripts/ need to start a server process on a port they pick.
package loopback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// FreeAddrs returns n distinct addresses (127.0.0.1:port) that nothing
// listens on now: all n are held open until it returns, so none repeats.
// Another process may take one before the caller binds it, so a caller that
// hands an address to a child process retries when the child fails to bind.
func FreeAddrs(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("loopback: free port: %w", err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// FreePort returns a port on 127.0.0.1 that nothing listens on now, with
// the caveat of FreeAddrs.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("loopback: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// pollInterval is how long WaitListening waits between two dials.
const pollInterval = 20 * time.Millisecond

// ErrExited is what WaitListening returns when the server's process ended
// before it listened.
var ErrExited = errors.New("loopback: process exited before listening")

// WaitListening dials addr until it accepts a TCP connection, and returns
// nil then; ErrExited once exited is closed (a nil exited is never
// closed), or ctx's error, wrapped, when ctx ends first.
func WaitListening(ctx context.Context, addr string, exited <-chan struct{}) error {
	var d net.Dialer
	for {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			return c.Close()
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("loopback: %s not listening: %w", addr, context.Cause(ctx))
		case <-time.After(pollInterval):
		}
	}
}
