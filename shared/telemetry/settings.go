package telemetry

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// DefaultFlushTimeout is the FlushTimeout used when Settings leaves it
// zero: a collector on loopback (the Lambda layer, the Container Apps
// agent) answers in milliseconds, a remote one in well under a second.
const DefaultFlushTimeout = 2 * time.Second

// Settings is how the gateway's OTLP export behaves, as the config
// file's telemetry section writes it (its yaml names); whether and where
// it exports is the standard OTEL_* environment's (otlp.FromEnv). The
// zero value works: otlp.New applies WithDefaults.
type Settings struct {
	// TrustTraceparent continues a caller's W3C trace (traceparent,
	// tracestate) in the gateway's spans. Default false: every request
	// starts a trace of its own, so callers cannot place their requests
	// in a trace they choose; set it when the callers are your own
	// applications.
	TrustTraceparent bool `yaml:"trust_traceparent" json:"trust_traceparent"`
	// FlushTimeout bounds the export at the end of each Lambda
	// invocation and, on SIGTERM, the export after the open streams
	// ended (within what is left of shutdown_grace too). Default
	// DefaultFlushTimeout.
	FlushTimeout time.Duration `yaml:"flush_timeout" json:"flush_timeout"`
}

// WithDefaults is s with each setting it leaves zero set to its default.
func (s Settings) WithDefaults() Settings {
	if s.FlushTimeout == 0 {
		s.FlushTimeout = DefaultFlushTimeout
	}
	return s
}

// Check reports every problem with s under at, by the config file's
// field names.
func (s Settings) Check(at problem.At) {
	problem.NotNegative(at, "flush_timeout", s.FlushTimeout)
}
