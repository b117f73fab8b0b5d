package dispatch

// Talking to a backend: the failover loop (Send), one attempt at one
// endpoint (try), the round trip every backend call makes (roundTrip,
// Fetch's too), and the checks of an answer before it is relayed: what
// failover reads (Retry-After), what makes a success a failure (a stream
// that is not SSE, an encoding the gateway cannot read, a JSON answer
// that is not JSON), and a stream's first event awaited before the
// endpoint is committed.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
)

// Send tries the pool's endpoints in failover order until one answers
// with something other than a connect error, a header timeout, 429 or
// 5xx (or, for a stream, ends or stalls before its first event), at most
// MaxAttempts of them. A 429 moves the request to the next priority
// (reserved capacity spills to pay-as-you-go; the 429's siblings come
// after it); any other failure tries the same priority first (the
// order's own). It never retries once a response is handed back: no
// content reached the client before that. A non-streaming answer that
// outlasts ResponseTimeout is a 504 without another attempt. On success
// c holds the answer for Relay (and Release); the error is an *Error.
func (d *Dispatcher) Send(ctx context.Context, c *Call, res *Result) error {
	pool := c.Pool
	d.Router.Sync(ctx, pool)
	var key uint64
	if len(pool.Endpoints) > 1 && c.Pin == "" {
		key = route.CacheKey(c.Raw, c.Body.Model)
	}
	order, wait := d.Router.Order(pool, c.order[:0], len(pool.Endpoints), key)
	if c.Pin != "" {
		// A stored response lives on one endpoint: only it can answer.
		order, wait = order[:0], 0
		for _, e := range pool.Endpoints {
			if e.Name == c.Pin {
				order = append(order, e)
			}
		}
	}
	if len(order) == 0 {
		return &Error{Kind: Unavailable, Pool: pool.Name, Wait: wait}
	}
	var last *Error
	for i, tries := 0, 0; i < len(order); i++ {
		e := order[i]
		// A tenant past its share of an endpoint's capacity this minute
		// goes on to the next (route's share.go), without an attempt:
		// nobody else's requests move. The order's last is tried whatever
		// the tenant holds of it: there is nowhere else to go.
		if i < len(order)-1 && !d.Router.Admit(e, c.Tenant, c.Asked) {
			res.OverShare = true
			continue
		}
		if last != nil && c.Keepalive.Started() {
			res.FailoverAfterHeaders = true
		}
		tries++
		lastTry := tries == d.MaxAttempts || i == len(order)-1
		res.UpstreamStatus = 0
		e.Begin()
		fail, final := d.try(ctx, c, res, e, lastTry)
		if fail == nil {
			d.Router.Healthy(e)
			res.Served, res.Priority = e, e.Priority
			c.e = e
			return nil
		}
		e.End()
		if res.UpstreamStatus == http.StatusTooManyRequests {
			deferPriority(order[i+1:], e.Priority)
		}
		failover := !final && i < len(order)-1 && tries < d.MaxAttempts
		c.Hooks.AttemptFailed(fail, failover, failover && order[i+1].Priority != e.Priority)
		if last = fail; final || tries == d.MaxAttempts {
			break
		}
	}
	return last
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

// rewriteSlack covers what a rewrite adds: a longer model name,
// "stream_options":{"include_usage":true,"continuous_usage_stats":true},
// an output cap and max_tool_calls (a cache_salt or tenant-keyed ids
// beyond it grow the buffer once).
const rewriteSlack = 208

// rewrite is the attempt's body: raw with ch applied
// (request.Body.RewriteWith). Each attempt gets its own exactly sized
// copy: the transport may still be reading a failed attempt's body, and
// a stream holds its body until it ends, so a pooled buffer would pin
// more memory. A body that fits a scratch buffer is rewritten there
// first and copied: its copy is then its size, not its size plus
// rewriteSlack.
func (d *Dispatcher) rewrite(body *request.Body, raw []byte, ch request.Changes) []byte {
	need := len(raw) + rewriteSlack
	scratch := d.Buffers.Get()
	defer d.Buffers.Put(scratch)
	if cap(*scratch) < need {
		return body.RewriteWith(make([]byte, 0, need), raw, ch)
	}
	tmp := body.RewriteWith((*scratch)[:0], raw, ch)
	*scratch = tmp
	return append(make([]byte, 0, len(tmp)), tmp...)
}

// try sends the request to one endpoint, under a context of its own
// that c.cancel ends (Release, once the answer is relayed). On failure
// it has benched the endpoint as the answer deserves; final says no
// other endpoint may be tried (the client left, or a JSON answer timed
// out).
func (d *Dispatcher) try(ctx context.Context, c *Call, res *Result, e *route.Endpoint, lastTry bool) (fail *Error, final bool) {
	target, pool, body := d.Targets[e], c.Pool.Name, c.Body
	res.Endpoint = e.Name
	res.Attempts++
	tier := "" // the standard tier in the kind's spelling, when asked
	if c.StandardTier {
		tier = target.StandardTier(c.Op)
	}
	out := d.rewrite(body, c.Raw, request.Changes{
		Model: target.BodyModel(body.Model), InjectUsage: c.Inject, RunningUsage: target.RunningUsage(), OutputCap: c.OutputCap, CapField: target.CapField(c.Op),
		Tenant: c.Tenant, SaltCache: target.SaltsCache(), MaxToolCalls: c.MaxToolCalls, ServiceTier: tier})
	actx, cancel := context.WithCancelCause(ctx)
	req, err := target.NewRequest(actx, c.Op, body.Model, out, c.Header)
	if err != nil {
		cancel(nil)
		res.Detail = fmt.Sprintf("endpoint %s: %v", e.Name, err)
		return &Error{Kind: Credential, Pool: pool, Err: err}, false
	}
	c.Hooks.AttemptBegins(ctx, req, target, e.Priority)
	timeout := d.HeaderTimeout
	if !body.Stream {
		timeout = d.ResponseTimeout
	}
	timer := d.attemptTimer(timeout, cancel)
	resp, fail, final := d.roundTrip(ctx, c, res, req, round{ctx: actx, cancel: cancel, timer: timer, e: e, pool: pool, timeout: timeout, stream: body.Stream})
	if fail != nil {
		return fail, final
	}
	if fail := d.judge(res, e, pool, resp, body.Stream); fail != nil {
		timer.Stop()
		drain(resp.Body)
		cancel(nil)
		return fail, false
	}
	decodeBody(resp)
	res.UpstreamHeaders = d.Now()
	if !body.Stream || resp.StatusCode/100 != 2 {
		// A JSON answer: its head is read within the attempt's time, and
		// checked, before the client gets a byte.
		fail, final := d.awaitJSON(ctx, actx, c, res, e, resp, timeout)
		timer.Stop()
		if fail != nil {
			drain(resp.Body)
			cancel(nil)
			return fail, final
		}
	} else {
		timer.Stop()
		if fail, final := d.awaitFirstEvent(ctx, actx, cancel, c, res, e, resp, lastTry); fail != nil {
			return fail, final
		}
	}
	c.resp, c.cancel = resp, cancel
	c.streamed = body.Stream && IsEventStream(resp.Header)
	return nil, false
}

// round is one backend round trip's attempt: its context, what ends it,
// where it goes and how long it may take to answer.
type round struct {
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
func (d *Dispatcher) attemptTimer(timeout time.Duration, cancel context.CancelCauseFunc) *time.Timer {
	return time.AfterFunc(timeout, func() { cancel(errAttemptTimeout) })
}

// roundTrip is the one round trip of every backend call: it sends req,
// made under r.ctx, with the gateway's request id. A failure to answer
// ends r.ctx, benches r.e and is classified: the client left (ctx, the
// request's, ended), the attempt timed out, or the transport failed;
// final says no other endpoint may be tried (the client left, or a JSON
// answer timed out: it would only be slow again elsewhere).
func (d *Dispatcher) roundTrip(ctx context.Context, c *Call, res *Result, req *http.Request, r round) (resp *http.Response, fail *Error, final bool) {
	if len(c.IDHeader) == 1 && c.IDHeader[0] == c.ID {
		req.Header["X-Request-Id"] = c.IDHeader
	} else {
		req.Header.Set("X-Request-Id", c.ID)
	}
	res.Sent = d.Now()
	if res.FirstSent.IsZero() {
		res.FirstSent = res.Sent
	}
	resp, err := d.Client.Do(req)
	if maySpend(resp, err) {
		res.MaySpend = true
	}
	if err == nil {
		res.UpstreamStatus = resp.StatusCode
		return resp, nil, false
	}
	r.timer.Stop()
	timedOut := errors.Is(context.Cause(r.ctx), errAttemptTimeout)
	r.cancel(nil)
	if ctx.Err() != nil {
		return nil, canceled(ctx), true
	}
	if r.e != nil {
		d.bench(r.e)
	}
	if timedOut {
		return nil, &Error{Kind: Timeout, Pool: r.pool, Wait: r.timeout}, !r.stream
	}
	res.Detail = err.Error() // the reason (x509: …) for the operator; the caller gets the class
	return nil, &Error{Kind: Transport, Pool: r.pool, Err: err}, false
}

// maySpend says whether a backend may have spent tokens on an attempt:
// it accepted the request (2xx), or the attempt failed after the request
// may have reached it (a timeout, a reset, the client leaving). A
// refused connection, or a 429/5xx/4xx answer, spends nothing.
func maySpend(resp *http.Response, err error) bool {
	if err != nil {
		return !refused(err)
	}
	return resp != nil && resp.StatusCode/100 == 2
}

// refused: err is a refused connection (the dial failed), apart so that
// its errors.As target is allocated only for a failed round trip.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// judge says whether a backend's answer is a failure to try elsewhere,
// and benches the endpoint accordingly: 429 and 5xx (cooled for
// Retry-After and its kin, else counted toward an ejection), a refusal of the gateway's own credentials, a
// redirect (never followed, never relayed), and a success the gateway
// cannot relay as asked.
func (d *Dispatcher) judge(res *Result, e *route.Endpoint, pool string, resp *http.Response, stream bool) *Error {
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		adv := route.Advise(resp.Header, resp.StatusCode, d.Now())
		var wait time.Duration // what the backend asked, as the router bounds it
		switch {
		case adv.Own:
			// The backend has room for others: this request alone was too
			// much, so it moves on and nobody else is benched.
			res.Detail = fmt.Sprintf("endpoint %s: 429 with capacity left: the request's own, nothing cooled", e.Name)
			wait = adv.Pause // for this caller alone
		case adv.Pause > 0:
			wait = d.Router.Cooldown(context.Background(), e, adv.Pause, true)
		default:
			d.bench(e)
		}
		return &Error{Kind: Status, Pool: pool, Status: resp.StatusCode, Wait: wait, Hard: wait > 0}
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// The caller cannot fix the gateway's credentials: a 502, not the
		// backend's 401. The endpoint is named in the log, never to the caller.
		res.Detail = fmt.Sprintf("endpoint %s rejected the gateway's credentials (status %d)", e.Name, resp.StatusCode)
		return &Error{Kind: AuthFailed, Pool: pool, Status: resp.StatusCode}
	case resp.StatusCode/100 == 3:
		d.bench(e)
		return redirected(res, e.Name, pool, resp.StatusCode)
	}
	if bad := checkAnswer(resp, stream); bad != "" {
		// A stream answered with a web page, or a body in an encoding the
		// gateway cannot read: never a silent success.
		d.bench(e)
		res.Detail = fmt.Sprintf("endpoint %s: %s", e.Name, bad)
		return &Error{Kind: BadResponse, Pool: pool, What: bad}
	}
	return nil
}

// redirected is a backend's 3xx: a failure like a 5xx (a redirect
// relayed with its Location could hand a tenant an internal URL with a
// signature). Its Location reaches neither the caller nor the log.
func redirected(res *Result, endpoint, pool string, status int) *Error {
	res.Detail = fmt.Sprintf("endpoint %s answered %d, a redirect; the gateway never follows or relays one", endpoint, status)
	return &Error{Kind: Redirect, Pool: pool, Status: status}
}

// awaitJSON reads a JSON answer's head (jsonAnswer) into c.answer and
// checks it: an answer that is cut, stalls, or is not the JSON a success
// must be is abandoned for the next endpoint; one that outlasts the
// attempt's timeout ends the request (final), as a slow answer would
// only be slow again elsewhere.
func (d *Dispatcher) awaitJSON(ctx, actx context.Context, c *Call, res *Result, e *route.Endpoint, resp *http.Response, timeout time.Duration) (fail *Error, final bool) {
	pool := c.Pool.Name
	ans := getAnswer()
	err := ans.readHead(resp.Body)
	switch {
	case err != nil && ctx.Err() != nil:
		answerPool.Put(ans)
		return canceled(ctx), true
	case err != nil && errors.Is(context.Cause(actx), errAttemptTimeout):
		answerPool.Put(ans)
		d.bench(e)
		return &Error{Kind: Timeout, Pool: pool, Wait: timeout}, !c.Body.Stream
	case err != nil:
		answerPool.Put(ans)
		d.bench(e)
		res.Detail = fmt.Sprintf("endpoint %s: answer cut off: %v", e.Name, err)
		return &Error{Kind: AnswerCut, Pool: pool, Err: err}, false
	}
	if bad := checkBody(resp, ans, c.Op); bad != "" {
		answerPool.Put(ans)
		d.bench(e)
		res.Detail = fmt.Sprintf("endpoint %s: %s", e.Name, bad)
		return &Error{Kind: BadResponse, Pool: pool, What: bad}, false
	}
	c.answer = ans
	return nil, false
}

// awaitFirstEvent sends the client the stream's headers (unless a
// keepalive did) but nothing else until the backend's first event: an
// endpoint that sends none in time, or ends or stalls first, is abandoned
// for the next (never the last attempt, which only the idle timeout ends).
// On success c.first holds what was read, the event included, for the
// relay to write first.
func (d *Dispatcher) awaitFirstEvent(ctx, actx context.Context, cancel context.CancelCauseFunc, c *Call, res *Result, e *route.Endpoint, resp *http.Response, lastTry bool) (fail *Error, final bool) {
	if !c.Creates {
		c.Keepalive.Commit(func() { d.writeStreamHeader(c, res, resp) })
	}
	wait, why := d.StreamIdleTimeout, errStreamIdle
	if ftt := c.FirstTokenTimeout; ftt > 0 && ftt < wait && !lastTry {
		wait, why = ftt, errFirstToken
	}
	timer := time.AfterFunc(wait, func() { cancel(why) })
	// Read into a buffer of the relay's pool: the relay goes on in it
	// (sse.Options.Pending), so a stream holds one buffer, not two.
	d.Relayer.Pending(&c.first)
	err := c.first.ReadFirst(resp.Body, sse.DefaultMaxEventBytes)
	timer.Stop()
	if err != nil {
		c.first.Release()
		drain(resp.Body)
		timedOut := context.Cause(actx)
		cancel(nil)
		if ctx.Err() != nil {
			return canceled(ctx), true
		}
		d.bench(e)
		res.Detail = fmt.Sprintf("endpoint %s: %v", e.Name, err)
		switch {
		case errors.Is(timedOut, errFirstToken):
			return &Error{Kind: FirstToken, Pool: c.Pool.Name, Wait: wait}, false
		case errors.Is(timedOut, errStreamIdle):
			return &Error{Kind: FirstIdle, Pool: c.Pool.Name, Wait: wait}, false
		}
		return &Error{Kind: FirstFailed, Pool: c.Pool.Name, Err: err}, false
	}
	res.UpstreamFirst = d.Now()
	if c.Creates {
		// The owner is recorded from response.created, before the client
		// gets a byte of the stream, and the headers wait for it so that
		// a failed record can be told in them.
		unrecorded := c.Hooks.Created(c.first.Bytes())
		if unrecorded != "" {
			c.W.Header().Set(HeaderUnrecorded, unrecorded)
		}
		if !c.Keepalive.Commit(func() { d.writeStreamHeader(c, res, resp) }) && unrecorded != "" {
			_, _ = c.Keepalive.Write([]byte(": " + strings.ToLower(HeaderUnrecorded) + "\n\n"))
		}
	}
	return nil, false
}

// Fetch makes the one round trip of a stored response's route to the
// endpoint that has it (newRequest makes the request under the context
// it is given), and readies its answer for Relay: a resumed stream
// (stream, answered 2xx SSE) is relayed as one, bounded by the idle
// timeout; anything else as JSON, bounded by ResponseTimeout. A redirect
// fails.
func (d *Dispatcher) Fetch(ctx context.Context, c *Call, res *Result, endpoint, pool string, stream bool,
	newRequest func(context.Context) (*http.Request, error)) error {
	timeout := d.ResponseTimeout
	if stream {
		timeout = d.HeaderTimeout
	}
	rctx, cancel := context.WithCancelCause(ctx)
	c.cancel, c.fetched = cancel, true
	timer := d.attemptTimer(timeout, cancel)
	c.timer = timer
	req, err := newRequest(rctx)
	if err != nil {
		res.Detail = err.Error()
		return &Error{Kind: Credential, Pool: pool, Err: err}
	}
	res.Attempts = 1
	resp, fail, _ := d.roundTrip(ctx, c, res, req, round{ctx: rctx, cancel: cancel, timer: timer, pool: pool, timeout: timeout, stream: stream})
	if fail != nil {
		return fail
	}
	c.resp = resp
	res.UpstreamHeaders = d.Now()
	if stream && resp.StatusCode/100 == 2 && IsEventStream(resp.Header) {
		timer.Stop()
		decodeBody(resp)
		c.streamed = true
		return nil
	}
	if resp.StatusCode/100 == 3 {
		return redirected(res, endpoint, pool, resp.StatusCode)
	}
	decodeBody(resp)
	return nil
}

// HeaderUnrecorded is set on a Responses answer whose stored response the
// gateway could not record (the store failed): its id is then refused to
// everyone, its creator included, and the caller learns it here rather
// than from a 404 later. A stream whose headers a keepalive had already
// sent gets the same news as an SSE comment before its first event.
const HeaderUnrecorded = "X-Llmgw-Response-Unrecorded"

// bench counts a failed attempt at e against it (route.Router.Failed): a
// failure the backend gave no pause for may be this request's alone, so it
// moves this request on and benches e for everyone only when it is one of
// a run across requests (an outlier ejection, for DefaultCooldown). Only a
// pause the backend asked for cools e at once.
func (d *Dispatcher) bench(e *route.Endpoint) {
	d.Router.Failed(e)
}
