//go:build !linux

package epollconn

import (
	"errors"
	"net"
)

// Poller is Linux-only; elsewhere Dialer returns connections as dialed.
type Poller struct{}

// NewPoller reports that there is no epoll on this system.
func NewPoller() (*Poller, error) { return nil, errors.New("epollconn: epoll is Linux-only") }

// Wrap returns c.
func (p *Poller) Wrap(c net.Conn) net.Conn { return c }

// Close does nothing.
func (p *Poller) Close() error { return nil }

func defaultPoller() (*Poller, error) { return NewPoller() }
