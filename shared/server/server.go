package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
)

// Authenticator verifies a request's Authorization header.
type Authenticator interface {
	Verify(ctx context.Context, authorization string) (auth.Principal, error)
}

// Limiter takes one request token from a tenant's bucket.
type Limiter interface {
	Take(ctx context.Context, tenant string) (ratelimit.Decision, error)
}

// ErrShutdown is the cause the HTTP host cancels its requests' base
// context with (http.Server.BaseContext) when the shutdown grace is
// nearly over: streams then end in-band with their error event (code
// "shutdown"), other requests answer 503 shutdown, and each handler still
// settles its budget and writes its access-log line before the grace
// ends (issue 32), as a Lambda stream does before its deadline.
var ErrShutdown = errors.New("the gateway is shutting down")

// Readiness says whether the gateway can serve yet (auth.Verifier: the
// issuer's keys have been fetched once).
type Readiness interface {
	Ready() bool
}

// Doer sends a backend request (an *http.Client).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Deps is everything the server needs; no field may be nil except where said.
type Deps struct {
	Auth    Authenticator
	Tenants *tenant.Table
	Limiter Limiter
	Router  *route.Router
	// Targets is each endpoint's backend target.
	Targets map[*route.Endpoint]*upstream.Target
	Client  Doer
	Log     *slog.Logger
	// AccessLog takes the access log: one JSON line per request, each in
	// one Write, while Log is enabled at Info; nil: no access log. It must
	// be safe for concurrent Writes (an *os.File is), and may be Log's
	// own writer.
	AccessLog io.Writer

	// Limits is the bounds on one request: its header and body bytes,
	// the time to read its body.
	Limits
	// MaxAttempts bounds the endpoints tried before the first byte.
	// Default DefaultMaxAttempts.
	MaxAttempts int
	// DefaultCooldown benches an endpoint that failed without Retry-After.
	// Default DefaultCooldown.
	DefaultCooldown time.Duration
	// HeaderTimeout bounds the wait for a streaming backend's headers
	// (then the next endpoint is tried). Default DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// ResponseTimeout bounds a non-streaming answer (then 504, no retry).
	// Default DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// StreamIdleTimeout ends a backend stream silent for this long.
	// Default DefaultStreamIdleTimeout.
	StreamIdleTimeout time.Duration
	// Streams is each pool's keepalive and first-token policy, by pool
	// name; pools not in it get DefaultStreams. New applies
	// StreamPolicy's defaults to each.
	Streams        map[string]StreamPolicy
	DefaultStreams StreamPolicy
	// MinRemaining refuses a request whose context deadline (a Lambda
	// invocation's) is nearer than this. Default DefaultMinRemaining;
	// negative = off.
	MinRemaining time.Duration
	// CountTimeout bounds the gateway's own call to a pool's input-token
	// count, made only when a prompt bound would be refused (count.go);
	// past it the request is refused as if there were no count. Default
	// DefaultCountTimeout.
	CountTimeout time.Duration
	// Budgets applies tenants' token budgets; nil: none (no budget work
	// on any request).
	Budgets Budgets
	// BudgetScanner reads a request's prompt bound for Budgets (its zero
	// value bounds an image by prompt.DefaultImageTokens).
	BudgetScanner prompt.Scanner
	// Prices is the price catalogue the spend limits charge by (issue
	// 35); nil: none (a tenant with a spend limit needs it: the config
	// check makes sure).
	Prices *price.Catalogue
	// Affinity records where stored Responses live (default: in memory).
	Affinity Affinity
	// ResponseTTL is how long a stored response's record is kept: the
	// backend's retention. Default DefaultResponseTTL.
	ResponseTTL time.Duration
	// Telemetry exports metrics and spans (telemetry/otlp); nil: none.
	Telemetry Telemetry
	// Ready answers /readyz (a readiness probe: 503 not_ready until it
	// is true); nil: ready at once. /healthz is liveness and always 200.
	Ready Readiness
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Server is the gateway's http.Handler.
type Server struct {
	Deps
	// relayer relays streams with pooled read buffers; backends is the
	// conversation with the backends (dispatch), which relays through it.
	relayer  sse.Relayer
	backends dispatch.Dispatcher
	routes   map[string]methods
	lines    sync.Pool // of *logLine, the access log's
	// exchanges is a pool of *exchange, a request's state (begin, finish).
	exchanges sync.Pool
}

// Defaults for the zero values of Deps, Limits and StreamPolicy, which
// New applies. Where a setting can be turned off (MinRemaining, a stream's
// KeepaliveInterval) a negative value is off, as net.Dialer's KeepAlive.
const (
	// DefaultMaxHeaderBytes is a header block's cap. The HTTP host
	// (functions/gateway) reads it too: its net/http bound is twice
	// the handler's, so that a block between the two is answered 431 by
	// the handler, logged, and a larger one by net/http itself.
	DefaultMaxHeaderBytes = 32 << 10
	DefaultMaxBodyBytes   = 1 << 20
	DefaultMaxAttempts    = 3
	DefaultCooldown       = 5 * time.Second
	// DefaultHeaderTimeout is long because some backends hold a stream's
	// headers until the first token, which a reasoning model may take
	// minutes to produce; keepalive comments keep the client's hops open
	// meanwhile. A dead endpoint fails fast on connect instead.
	DefaultHeaderTimeout     = 2 * time.Minute
	DefaultResponseTimeout   = 10 * time.Minute
	DefaultBodyReadTimeout   = 10 * time.Second
	DefaultStreamIdleTimeout = 2 * time.Minute
	// DefaultCountTimeout: a count endpoint answers in well under a
	// second; a refusal should not wait on a slow one.
	DefaultCountTimeout = 2 * time.Second
	// DefaultKeepaliveInterval is under every common idle timeout in front
	// of the gateway: API Gateway's 30 s, nginx's and load balancers' 60 s,
	// Cloudflare's 100 s, Container Apps' 240 s.
	DefaultKeepaliveInterval = 15 * time.Second
	// DefaultMinRemaining: a Lambda invocation with less left is refused.
	DefaultMinRemaining = 5 * time.Second
	// DefaultResponseTTL is OpenAI's retention of stored responses.
	DefaultResponseTTL = 30 * 24 * time.Hour
)

// New wires the server. It does no I/O.
func New(d Deps) *Server {
	d.Limits = d.Limits.WithDefaults()
	if d.MaxAttempts <= 0 {
		d.MaxAttempts = DefaultMaxAttempts
	}
	if d.DefaultCooldown <= 0 {
		d.DefaultCooldown = DefaultCooldown
	}
	if d.HeaderTimeout <= 0 {
		d.HeaderTimeout = DefaultHeaderTimeout
	}
	if d.ResponseTimeout <= 0 {
		d.ResponseTimeout = DefaultResponseTimeout
	}
	if d.StreamIdleTimeout <= 0 {
		d.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if d.CountTimeout <= 0 {
		d.CountTimeout = DefaultCountTimeout
	}
	if d.MinRemaining == 0 {
		d.MinRemaining = DefaultMinRemaining
	}
	d.DefaultStreams = d.DefaultStreams.withDefaults()
	if len(d.Streams) > 0 {
		streams := make(map[string]StreamPolicy, len(d.Streams)) // the caller's map stays as given
		for name, p := range d.Streams {
			streams[name] = p.withDefaults()
		}
		d.Streams = streams
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Affinity == nil {
		d.Affinity = affinity.NewMemory(0, d.Now)
	}
	if d.ResponseTTL <= 0 {
		d.ResponseTTL = DefaultResponseTTL
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{Deps: d, lines: sync.Pool{New: newLogLine}, exchanges: sync.Pool{New: func() any { return new(exchange) }}}
	s.routes = s.routeTable()
	s.backends = dispatch.Dispatcher{Router: d.Router, Health: d.Router, Targets: d.Targets, Client: d.Client,
		Buffers: bodyBuffers{}, Log: d.Log, Now: d.Now, Relayer: &s.relayer, Shutdown: ErrShutdown,
		MaxAttempts: d.MaxAttempts, DefaultCooldown: d.DefaultCooldown, HeaderTimeout: d.HeaderTimeout,
		ResponseTimeout: d.ResponseTimeout, StreamIdleTimeout: d.StreamIdleTimeout}
	return s
}

// StreamPolicy is how a pool's streams ride out long silences.
type StreamPolicy struct {
	// KeepaliveInterval: after this long with nothing sent to the client,
	// the response headers (if not yet sent) and an SSE comment go out, so
	// no proxy in between cuts the stream for idleness. Default
	// DefaultKeepaliveInterval; negative = off.
	KeepaliveInterval time.Duration
	// FirstTokenTimeout abandons an endpoint that answered a stream's
	// headers but no event within it, for the next endpoint. It never cuts
	// the last attempt. 0 = off.
	FirstTokenTimeout time.Duration
}

// streamPolicy is pool's keepalive and first-token policy.
func (s *Server) streamPolicy(pool *route.Pool) StreamPolicy {
	if p, ok := s.Streams[pool.Name]; ok {
		return p
	}
	return s.DefaultStreams
}

// withDefaults returns p with a zero KeepaliveInterval replaced by
// DefaultKeepaliveInterval.
func (p StreamPolicy) withDefaults() StreamPolicy {
	if p.KeepaliveInterval == 0 {
		p.KeepaliveInterval = DefaultKeepaliveInterval
	}
	return p
}
