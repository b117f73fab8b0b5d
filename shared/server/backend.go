package server

// Talking to a backend: the failover loop (send), one attempt at one
// endpoint (try), the round trip every backend call makes (roundTrip, the
// stored-response routes' too), and the checks of an answer before it is
// relayed: what failover reads (Retry-After), what makes a success a
// failure (a stream that is not SSE, an encoding the gateway cannot read,
// a JSON answer that is not JSON), gzip made plain, and a stream's first
// event awaited before the endpoint is committed.

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/telemetry"
)

// send tries the pool's endpoints in failover order until one answers with
// something other than a connect error, a header timeout, 429 or 5xx (or,
// for a stream, ends or stalls before its first event), at most
// MaxAttempts of them. A 429 moves the request to the next priority
// (reserved capacity spills to pay-as-you-go; the 429's siblings come
// after it); any other failure tries the same priority first (the
// order's own). It never retries once a response is handed back: no
// content reached the client before that. A non-streaming answer that
// outlasts ResponseTimeout is a 504 without another attempt.
func (s *Server) send(ctx context.Context, ex *exchange, w http.ResponseWriter, in http.Header, pool *route.Pool, op request.Operation,
	body *request.Body, raw []byte, inject bool) (answered, error) {
	s.Router.Sync(ctx, pool)
	var key uint64
	if len(pool.Endpoints) > 1 && ex.pin == "" {
		key = route.CacheKey(raw, body.Model)
	}
	var scratch [route.MaxEndpoints]*route.Endpoint
	order, wait := s.Router.Order(pool, scratch[:0], len(pool.Endpoints), key)
	if ex.pin != "" {
		// A stored response lives on one endpoint: only it can answer.
		order, wait = order[:0], 0
		for _, e := range pool.Endpoints {
			if e.Name == ex.pin {
				order = append(order, e)
			}
		}
	}
	if len(order) == 0 {
		return answered{}, upstreamUnavailable(pool.Name, wait)
	}
	var last *apiError
	for i, tries := 0, 0; i < len(order); i++ {
		e := order[i]
		if last != nil && ex.keepalive.Started() {
			ex.failoverAfterHeaders = true
		}
		if last != nil && e.Priority != order[i-1].Priority && ex.spill == "" {
			ex.spill = last.Code // why the request left its best priority
		}
		tries++
		a := attempt{ex: ex, w: w, pool: pool, e: e, op: op, body: body, lastTry: tries == s.MaxAttempts || i == len(order)-1}
		ex.upstreamStatus = 0
		e.Begin()
		resp, cancel, fail, final := s.try(ctx, a, in, raw, inject)
		if fail == nil {
			s.Router.Healthy(e)
			ex.served, ex.priority = e, e.Priority
			return answered{resp: resp, cancel: cancel, e: e}, nil
		}
		e.End()
		full := ex.upstreamStatus == http.StatusTooManyRequests
		if full {
			deferPriority(order[i+1:], e.Priority)
		}
		failover := !final && i < len(order)-1 && tries < s.MaxAttempts
		s.attemptEnds(ex, telemetry.Result{Status: ex.upstreamStatus, ErrorType: fail.Code, Failover: failover,
			Spill: failover && order[i+1].Priority != e.Priority})
		if last = fail; final || tries == s.MaxAttempts {
			break
		}
	}
	return answered{}, last
}

// answered is the attempt whose answer is relayed: its response, the
// cancel of its context (a silent backend's idle timer ends the request
// with it), and its endpoint.
type answered struct {
	resp   *http.Response
	cancel context.CancelCauseFunc
	e      *route.Endpoint
}

// release ends the attempt: its context, and its endpoint's in-flight
// count.
func (a answered) release() {
	a.cancel(nil)
	a.e.End()
}

// deferPriority moves rest's endpoints of priority p behind the others,
// keeping each group's order: after a 429 the next priority goes first,
// and that priority's other endpoints are tried only when it fails too
// (a pool of one priority still fails over to a sibling).
func deferPriority(rest []*route.Endpoint, p int) {
	for i := len(rest) - 1; i >= 0; i-- { // stable: bubble each of p's to the back
		if rest[i].Priority != p {
			continue
		}
		for j := i; j < len(rest)-1 && rest[j+1].Priority != p; j++ {
			rest[j], rest[j+1] = rest[j+1], rest[j]
		}
	}
}

// attempt is one try of one endpoint.
type attempt struct {
	ex      *exchange
	w       http.ResponseWriter
	pool    *route.Pool
	e       *route.Endpoint
	op      request.Operation
	body    *request.Body
	lastTry bool
}

// rewriteSlack covers what a rewrite adds: a longer model name,
// "stream_options":{"include_usage":true} and an output cap.
const rewriteSlack = 144

// rewrite is the attempt's body: raw with c applied (request.Body.RewriteWith).
// Each attempt gets its own exactly sized copy: the transport may still
// be reading a failed attempt's body, and a stream holds its body until
// it ends, so a pooled buffer would pin more memory. A body that fits a
// pooled buffer is rewritten there first and copied: its copy is then
// its size, not its size plus rewriteSlack (issue 38).
func rewrite(body *request.Body, raw []byte, c request.Changes) []byte {
	need := len(raw) + rewriteSlack
	scratch := bodyPool.Get().(*[]byte)
	defer putBody(scratch)
	if cap(*scratch) < need {
		return body.RewriteWith(make([]byte, 0, need), raw, c)
	}
	tmp := body.RewriteWith((*scratch)[:0], raw, c)
	*scratch = tmp
	return append(make([]byte, 0, len(tmp)), tmp...)
}

// try sends the request to one endpoint, under a context of its own that
// cancel ends (the caller's, once the answer is relayed). On failure it
// has benched the endpoint as the answer deserves; final says no other
// endpoint may be tried (the client left, or a JSON answer timed out).
func (s *Server) try(ctx context.Context, a attempt, in http.Header, raw []byte, inject bool) (resp *http.Response, cancel context.CancelCauseFunc, fail *apiError, final bool) {
	ex, e, pool := a.ex, a.e, a.pool
	target := s.Targets[e]
	ex.endpoint = e.Name
	ex.attempts++
	out := rewrite(a.body, raw, request.Changes{
		Model: target.BodyModel(a.body.Model), InjectUsage: inject, OutputCap: ex.budget.OutputCap(), CapField: target.CapField(a.op)})
	actx, cancel := context.WithCancelCause(ctx)
	req, err := target.NewRequest(actx, a.op, a.body.Model, out, in)
	if err != nil {
		cancel(nil)
		ex.detail = fmt.Sprintf("endpoint %s: %v", e.Name, err)
		return nil, nil, credentialError(pool.Name, err), false
	}
	s.attemptBegins(ctx, ex, req, target, a.op, a.body.Model, e.Priority)
	timeout := s.HeaderTimeout
	if !a.body.Stream {
		timeout = s.ResponseTimeout
	}
	timer := attemptTimer(timeout, cancel)
	resp, fail, final = s.roundTrip(ctx, ex, req, call{ctx: actx, cancel: cancel, timer: timer, e: e, pool: pool.Name, timeout: timeout, stream: a.body.Stream})
	if fail != nil {
		return nil, nil, fail, final
	}
	if fail := s.judge(ex, e, pool.Name, resp, a.body.Stream); fail != nil {
		timer.Stop()
		drain(resp.Body)
		cancel(nil)
		return nil, nil, fail, false
	}
	decodeBody(resp)
	ex.upstreamHeaders = s.Now()
	if !a.body.Stream || resp.StatusCode/100 != 2 {
		// A JSON answer: its head is read within the attempt's time, and
		// checked, before the client gets a byte.
		fail, final := s.awaitJSON(ctx, actx, a, resp, timeout)
		timer.Stop()
		if fail != nil {
			drain(resp.Body)
			cancel(nil)
			return nil, nil, fail, final
		}
		return resp, cancel, nil, false
	}
	timer.Stop()
	if a.body.Stream && resp.StatusCode/100 == 2 {
		if fail, final := s.awaitFirstEvent(ctx, actx, cancel, a, resp); fail != nil {
			return nil, nil, fail, final
		}
	}
	return resp, cancel, nil, false
}

// call is one backend round trip's attempt: its context, what ends it,
// where it goes and how long it may take to answer.
type call struct {
	ctx    context.Context // a child of the request's context
	cancel context.CancelCauseFunc
	// timer cancels ctx with errAttemptTimeout after timeout; the caller
	// stops it once the answer began as it must.
	timer *time.Timer
	// e is benched for a failure; nil for a stored response's endpoint,
	// the only one that has it.
	e       *route.Endpoint
	pool    string
	timeout time.Duration // HeaderTimeout for a stream, else ResponseTimeout
	stream  bool
}

// attemptTimer arms an attempt's timeout.
func attemptTimer(timeout time.Duration, cancel context.CancelCauseFunc) *time.Timer {
	return time.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
}

// roundTrip is the one round trip of every backend call: it sends req,
// made under c.ctx, with the gateway's request id. A failure to answer
// ends c.ctx, benches c.e and is classified: the client left (ctx, the
// request's, ended), the attempt timed out, or the transport failed;
// final says no other endpoint may be tried (the client left, or a JSON
// answer timed out: it would only be slow again elsewhere).
func (s *Server) roundTrip(ctx context.Context, ex *exchange, req *http.Request, c call) (resp *http.Response, fail *apiError, final bool) {
	if len(ex.idHeader) == 1 && ex.idHeader[0] == ex.id {
		req.Header["X-Request-Id"] = ex.idHeader
	} else {
		req.Header.Set("X-Request-Id", ex.id)
	}
	ex.sent = s.Now()
	if ex.firstSent.IsZero() {
		ex.firstSent = ex.sent
	}
	resp, err := s.Client.Do(req)
	ex.noteAttempt(resp, err)
	if err == nil {
		ex.upstreamStatus = resp.StatusCode
		return resp, nil, false
	}
	c.timer.Stop()
	timedOut := errors.Is(context.Cause(c.ctx), errAttemptTimeout)
	c.cancel(nil)
	if ctx.Err() != nil {
		return nil, contextError(ctx), true
	}
	if c.e != nil {
		s.bench(c.e)
	}
	if timedOut {
		return nil, attemptTimeout(c.pool, c.timeout), !c.stream
	}
	ex.detail = err.Error() // the reason (x509: …) for the operator; the caller gets the class
	return nil, transportError(c.pool, err), false
}

// judge says whether a backend's answer is a failure to try elsewhere,
// and benches the endpoint accordingly: 429 and 5xx (for Retry-After or
// the default cooldown), a refusal of the gateway's own credentials, a
// redirect (never followed, never relayed), and a success the gateway
// cannot relay as asked.
func (s *Server) judge(ex *exchange, e *route.Endpoint, pool string, resp *http.Response, stream bool) *apiError {
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		adv := route.Advise(resp.Header, resp.StatusCode, s.Now())
		switch {
		case adv.Own:
			// The backend has room for others: this request alone was too
			// much, so it moves on and nobody else is benched.
			ex.detail = fmt.Sprintf("endpoint %s: 429 with capacity left: the request's own, nothing cooled", e.Name)
		case adv.Pause > 0:
			s.Router.Cooldown(context.Background(), e, adv.Pause, true)
		default:
			s.bench(e)
		}
		return statusError(pool, resp.StatusCode, adv.Pause, adv.Pause > 0)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// The caller cannot fix the gateway's credentials: a 502, not the
		// backend's 401. The endpoint is named in the log, never to the caller.
		ex.detail = fmt.Sprintf("endpoint %s rejected the gateway's credentials (status %d)", e.Name, resp.StatusCode)
		return upstreamAuthFailed(pool, resp.StatusCode)
	case resp.StatusCode/100 == 3:
		s.bench(e)
		return redirected(ex, e.Name, pool, resp.StatusCode)
	}
	if bad := checkAnswer(resp, stream); bad != "" {
		// A stream answered with a web page, or a body in an encoding the
		// gateway cannot read: never a silent success.
		s.bench(e)
		ex.detail = fmt.Sprintf("endpoint %s: %s", e.Name, bad)
		return badResponse(pool, bad)
	}
	return nil
}

// awaitJSON reads a JSON answer's head (jsonAnswer) into ex.answer and
// checks it: an answer that is cut, stalls, or is not the JSON a success
// must be is abandoned for the next endpoint; one that outlasts the
// attempt's timeout ends the request (final), as a slow answer would
// only be slow again elsewhere.
func (s *Server) awaitJSON(ctx, actx context.Context, a attempt, resp *http.Response, timeout time.Duration) (fail *apiError, final bool) {
	ex, pool := a.ex, a.pool.Name
	ans := getAnswer()
	err := ans.readHead(resp.Body)
	switch {
	case err != nil && ctx.Err() != nil:
		answerPool.Put(ans)
		return contextError(ctx), true
	case err != nil && errors.Is(context.Cause(actx), errAttemptTimeout):
		answerPool.Put(ans)
		s.bench(a.e)
		return attemptTimeout(pool, timeout), !a.body.Stream
	case err != nil:
		answerPool.Put(ans)
		s.bench(a.e)
		ex.detail = fmt.Sprintf("endpoint %s: answer cut off: %v", a.e.Name, err)
		return answerCut(pool, err), false
	}
	if bad := checkBody(resp, ans, a.op); bad != "" {
		answerPool.Put(ans)
		s.bench(a.e)
		ex.detail = fmt.Sprintf("endpoint %s: %s", a.e.Name, bad)
		return badResponse(pool, bad), false
	}
	ex.answer = ans
	return nil, false
}

// awaitFirstEvent sends the client the stream's headers (unless a
// keepalive did) but nothing else until the backend's first event: an
// endpoint that sends none in time, or ends or stalls first, is abandoned
// for the next (never the last attempt, which only the idle timeout ends).
// On success ex.first holds what was read, the event included, for the
// relay to write first.
func (s *Server) awaitFirstEvent(ctx, actx context.Context, cancel context.CancelCauseFunc, a attempt, resp *http.Response) (fail *apiError, final bool) {
	ex := a.ex
	if !a.op.Creates() {
		ex.keepalive.Commit(func() { s.writeStreamHeader(a.w, ex, resp) })
	}
	wait, why := s.StreamIdleTimeout, errStreamIdle
	if ftt := s.streamPolicy(a.pool).FirstTokenTimeout; ftt > 0 && ftt < wait && !a.lastTry {
		wait, why = ftt, errFirstToken
	}
	timer := time.AfterFunc(wait, func() { cancel(why) })
	// Read into a buffer of the relay's pool: the relay goes on in it
	// (sse.Options.Pending), so a stream holds one buffer, not two.
	s.relay.Pending(&ex.first)
	err := ex.first.ReadFirst(resp.Body, sse.DefaultMaxEventBytes)
	timer.Stop()
	if err != nil {
		ex.first.Release()
		drain(resp.Body)
		timedOut := context.Cause(actx)
		cancel(nil)
		if ctx.Err() != nil {
			return contextError(ctx), true
		}
		s.bench(a.e)
		ex.detail = fmt.Sprintf("endpoint %s: %v", a.e.Name, err)
		return firstEventError(a.pool.Name, timedOut, wait, err), false
	}
	ex.upstreamFirst = s.Now()
	if a.op.Creates() {
		// The owner is recorded from response.created, before the client
		// gets a byte of the stream, and the headers wait for it so that
		// a failed record can be told in them.
		unrecorded := s.remember(ex, ex.first.Bytes(), true)
		if unrecorded != "" {
			a.w.Header().Set(HeaderUnrecorded, unrecorded)
		}
		if !ex.keepalive.Commit(func() { s.writeStreamHeader(a.w, ex, resp) }) && unrecorded != "" {
			_, _ = ex.keepalive.Write([]byte(": " + strings.ToLower(HeaderUnrecorded) + "\n\n"))
		}
	}
	return nil, false
}

// streamPolicy is pool's keepalive and first-token policy.
func (s *Server) streamPolicy(pool *route.Pool) StreamPolicy {
	if p, ok := s.Streams[pool.Name]; ok {
		return p
	}
	return s.DefaultStreams
}

// bench cools e for DefaultCooldown, softly: a failure the backend gave
// no pause for puts the endpoint last, not out. The cooldown is this
// replica's own (only a pause the backend asked for is shared), so no
// request context bounds it.
func (s *Server) bench(e *route.Endpoint) {
	s.Router.Cooldown(context.Background(), e, s.DefaultCooldown, false)
}

func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	_ = body.Close()
}

// isEventStream reports whether h's media type is text/event-stream
// (compared case-insensitively, parameters allowed).
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// checkAnswer says what is wrong with a successful answer the gateway
// cannot relay as it was asked for ("" = nothing): a stream must be
// text/event-stream, and a body must be plain or gzip (the gateway never
// asks for an encoding, and it must scan what it relays).
func checkAnswer(resp *http.Response, stream bool) string {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ""
	}
	if stream && !isEventStream(resp.Header) {
		return fmt.Sprintf("answered a streaming request with %q, not text/event-stream", resp.Header.Get("Content-Type"))
	}
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity", "gzip", "x-gzip":
	default:
		return fmt.Sprintf("sent Content-Encoding %q, which the gateway does not decode", ce)
	}
	return ""
}

// decodeBody makes a gzip body plain, so that the header the client gets
// always agrees with the bytes (the gateway scans and may append to them).
// The gzip header is read on the first Read, not here: a stream's first
// bytes may be a while coming.
func decodeBody(resp *http.Response) {
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))) {
	case "gzip", "x-gzip":
		resp.Body = &gunzip{src: resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	}
}

type gunzip struct {
	src io.ReadCloser
	zr  *gzip.Reader
	err error
}

func (g *gunzip) Close() error { return g.src.Close() }

func (g *gunzip) Read(p []byte) (int, error) {
	if g.zr == nil && g.err == nil {
		g.zr, g.err = gzip.NewReader(g.src)
		if g.err != nil {
			g.err = fmt.Errorf("gzip: %w", g.err)
		}
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.zr.Read(p)
}

// plainJSON reports whether ct is application/json without parameters
// (any case, spaces around it), which mime.ParseMediaType would accept
// as JSON: the usual answer's type, told without the parameter map
// ParseMediaType makes.
func plainJSON(ct string) bool {
	const want = "application/json"
	ct = strings.TrimSpace(ct)
	if len(ct) != len(want) {
		return false
	}
	for i := 0; i < len(want); i++ { // ASCII only, as ParseMediaType's tokens
		c := ct[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// jsonAnswer is a JSON answer's first bytes and the scanner that reads
// the whole answer as it is relayed. Pooled: a scanner keeps small copies
// of the members it reads.
type jsonAnswer struct {
	buf   [32 << 10]byte
	n     int
	whole bool // buf[:n] is the whole answer
	scan  sse.AnswerScanner
}

var answerPool = sync.Pool{New: func() any { return new(jsonAnswer) }}

func getAnswer() *jsonAnswer {
	a := answerPool.Get().(*jsonAnswer)
	a.n, a.whole = 0, false
	a.scan.Reset()
	return a
}

// readHead reads the answer until it ends or fills buf. io.ReadFull cannot
// be used: it says ErrUnexpectedEOF both for a short complete body and for
// a body the backend cut, and a cut body must never be relayed as complete.
func (a *jsonAnswer) readHead(body io.Reader) error {
	var err error
	for a.n < len(a.buf) && err == nil {
		var m int
		m, err = body.Read(a.buf[a.n:])
		a.n += m
	}
	a.scan.Write(a.buf[:a.n])
	if err == io.EOF {
		a.whole = true
		return nil
	}
	return err
}

// checkBody says what is wrong with a successful non-streaming answer
// ("" = nothing), by op's answer kind (issue 33): a JSON answer must be
// JSON by its media type (when it names one) and, when it fits the head,
// one whole JSON object; a binary answer must name one of the row's
// media types (a backend answering speech with an HTML page or a JSON
// error under 200 is a backend failure, never relayed as audio).
func checkBody(resp *http.Response, a *jsonAnswer, op request.Operation) string {
	if resp.StatusCode/100 != 2 {
		return ""
	}
	if op.Answer() == request.AnswerBinary {
		ct := resp.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !op.AnswerMedia(mt) {
			return fmt.Sprintf("answered %s with %q", op.API(), ct)
		}
		return ""
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !plainJSON(ct) {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
			return fmt.Sprintf("answered with %q, not JSON", ct)
		}
	}
	if a.whole && !a.scan.Complete() {
		return fmt.Sprintf("sent %d bytes that are not one whole JSON object", a.n)
	}
	return ""
}
