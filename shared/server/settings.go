package server

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/server/listener"
)

// Settings is the HTTP server's settings as the config file writes them,
// at its top level (their yaml names): the handler's bounds on one
// request, the listener's on the client connections and the host's own.
// The config holds
// it inline; New, listener.New and the host (HostSettings.WithDefaults)
// apply the defaults, Check states the rules.
type Settings struct {
	// Limits is the handler's bounds on one request (Deps.Limits).
	Limits Limits `yaml:",inline"`
	// Conns is the listener's bounds on the client connections
	// (listener.New), raw_syscalls aside.
	Conns listener.Options `yaml:",inline"`
	// RawSyscalls has the client's and the backends' TCP connections
	// read and write with raw system calls (package rawconn), so that a
	// gateway on one core does not wake the Go runtime's sysmon after
	// each idle spell. false keeps net's own reads and writes: go tool
	// trace then shows them as system calls, and sysmon preempts a
	// goroutine that runs long right after an idle spell on time.
	// Default true (listener.Options.PlainConns false).
	RawSyscalls *bool `yaml:"raw_syscalls" json:"raw_syscalls"`
	// Host is the HTTP host's own settings (functions/gateway).
	Host HostSettings `yaml:",inline"`
}

// HostSettings is the settings of the host that serves the handler: its
// http.Server's timeouts, its shutdown and its log. A zero field is the
// default its comment names, which WithDefaults applies.
type HostSettings struct {
	// ReadHeaderTimeout bounds reading a request's headers, from the
	// connection's first byte. Default DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" json:"read_header_timeout"`
	// IdleTimeout closes a keep-alive connection with no request for this
	// long. Default DefaultIdleTimeout.
	IdleTimeout time.Duration `yaml:"idle_timeout" json:"idle_timeout"`
	// ShutdownGrace is how long open streams may run after SIGTERM.
	// Default DefaultShutdownGrace.
	ShutdownGrace time.Duration `yaml:"shutdown_grace" json:"shutdown_grace"`
	// LogLevel is debug, info, warn or error. Default DefaultLogLevel.
	LogLevel string `yaml:"log_level" json:"log_level"`
}

// Defaults for the zero values of HostSettings.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultShutdownGrace     = 30 * time.Second
	// DefaultLogLevel is slog's zero level.
	DefaultLogLevel = "info"
)

// WithDefaults is h with its zero (or negative) settings replaced by
// their defaults.
func (h HostSettings) WithDefaults() HostSettings {
	if h.ReadHeaderTimeout <= 0 {
		h.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if h.IdleTimeout <= 0 {
		h.IdleTimeout = DefaultIdleTimeout
	}
	if h.ShutdownGrace <= 0 {
		h.ShutdownGrace = DefaultShutdownGrace
	}
	if h.LogLevel == "" {
		h.LogLevel = DefaultLogLevel
	}
	return h
}

// Check reports every problem with h under at, by the config file's
// field names.
func (h HostSettings) Check(at problem.At) {
	problem.NotNegative(at, "read_header_timeout", h.ReadHeaderTimeout)
	problem.NotNegative(at, "idle_timeout", h.IdleTimeout)
	problem.NotNegative(at, "shutdown_grace", h.ShutdownGrace)
	switch h.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		at.Add("log_level", "must be debug, info, warn or error, not %q", h.LogLevel)
	}
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
// (listener.Options.WithDefaults).
func (s Settings) Listener() listener.Options {
	o := s.Conns
	o.PlainConns = !s.RawConns()
	return o
}

// Check reports every problem with s under at, by the config file's
// field names: no count or duration below zero, and the listener's
// bounds between each other (listener.Options.Check).
func (s Settings) Check(at problem.At) {
	problem.NotNegative(at, "max_body_bytes", s.Limits.MaxBodyBytes)
	problem.NotNegative(at, "body_read_timeout", s.Limits.BodyReadTimeout)
	problem.NotNegative(at, "max_header_bytes", s.Limits.MaxHeaderBytes)
	problem.NotNegative(at, "max_connections", s.Conns.MaxConns)
	problem.NotNegative(at, "max_pending_connections", s.Conns.MaxPending)
	problem.NotNegative(at, "lingering_time", s.Conns.LingerTime)
	problem.NotNegative(at, "lingering_timeout", s.Conns.LingerTimeout)
	problem.NotNegative(at, "lingering_max_bytes", s.Conns.LingerBytes)
	problem.NotNegative(at, "send_timeout", s.Conns.SendTimeout)
	s.Conns.Check(at)
	s.Host.Check(at)
}
