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
	"github.com/llmgw/gateway/shared/problem"
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

// ErrShutdown is the cause the HTTP host cancels its requests' base context
// with (http.Server.BaseContext) when the shutdown grace is nearly over:
// streams then end in-band with their error event (code "shutdown"), other
// requests answer 503 shutdown, and each handler still settles its budget
// and writes its access-log line before the grace ends, as a Lambda stream
// does before its deadline.
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
	// Dispatch is the backend conversation's attempts, timeouts and
	// cooldown; New applies their defaults (dispatch.Settings).
	Dispatch dispatch.Settings
	// Streams is each pool's keepalive and first-token policy, by pool
	// name; pools not in it get DefaultStreams. New applies
	// StreamPolicy's defaults to each.
	Streams        map[string]StreamPolicy
	DefaultStreams StreamPolicy
	// Lambda is the bound on a Lambda invocation's time left; New
	// applies its default (LambdaSettings).
	Lambda LambdaSettings
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
	// Prices is the price catalogue the spend limits charge by; nil:
	// none (a tenant with a spend limit needs it: the config check makes
	// sure).
	Prices *price.Catalogue
	// Affinity records where stored Responses live (default: in memory).
	Affinity Affinity
	// ResponseTTL is how long a stored response's record is kept: the
	// backend's retention. Default DefaultResponseTTL.
	ResponseTTL time.Duration
	// Telemetry exports metrics and spans (telemetry/otlp); nil: none.
	Telemetry Telemetry
	// KeyAdmin manages the store's gateway keys on the admin route
	// (/admin/keys, admin.go) for an operator's JWT carrying AdminRole;
	// either unset: no admin route (404).
	KeyAdmin  KeyAdmin
	AdminRole string
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

// Defaults for the zero values of Deps and Limits, and for the settings
// a StreamPolicy or LambdaSettings leaves out, which New applies.
const (
	// DefaultMaxHeaderBytes is a header block's cap. The HTTP host
	// (functions/gateway) reads it too: its net/http bound is twice
	// the handler's, so that a block between the two is answered 431 by
	// the handler, logged, and a larger one by net/http itself.
	DefaultMaxHeaderBytes  = 32 << 10
	DefaultMaxBodyBytes    = 1 << 20
	DefaultBodyReadTimeout = 10 * time.Second
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
	d.Dispatch = d.Dispatch.WithDefaults()
	if d.CountTimeout <= 0 {
		d.CountTimeout = DefaultCountTimeout
	}
	d.Lambda = d.Lambda.WithDefaults()
	d.DefaultStreams = d.DefaultStreams.WithDefaults()
	if len(d.Streams) > 0 {
		streams := make(map[string]StreamPolicy, len(d.Streams)) // the caller's map stays as given
		for name, p := range d.Streams {
			streams[name] = p.WithDefaults()
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
		Settings: d.Dispatch}
	return s
}

// StreamPolicy is how a pool's streams ride out long silences, as the
// config file's upstream section and each pool write it (their yaml
// names; a pool's setting left out is upstream's). A setting left out
// (nil) is the default its comment names, which New applies.
type StreamPolicy struct {
	// KeepaliveInterval: after this long with nothing sent to the client,
	// the response headers (if not yet sent) and an SSE comment
	// (": keepalive") go out, then one per interval, so that no proxy
	// between the caller and the gateway cuts a long first-token wait or
	// a long gap. Default DefaultKeepaliveInterval; 0 = off.
	KeepaliveInterval *time.Duration `yaml:"keepalive_interval" json:"keepalive_interval"`
	// FirstTokenTimeout abandons an endpoint that answered a stream's
	// headers but sent no event within it, and tries the next one. It
	// never cuts the last attempt. Default 0 = off.
	FirstTokenTimeout *time.Duration `yaml:"first_token_timeout" json:"first_token_timeout"`
}

// streamPolicy is pool's keepalive and first-token policy, its defaults
// applied.
func (s *Server) streamPolicy(pool *route.Pool) StreamPolicy {
	if p, ok := s.Streams[pool.Name]; ok {
		return p
	}
	return s.DefaultStreams
}

// Or is p with each setting it leaves out taken from parent: a pool's
// policy under upstream's.
func (p StreamPolicy) Or(parent StreamPolicy) StreamPolicy {
	if p.KeepaliveInterval == nil {
		p.KeepaliveInterval = parent.KeepaliveInterval
	}
	if p.FirstTokenTimeout == nil {
		p.FirstTokenTimeout = parent.FirstTokenTimeout
	}
	return p
}

// WithDefaults is p with each setting it leaves out set to its default.
func (p StreamPolicy) WithDefaults() StreamPolicy {
	return p.Or(StreamPolicy{KeepaliveInterval: new(DefaultKeepaliveInterval), FirstTokenTimeout: new(time.Duration(0))})
}

// Keepalive is the keepalive interval, its default applied; 0 (or
// negative) is off.
func (p StreamPolicy) Keepalive() time.Duration {
	return *p.WithDefaults().KeepaliveInterval
}

// FirstToken is the first-token timeout; 0 (or negative) is off.
func (p StreamPolicy) FirstToken() time.Duration {
	return *p.WithDefaults().FirstTokenTimeout
}

// Check reports every problem with p under at, by the config file's
// field names.
func (p StreamPolicy) Check(at problem.At) {
	if p.KeepaliveInterval != nil {
		problem.NotNegative(at, "keepalive_interval", *p.KeepaliveInterval)
	}
	if p.FirstTokenTimeout != nil {
		problem.NotNegative(at, "first_token_timeout", *p.FirstTokenTimeout)
	}
}

// LambdaSettings is the request handler's bound on a Lambda invocation's
// time left, as the config file's lambda section writes it (its yaml
// name). A setting left out (nil) is the default its comment names,
// which New applies.
type LambdaSettings struct {
	// MinRemaining refuses (503, Retry-After) a request whose context
	// deadline (a Lambda invocation's) is nearer than this, rather than
	// start it and cut it. Default DefaultMinRemaining; 0 = off.
	MinRemaining *time.Duration `yaml:"min_remaining" json:"min_remaining"`
}

// WithDefaults is l with each setting it leaves out set to its default.
func (l LambdaSettings) WithDefaults() LambdaSettings {
	if l.MinRemaining == nil {
		l.MinRemaining = new(DefaultMinRemaining)
	}
	return l
}

// Check reports every problem with l under at, by the config file's
// field names.
func (l LambdaSettings) Check(at problem.At) {
	if l.MinRemaining != nil {
		problem.NotNegative(at, "min_remaining", *l.MinRemaining)
	}
}
