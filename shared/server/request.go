package server

// The one wrapper every route goes through (the Caddy and
// net/http/httputil shape): ServeHTTP gives each response the gateway's
// own request id and picks the route's handler; serve opens the request's
// access-log entry, renders the error the handler returns (once),
// recovers a panic, lets go of what the request holds and writes the log
// line. No handler answers an error before its response started, nor
// writes the log: once a relay has written to the client, a failure ends
// the stream there (the stream's error event, a JSON answer's abort).

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/keepalive"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/server/listener"
	"github.com/llmgw/gateway/shared/tenant"
)

// handler serves one route. It returns what went wrong, an *apiError or a
// cause fail maps to one, for serve to render; it never answers an error
// itself.
type handler func(w http.ResponseWriter, r *http.Request, ex *exchange) error

// logEntry is what one request leaves in the access log (and reports to
// telemetry): one JSON line with who, what, where, and how long; the
// keepalive's and the budget's figures are read from their owners when
// the line is written. It never holds a token, key or prompt.
type logEntry struct {
	id              string
	start           time.Time
	method, path    string
	tenant, subject string
	tenantName      string // the tenant's readable name from config ("" = none)
	model, pool     string
	spill           string // why the request left its best priority: the failure's code ("" = it did not)
	// dropped names the body members not forwarded (admitFields).
	dropped     string
	stream      bool
	streamKnown bool // the body was read: a refused caller's never is
	// Result is what the conversation with the backends observed
	// (dispatch.Result): the endpoint, the attempts, the statuses, what
	// was relayed and the usage. The server's own answers write its
	// status, outcome and bytes too.
	dispatch.Result
	// limit and budgetDecision are the limiter's and the budget's
	// decisions, for telemetry.
	limit          string
	budgetDecision string
}

// exchange is one request's state on its way through the path (one
// request and its answer, hence the name; the package request reads the
// client's body), grouped by owner, so that each part is written by the
// step that owns it and read by the rest:
//
//   - logEntry: the access log's record (accesslog.go), dispatch.Result
//     embedded, which the conversation with the backends writes;
//   - bill and budget: billing's state, what the steps gather for
//     billing.Plan (the caller's scope, the features' priced uses, the
//     tier asked, a continued response's stored context) and the
//     reservation billing.NewReservation made (budget.go);
//   - call and hooks: the conversation with the backends (dispatch.Call,
//     and what it tells the server as it goes);
//   - stored: the stored response it continues or creates (responses.go);
//   - tel: its telemetry (telemetry.go);
//   - the rest is the HTTP side: the response's id, the keepalive, the
//     operation and its body, the concurrency slot, the body watcher,
//     which serve lets go of at the end.
type exchange struct {
	logEntry
	// idHeader is the response's X-Request-Id value, which every backend
	// request carries too (dispatch.Call.IDHeader): one slice for both.
	idHeader []string
	// keepalive, when set, owns the stream's writes (keepalive.Writer).
	keepalive *keepalive.Writer
	op        request.Operation
	// creates: a POST /v1/responses, whose answer is a stored response to
	// record.
	creates bool
	// parsed is the request body's routing fields (request.Body), read
	// once by resolve.
	parsed request.Body
	// slot is the tenant whose concurrency slot the request holds (admit).
	slot *tenant.Tenant
	// keyModels narrows the tenant's models to a gateway key's
	// (auth.Principal.Models); nil: the tenant's.
	keyModels *auth.ModelSet
	// body is the request body as boundBody watches it; nil when there is
	// none or no connection to bound (Lambda).
	body *watchedBody

	// bill is what billing.Plan reads, filled in as the steps go: Scope
	// (the caller's project and user from its verified token, never the
	// request's say), Features (billing.Features), Tier
	// (billing.CheckTier), PreviousTokens (a continued response's
	// recorded total); the rest when the budget is reserved.
	bill   billing.Request
	budget *billing.Reservation // the request's token budget; nil without one

	call  dispatch.Call
	hooks hooks

	stored storedState
	tel    traceState
}

// context is the context a request's backend calls are made under: the
// request's, carrying its server span when telemetry is on.
func (ex *exchange) context(r *http.Request) context.Context {
	if ex.tel.ctx != nil {
		return ex.tel.ctx
	}
	return r.Context()
}

// ServeHTTP dispatches by exact path (routes.go), so unknown paths (404)
// and wrong methods (405) get OpenAI's error JSON rather than ServeMux's
// plain text, and serves every route but the health check through serve.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every response carries the gateway's own request id; a caller-supplied
	// one is never trusted into the log.
	w.Header()["X-Request-Id"] = []string{newRequestID()}
	s.boundBody(w, r)
	h := s.route(w, r)
	if h == nil { // a probe every few seconds is not traffic to log
		s.probe(w, r)
		return
	}
	s.serve(w, r, h)
}

// serve runs h with the request's state and log entry, and renders the
// error h returns: as the whole response, or, when a stream's headers
// already went out (a keepalive comment, or a backend's headers committed
// before its first event), as the stream's one error event.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, h handler) {
	ex := s.begin(w, r)
	defer s.finish(w, ex)
	if err := h(w, r, ex); err != nil {
		answerError(w, ex, err)
	}
}

// boundBody bounds the reading of a request's body from the moment its
// headers are in, before authentication, so that a caller without a token
// cannot hold a connection by announcing a body and going silent (every
// connection is bounded from its first byte). http.Server bounds the
// rest: ReadHeaderTimeout, IdleTimeout, MaxHeaderBytes.
//
// The read deadline is BodyReadTimeout from now. It also bounds what
// net/http does after the handler returns with a body unread: it reads up
// to 256 KiB more to reuse the connection, and without a deadline a silent
// client kept that read, and so the answer, waiting forever. A handler that
// reads the whole body clears the deadline (proxy.go), since a later read
// error would cancel the request's context and cut a long stream.
//
// A request without a body gets no deadline: nothing is read until it is
// done, and net/http's own background read must not time out under a slow
// handler. On Lambda there is no connection: SetReadDeadline reports
// http.ErrNotSupported, and nothing else here applies.
//
// A chunked request is answered with Connection: close: net/http accepts
// Transfer-Encoding together with Content-Length (it drops the latter, and
// the handler cannot tell), and RFC 9112 §6.1 then requires the server to
// close the connection after responding, against request smuggling.
func (s *Server) boundBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	if http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.BodyReadTimeout)) != nil {
		return
	}
	if r.ContentLength < 0 {
		w.Header()["Connection"] = []string{"close"}
	}
	r.Body = &watchedBody{ReadCloser: r.Body, ctx: r.Context()}
}

// watchedBody notes whether a request body was read to its end, so that an
// early answer can close a connection whose body is still unread instead of
// letting net/http wait for it.
type watchedBody struct {
	io.ReadCloser
	done bool
	ctx  context.Context // the request's: its connection, when a listener's, lingers
}

// closeEarly ends the connection after an answer given while the body is
// still unread: Connection: close, and a lingering close (listener.Linger),
// so that a client still sending reads the answer instead of a reset.
//
// The read deadline expires now: after the handler, net/http reads what
// is left of a small body (up to 256 KiB) before it closes, and a client
// that announced a body and sends none held its connection, busy, for
// the whole body_read_timeout. The lingering close, during which the
// connection is idle and gives way at the cap, reads the rest within its
// own bounds.
func (b *watchedBody) closeEarly(w http.ResponseWriter) {
	w.Header()["Connection"] = []string{"close"}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	listener.Linger(b.ctx)
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.done = true
	}
	return n, err
}

// closeUnread marks the response Connection: close when the request's body
// (on a connection boundBody bounded) has not been read to its end: the
// client may still be sending it, or may never, and the bytes that follow
// cannot be trusted to start the next request.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if b, ok := r.Body.(*watchedBody); ok && !b.done {
		b.closeEarly(w)
	}
}

// begin starts a request's state under the id ServeHTTP gave it.
func (s *Server) begin(w http.ResponseWriter, r *http.Request) *exchange {
	id := w.Header()["X-Request-Id"]
	if len(id) != 1 {
		id = []string{newRequestID()}
		w.Header()["X-Request-Id"] = id
	}
	ex := s.exchanges.Get().(*exchange)
	*ex = exchange{logEntry: logEntry{id: id[0], start: s.Now(), method: r.Method, path: r.URL.Path, Result: dispatch.Result{Outcome: "ok"}}, idHeader: id}
	if anthropicPath(r.URL.Path) {
		ex.op = request.Messages // its errors in Anthropic's shape
	}
	ex.body, _ = r.Body.(*watchedBody)
	s.traced(ex, r)
	return ex
}

// finish recovers a panic into a 500, then, with the client answered,
// frees the request's concurrency slot, writes the access-log line and
// reports the request to telemetry (a reservation was settled by the
// path that made it: serveProxy's settle). The exchange goes back to the
// pool, so a request allocates none.
func (s *Server) finish(w http.ResponseWriter, ex *exchange) {
	v := recover()
	if v != nil && v != http.ErrAbortHandler {
		s.Log.Error("panic in handler", "request_id", ex.id, "panic", v)
		if !ex.WroteHeader {
			fail(w, ex, nil)
			v = nil
		} else {
			ex.Outcome = "panic"
			v = http.ErrAbortHandler
		}
	}
	if ex.slot != nil {
		ex.slot.Release()
	}
	s.log(ex)
	s.report(ex)
	if v != nil {
		panic(v)
	}
	// Nothing holds the request's state past here (the keepalive's
	// timer, the idle timer and the telemetry's closures hold their own
	// parts): it is cleared, so it pins nothing, and pooled.
	*ex = exchange{}
	s.exchanges.Put(ex)
}

// addedMs is the access log's added_ms, the gateway's own time in a
// request: from its start until the first backend request was sent (what
// failed attempts took is the backends' time), plus from
// the backend's first event (a stream's) or headers (a JSON answer's) until
// the client was written that event (or, for JSON, the answer's first
// bytes). A request that never reached a backend is the gateway's time
// throughout. Each part is clamped at zero, so added_ms is never negative:
// a stream's headers go to the client before its first event (compared
// with them, 1 stream in 6 was "negative"), and that wait is the
// backend's, not the gateway's.
func addedMs(ex *logEntry, end time.Time) float64 {
	span := func(a, b time.Time) time.Duration {
		if a.IsZero() || b.IsZero() || b.Before(a) {
			return 0
		}
		return b.Sub(a)
	}
	if ex.FirstSent.IsZero() {
		return msOf(span(ex.start, end))
	}
	from, to := ex.UpstreamHeaders, ex.ClientFirst
	if !ex.UpstreamFirst.IsZero() {
		from, to = ex.UpstreamFirst, ex.ClientFirstEvent
	}
	return msOf(span(ex.start, ex.FirstSent) + span(from, to))
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

const hexDigits = "0123456789abcdef"

func newRequestID() string {
	var b [16]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = hexDigits[v&15]
		v >>= 4
	}
	return string(b[:])
}
