package dispatch

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/llmgw/gateway/shared/keepalive"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/upstream"
)

// Doer sends a backend request (an *http.Client, or a test's fake).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Router orders a pool's endpoints and keeps their health (route.Router
// satisfies it).
type Router interface {
	Sync(ctx context.Context, p *route.Pool)
	Order(p *route.Pool, dst []*route.Endpoint, max int, key uint64) ([]*route.Endpoint, time.Duration)
	Healthy(e *route.Endpoint)
	Cooldown(ctx context.Context, e *route.Endpoint, d time.Duration, hard bool) time.Duration
	Failed(e *route.Endpoint)
	// Admit reports whether tenant's request, asking asked tokens, fits
	// its share of e's capacity this minute (and counts it).
	Admit(e *route.Endpoint, tenant string, asked int64) bool
}

// StreamHealth hears how a served endpoint's stream ended (route.Router
// satisfies it).
type StreamHealth interface {
	StreamDone(e *route.Endpoint)
	StreamFailed(e *route.Endpoint)
}

// Buffers lends the scratch buffer an attempt's body is rewritten in
// (the server's pool of request bodies).
type Buffers interface {
	Get() *[]byte
	Put(*[]byte)
}

// Hooks is what the conversation tells its caller as it goes: the
// telemetry of each attempt and, for an answer that creates a stored
// response, its id to record before the client gets a byte of it.
type Hooks interface {
	// AttemptBegins: req, made for target, is about to be sent to an
	// endpoint of the given priority.
	AttemptBegins(ctx context.Context, req *http.Request, target *upstream.Target, priority int)
	// AttemptFailed: the attempt failed with fail; failover says another
	// endpoint is tried, spill that it is of another priority.
	AttemptFailed(fail *Error, failover, spill bool)
	// Created: a stream's first event (response.created); it returns
	// the response's id when it could not be recorded.
	Created(first []byte) (unrecorded string)
	// CreatedAnswer: a JSON answer's scanner, once its head was read (h,
	// the client's headers, can still be written) and again at its end
	// (h nil: an id past the head).
	CreatedAnswer(scan *sse.AnswerScanner, h http.Header)
}

// Dispatcher holds the settings every conversation shares. Its zero
// Settings are not defaults: the caller (server.New) applies
// Settings.WithDefaults.
type Dispatcher struct {
	Router  Router
	Health  StreamHealth
	Targets map[*route.Endpoint]*upstream.Target
	Client  Doer
	Buffers Buffers
	Log     *slog.Logger
	Now     func() time.Time
	// Relayer relays the streams, with its pooled read buffers.
	Relayer *sse.Relayer
	// Shutdown is the cause the host cancels requests with when it shuts
	// down: a stream it ends gets the shutdown error, not a client's.
	Shutdown error

	Settings
}

// Call is one request's conversation with the backends: what the caller
// decided (set before Send or Fetch), and the answer being relayed. It
// lives in the caller's pooled request state, so a request allocates none.
type Call struct {
	ID string
	// Tenant is the caller's tenant: the body's abuse-attribution ids and
	// cache_salt are keyed by it (request.Changes.Tenant).
	Tenant string
	// Asked is what the request asks of an endpoint's capacity: its
	// prompt bound and output caps, in tokens (Router.Admit).
	Asked int64
	// IDHeader is the X-Request-Id value the client's response carries:
	// every backend request carries the same slice.
	IDHeader []string
	Op       request.Operation
	// Creates: the answer is a stored response to record (Hooks.Created).
	Creates bool
	Pool    *route.Pool
	Body    *request.Body
	Raw     []byte
	// Header is the client's request headers.
	Header http.Header
	// Inject asks for stream_options.include_usage, and has the relay
	// strip the usage chunk the client did not ask for.
	Inject bool
	// Pin is the endpoint a stored response lives on ("" = any).
	Pin string
	// OutputCap is the output cap to write into the request (0 = none);
	// MaxTokenEvents cuts a stream past it (0 = no bound); Choices is the
	// choices reserved for (the output floor's). Billing decides all three.
	OutputCap      int64
	MaxTokenEvents int64
	Choices        int64
	// MaxToolCalls is the Responses API's max_tool_calls to write when
	// the body bounds no built-in tool calls (0 = none): the uses billing
	// reserved for its hosted tools.
	MaxToolCalls int64
	// StandardTier: the request leaves its service tier to the backend
	// and its tenant may use only the standard tier (billing.TierAsk's
	// StandardOnly): each attempt writes its endpoint kind's spelling of
	// the standard tier (upstream.Target.StandardTier).
	StandardTier bool
	// FirstTokenTimeout abandons a stream's endpoint that sent no event
	// within it (never the last attempt's); 0 = off.
	FirstTokenTimeout time.Duration
	// Keepalive, when set, owns the stream's writes.
	Keepalive *keepalive.Writer
	W         http.ResponseWriter
	Hooks     Hooks

	// The answered attempt, let go of by Release.
	resp     *http.Response
	cancel   context.CancelCauseFunc
	e        *route.Endpoint // nil for a stored response's fetch
	timer    *time.Timer     // a fetch's attempt timer
	idle     *idleReader
	answer   *jsonAnswer // a JSON answer's head (awaitJSON)
	first    sse.Pending // a stream's first event (awaitFirstEvent)
	streamed bool        // the answer is relayed as SSE
	// order is the endpoints' failover order (Router.Order's scratch):
	// here, a slice handed to an interface would be allocated per request.
	order   [route.MaxEndpoints]*route.Endpoint
	fetched bool // Fetch, not Send, got the answer
}

// Streamed reports whether the answer is relayed as a stream.
func (c *Call) Streamed() bool { return c.streamed }

// Release lets go of the answered attempt: its timers, its buffers, its
// body, its context and its endpoint's in-flight count. It is safe
// without an answer.
func (c *Call) Release() {
	if c.idle != nil {
		c.idle.t.Stop()
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.first.Release()
	if c.answer != nil {
		answerPool.Put(c.answer)
		c.answer = nil
	}
	if c.resp != nil {
		_ = c.resp.Body.Close()
	}
	if c.cancel != nil {
		c.cancel(nil)
	}
	if c.e != nil {
		c.e.End()
	}
}

// Result is what the conversation observed, for the access log,
// telemetry and the caller's billing: the caller keeps it beside its own
// log entry and reads it when the request ends.
type Result struct {
	// Endpoint is the last endpoint tried; Served the one whose answer is
	// relayed (a stream it cuts counts against its health), Priority its
	// priority.
	Endpoint string
	Served   *route.Endpoint
	Priority int
	Attempts int
	// FailoverAfterHeaders: an endpoint was tried after the keepalive's
	// comments went out.
	FailoverAfterHeaders bool
	// OverShare: an endpoint was passed over because the tenant had used
	// its share of the endpoint's capacity this minute (Router.Admit).
	OverShare      bool
	UpstreamStatus int
	// Status is the status the client got; WroteHeader that it got it.
	Status      int
	WroteHeader bool
	Outcome     string
	// Detail is why a backend attempt failed, for the operator only.
	Detail      string
	Bytes       int64
	Events      int64
	TokenEvents int64 // events that may carry generated tokens (sse.Result)
	AnswerBytes int64 // a whole successful JSON answer's size
	Usage       sse.Usage
	HasUsage    bool
	// UsageFinal: usage was read from the answer's bill (a JSON answer's
	// top-level usage, a stream's sse.Meter bill), not from a stream's
	// input counts or running total.
	UsageFinal bool
	// OutputFloor is the least output a true usage of the stream reports
	// (sse.Meter.OutputFloor of the events relayed).
	OutputFloor      int64
	Sent             time.Time // request handed to the backend (the last attempt)
	FirstSent        time.Time // the first attempt's request handed to a backend
	UpstreamHeaders  time.Time // backend's response headers arrived
	UpstreamFirst    time.Time // a stream's first event arrived (streams are committed then)
	ClientFirst      time.Time // first byte (headers) flushed to the client
	ClientFirstEvent time.Time // first SSE event written to the client
	// MaySpend: a backend may have spent tokens on the request: it
	// accepted it (2xx), or an attempt failed after the request may have
	// reached it (a timeout, a reset, the client leaving).
	MaySpend bool
	// Cut: the relay ended the stream at MaxTokenEvents; Stopped: it
	// ended before its terminal event otherwise (the client left, the
	// shutdown, the backend failed, went silent or stopped sending, a
	// deadline), the backend cancelled mid-answer (billing.Observed).
	Cut, Stopped bool
}

// SetUsage records u when ok.
func (r *Result) SetUsage(u sse.Usage, ok bool) {
	if ok {
		r.Usage, r.HasUsage = u, true
	}
}
