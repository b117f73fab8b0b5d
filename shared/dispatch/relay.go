package dispatch

// Relaying a backend's answer to the client: SSE event by event with a
// flush each (through the keepalive writer), or JSON as sent; a silent
// backend is cut off by the idle reader.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/shared/keepalive"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/upstream"
)

// Relay relays the answer Send or Fetch got: SSE event by event with a
// flush each, or the JSON as sent. A backend that goes silent mid-body
// is cut off after StreamIdleTimeout: its timer ends the attempt's
// context. A JSON answer the attempt read whole (awaitJSON) is not read
// again: it needs none.
//
// Its error is an *Error: for a JSON answer, one that failed before the
// client got a byte (the caller answers it), or ErrAborted after; for a
// stream, the one error event the caller ends the stream with
// (res.WroteHeader is set), nil when the stream ended as it should or
// the client left.
func (d *Dispatcher) Relay(ctx context.Context, c *Call, res *Result, rc *http.ResponseController) error {
	resp := c.resp
	var src io.Reader = resp.Body
	idle := c.streamed
	if !c.fetched {
		idle = c.Body.Stream || c.answer == nil || !c.answer.whole
	}
	if idle {
		c.idle = newIdleReader(resp.Body, d.StreamIdleTimeout, c.cancel, c.Keepalive.Clock())
		if !c.fetched {
			c.Keepalive.Watch(c.idle.last)
		}
		src = c.idle
	}
	if c.streamed {
		if e := d.relayStream(ctx, c, res, rc); e != nil {
			return e
		}
		return nil
	}
	return d.relayJSON(c, res, src)
}

// writeStreamHeader sends a stream's response headers: the backend's
// relayable ones and SSE's own.
func (d *Dispatcher) writeStreamHeader(c *Call, res *Result, resp *http.Response) {
	h := c.W.Header()
	upstream.CopyResponseHeaders(h, resp.Header)
	keepalive.SetHeaders(h)
	res.Status = resp.StatusCode
	c.W.WriteHeader(resp.StatusCode)
	_ = http.NewResponseController(c.W).Flush()
	res.ClientFirst = d.Now()
}

// relayStream relays an SSE response: headers flushed at once, then every
// event written and flushed as it completes. After the first byte nothing
// is retried: a failure ends the stream with one SSE error event, which
// it returns for the caller to word.
func (d *Dispatcher) relayStream(ctx context.Context, c *Call, res *Result, rc *http.ResponseController) *Error {
	res.WroteHeader = true
	resp, w := c.resp, c.W
	var dst io.Writer = w
	flush := rc.Flush
	if ka := c.Keepalive; ka != nil {
		// Comments fill long gaps mid-stream too: the relay writes
		// through the keepalive from here.
		ka.Commit(func() { d.writeStreamHeader(c, res, resp) })
		if res.Status == 0 { // a keepalive comment sent the headers
			res.Status = http.StatusOK
		}
		dst, flush = ka, ka.Flush
	} else {
		d.writeStreamHeader(c, res, resp)
	}

	// From the first event on only data resets the idle timer: a backend
	// that sends nothing but comments is cut after StreamIdleTimeout. The
	// relay stores the idle clock itself (Activity), so it reads the body
	// as it is, with no reader in between; it starts with the first
	// event, read by the attempt into its buffer (c.first).
	meter := c.Op.Meter()
	r, err := d.Relayer.Relay(dst, flush, c.idle.r, sse.Options{StripUsageChunk: c.Inject, MaxTokenEvents: c.MaxTokenEvents,
		Activity: c.idle.last, Meter: meter, Pending: &c.first})
	if r.AfterDone {
		res.Detail = "dropped what the backend sent after the terminal event"
		d.Log.Warn("backend sent events after the stream's terminal event: dropped", "request_id", c.ID, "endpoint", res.Endpoint)
	}
	c.Keepalive.Stop()
	res.Bytes += r.Bytes
	res.Events, res.TokenEvents = r.Events, r.TokenEvents
	res.OutputFloor = meter.OutputFloor(r.FloorEvents, max(c.Choices, 1))
	res.SetUsage(r.Usage, r.HasUsage)
	res.UsageFinal = r.Final
	if !r.FirstWrite.IsZero() {
		res.ClientFirstEvent = r.FirstWrite
	}
	res.Stopped = !r.Done
	switch {
	case (err != nil || !r.Done) && !errors.Is(err, sse.ErrClient) && d.Shutdown != nil && errors.Is(context.Cause(ctx), d.Shutdown):
		return &Error{Kind: Shutdown}
	case errors.Is(err, sse.ErrClient):
		res.Outcome = "client_gone"
	case err == nil && r.Done:
		// The terminal event was written and flushed: the stream is
		// finished, whatever the client did next. Codex hangs up right
		// after response.completed, while the relay still reads the
		// backend's end; checking the cancelled request first logged
		// those streams client_gone.
	case errors.Is(ctx.Err(), context.Canceled):
		res.Outcome = "client_gone"
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{Kind: StreamDeadline}
	case errors.Is(err, sse.ErrTokenLimit):
		// The backend ignored the output cap written into the request:
		// the stream ends at its reservation, and is charged what was sent.
		res.Cut = true
		return &Error{Kind: OverCap}
	case r.EndedWithError:
		// The backend's own error event already reached the client: one
		// error event is the contract, not two.
		res.Outcome = "upstream_stream_error"
	case errors.Is(context.Cause(resp.Request.Context()), errStreamIdle):
		d.streamHealth(res, false)
		return &Error{Kind: StreamIdle, Wait: d.StreamIdleTimeout}
	case err != nil:
		d.streamHealth(res, false)
		return &Error{Kind: StreamFailed, Err: err}
	case !r.Done:
		d.streamHealth(res, false)
		return &Error{Kind: StreamEnded}
	default:
		d.streamHealth(res, true)
	}
	return nil
}

// streamHealth tells the router how the served endpoint's stream ended:
// a stall, a reset or an end without the terminal event count toward
// ejecting it (the client leaving, a deadline, the output cap or the
// backend's own error event do not: a caller can provoke those).
func (d *Dispatcher) streamHealth(res *Result, done bool) {
	switch {
	case res.Served == nil:
	case done:
		d.Health.StreamDone(res.Served)
	default:
		d.Health.StreamFailed(res.Served)
	}
}

// idleReader notes when each read returned data; its timer, when it
// fires, re-arms itself for what is left of the idle window, or cancels the
// backend request if the window passed with nothing read. So a silent
// backend is cut off after d, and a busy stream costs one clock read per
// read instead of a timer reset per event.
type idleReader struct {
	r io.Reader
	d time.Duration
	// last is the unix nanoseconds of the last read that returned data (a
	// stream's: of its last data, sse.Options.Activity): own, or the
	// clock newIdleReader was given.
	last   *atomic.Int64
	own    atomic.Int64
	t      *time.Timer
	cancel context.CancelCauseFunc
}

// newIdleReader starts r's idle timer. clock, when not nil, is where the
// reader keeps its clock (a stream's keepalive.Writer.Clock, beside the
// lock the relay takes per event anyway).
func newIdleReader(r io.Reader, d time.Duration, cancel context.CancelCauseFunc, clock *atomic.Int64) *idleReader {
	i := &idleReader{r: r, d: d, cancel: cancel, last: clock}
	if i.last == nil {
		i.last = &i.own
	}
	i.last.Store(time.Now().UnixNano())
	i.t = time.AfterFunc(time.Hour, i.check) // armed below: check needs i.t set
	i.t.Reset(d)
	return i
}

func (i *idleReader) check() {
	silent := time.Duration(time.Now().UnixNano() - i.last.Load())
	if silent >= i.d {
		i.cancel(errStreamIdle)
		return
	}
	i.t.Reset(i.d - silent)
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if n > 0 {
		i.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// relayJSON relays a non-streaming answer byte for byte. Its head was
// read and checked by the attempt (awaitJSON); the rest is copied through
// the same scanner, so usage and a Responses id are read from their
// documented places in an answer of any size. A stored response's owner
// is recorded before the client gets a byte of it. It fails only before
// the client got a byte; a body cut after that is ErrAborted.
func (d *Dispatcher) relayJSON(c *Call, res *Result, body io.Reader) error {
	resp, w := c.resp, c.W
	ans := c.answer
	c.answer = nil
	if ans == nil { // a fetch reads no head in an attempt
		ans = getAnswer()
		if err := ans.readHead(body); err != nil {
			answerPool.Put(ans)
			if errors.Is(context.Cause(resp.Request.Context()), errStreamIdle) {
				return &Error{Kind: BodyIdle, Wait: d.StreamIdleTimeout}
			}
			return &Error{Kind: BodyCut, Err: err}
		}
	}
	defer answerPool.Put(ans)
	// A binary answer (the row's answer kind) is bytes: relayed as they
	// come, nothing in them read. An error answer is JSON whatever the
	// row.
	scan := c.Op.Answer() == request.AnswerJSON || resp.StatusCode/100 != 2
	created := c.Creates && resp.StatusCode/100 == 2
	if created {
		c.Hooks.CreatedAnswer(&ans.scan, w.Header())
	}
	upstream.CopyResponseHeaders(w.Header(), resp.Header)
	res.Status = resp.StatusCode
	switch {
	case ans.whole:
		w.Header().Set("Content-Length", strconv.Itoa(ans.n))
	case resp.ContentLength > 0:
		// The client can then tell a body cut short from a whole one.
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	res.WroteHeader = true
	m, _ := w.Write(ans.buf[:ans.n])
	res.Bytes += int64(m)
	res.ClientFirst = d.Now()
	if !ans.whole {
		src := body
		if scan {
			src = io.TeeReader(body, &ans.scan)
		}
		n, err := io.CopyBuffer(struct{ io.Writer }{w}, src, ans.buf[:])
		res.Bytes += n
		switch {
		case err != nil:
			res.Outcome = "upstream_body_error"
		case scan && resp.StatusCode/100 == 2 && !ans.scan.Complete():
			res.Outcome = "upstream_bad_response"
			err = errors.New("not one whole JSON object")
		}
		if err != nil {
			res.Detail = fmt.Sprintf("endpoint %s: answer cut after %d bytes: %v", res.Endpoint, res.Bytes, err)
			readUsage(res, &ans.scan)
			return ErrAborted // a truncated JSON body must not look complete
		}
		if created {
			c.Hooks.CreatedAnswer(&ans.scan, nil) // an id past the head
		}
	}
	if scan {
		readUsage(res, &ans.scan)
	}
	if resp.StatusCode/100 == 2 {
		res.AnswerBytes = res.Bytes
	}
	return nil
}

// readUsage takes the answer's top-level usage for the record.
func readUsage(res *Result, scan *sse.AnswerScanner) {
	if u, ok := scan.Usage(); ok {
		res.SetUsage(u, true)
		res.UsageFinal = true // a JSON answer's top-level usage is its bill
	}
}
