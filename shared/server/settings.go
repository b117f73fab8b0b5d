package server

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// Settings is the HTTP server's settings as the config file writes them,
// at its top level (their yaml names): the handler's bounds on one
// request and the listener's on the client connections. The config holds
// it inline; New and NewListener apply the defaults, Check states the
// rules.
type Settings struct {
	// Limits is the handler's bounds on one request (Deps.Limits).
	Limits Limits `yaml:",inline"`
	// Conns is the listener's bounds on the client connections
	// (NewListener), raw_syscalls aside.
	Conns ConnOptions `yaml:",inline"`
	// RawSyscalls has the client's and the backends' TCP connections
	// read and write with raw system calls (package rawconn), so that a
	// gateway on one core does not wake the Go runtime's sysmon after
	// each idle spell. false keeps net's own reads and writes: go tool
	// trace then shows them as system calls, and sysmon preempts a
	// goroutine that runs long right after an idle spell on time.
	// Default true (ConnOptions.PlainConns false).
	RawSyscalls *bool `yaml:"raw_syscalls" json:"raw_syscalls"`
}

// Limits is the request handler's bounds on one request. A zero field
// is the default its comment names, which New applies.
type Limits struct {
	// MaxBodyBytes caps a request body (413 beyond). Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// BodyReadTimeout bounds reading one request body; a client slower
	// than that gets 408. Default DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration `yaml:"body_read_timeout" json:"body_read_timeout"`
	// MaxHeaderBytes caps the request line and headers (431 beyond,
	// logged). Default DefaultMaxHeaderBytes; the HTTP host's net/http
	// bound is twice it.
	MaxHeaderBytes int `yaml:"max_header_bytes" json:"max_header_bytes"`
}

// WithDefaults is l with its zero (or negative) bounds replaced by
// their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.BodyReadTimeout <= 0 {
		l.BodyReadTimeout = DefaultBodyReadTimeout
	}
	return l
}

// RawConns reports whether connections read and write with raw system
// calls: raw_syscalls left out or true.
func (s Settings) RawConns() bool { return s.RawSyscalls == nil || *s.RawSyscalls }

// Listener is the listener's options as the file sets them (its Log
// left to the caller), zero where the file leaves them out
// (ConnOptions.WithDefaults).
func (s Settings) Listener() ConnOptions {
	o := s.Conns
	o.PlainConns = !s.RawConns()
	return o
}

// Check reports every problem with s under at, by the config file's
// field names: no count or duration below zero, and the listener's
// bounds between each other (ConnOptions.Check).
func (s Settings) Check(at problem.At) {
	problem.NotNegative(at, "max_body_bytes", s.Limits.MaxBodyBytes)
	problem.NotNegative(at, "body_read_timeout", s.Limits.BodyReadTimeout)
	problem.NotNegative(at, "max_header_bytes", s.Limits.MaxHeaderBytes)
	problem.NotNegative(at, "max_connections", s.Conns.MaxConns)
	problem.NotNegative(at, "max_pending_connections", s.Conns.MaxPending)
	problem.NotNegative(at, "lingering_time", s.Conns.LingerTime)
	problem.NotNegative(at, "lingering_timeout", s.Conns.LingerTimeout)
	problem.NotNegative(at, "lingering_max_bytes", s.Conns.LingerBytes)
	s.Conns.Check(at)
}
