package upstream

import (
	"time"

	"github.com/llmgw/gateway/shared/problem"
)

// ClientSettings is the backend client's connection settings as the
// config file's upstream section writes them (their yaml names). A zero
// field is the default its comment names, which WithDefaults applies.
type ClientSettings struct {
	// ConnectTimeout bounds a TCP/TLS connect. Default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration `yaml:"connect_timeout" json:"connect_timeout"`
	// MaxIdleConnsPerHost sizes the keep-alive pool per backend. Default
	// DefaultMaxIdleConnsPerHost.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host" json:"max_idle_conns_per_host"`
}

// Defaults for the zero values of ClientSettings.
const (
	DefaultConnectTimeout      = 3 * time.Second
	DefaultMaxIdleConnsPerHost = 1024
)

// WithDefaults is c with its zero (or negative) settings replaced by
// their defaults.
func (c ClientSettings) WithDefaults() ClientSettings {
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.MaxIdleConnsPerHost <= 0 {
		c.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	return c
}

// Check reports every problem with c under at, by the config file's
// field names.
func (c ClientSettings) Check(at problem.At) {
	problem.NotNegative(at, "connect_timeout", c.ConnectTimeout)
	problem.NotNegative(at, "max_idle_conns_per_host", c.MaxIdleConnsPerHost)
}
