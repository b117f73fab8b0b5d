package dispatch

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// Settings is the backend conversation's attempts, timeouts and
// cooldown as the config file's upstream section writes them (their
// yaml names). A zero field is the default its comment names, which
// WithDefaults applies (server.New does, for the Dispatcher it builds).
type Settings struct {
	// MaxAttempts bounds the endpoints tried per request before the
	// first byte. Default DefaultMaxAttempts.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// HeaderTimeout bounds the wait for a streaming backend's response
	// headers; past it the next endpoint is tried. Default
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration `yaml:"header_timeout" json:"header_timeout"`
	// ResponseTimeout bounds a non-streaming answer, which a backend
	// sends only when it is done; past it the client gets 504 and no
	// other endpoint is tried (the first may still be working, and
	// paying). Default DefaultResponseTimeout.
	ResponseTimeout time.Duration `yaml:"response_timeout" json:"response_timeout"`
	// StreamIdleTimeout ends a backend stream that sends nothing for
	// this long (an SSE error event tells the client). Default
	// DefaultStreamIdleTimeout.
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout" json:"stream_idle_timeout"`
	// DefaultCooldown is the router's first outlier ejection
	// (route.Options.EjectBase): how long an endpoint with a run of
	// failures the backend gave no Retry-After for is tried last. At
	// most max_cooldown, which bounds every cooldown
	// (route.Settings.CheckBound refuses more). Default DefaultCooldown.
	DefaultCooldown time.Duration `yaml:"default_cooldown" json:"default_cooldown"`
}

// Defaults for the zero values of Settings.
const (
	DefaultMaxAttempts = 3
	DefaultCooldown    = 5 * time.Second
	// DefaultHeaderTimeout is long because some backends hold a stream's
	// headers until the first token, which a reasoning model may take
	// minutes to produce; keepalive comments keep the client's hops open
	// meanwhile. A dead endpoint fails fast on connect instead.
	DefaultHeaderTimeout     = 2 * time.Minute
	DefaultResponseTimeout   = 10 * time.Minute
	DefaultStreamIdleTimeout = 2 * time.Minute
)

// WithDefaults is s with its zero (or negative) settings replaced by
// their defaults.
func (s Settings) WithDefaults() Settings {
	if s.MaxAttempts <= 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.DefaultCooldown <= 0 {
		s.DefaultCooldown = DefaultCooldown
	}
	if s.HeaderTimeout <= 0 {
		s.HeaderTimeout = DefaultHeaderTimeout
	}
	if s.ResponseTimeout <= 0 {
		s.ResponseTimeout = DefaultResponseTimeout
	}
	if s.StreamIdleTimeout <= 0 {
		s.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	return s
}

// Check reports every problem with s under at, by the config file's
// field names.
func (s Settings) Check(at problem.At) {
	problem.NotNegative(at, "max_attempts", s.MaxAttempts)
	problem.NotNegative(at, "header_timeout", s.HeaderTimeout)
	problem.NotNegative(at, "response_timeout", s.ResponseTimeout)
	problem.NotNegative(at, "stream_idle_timeout", s.StreamIdleTimeout)
	problem.NotNegative(at, "default_cooldown", s.DefaultCooldown)
}
