package server

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

// writeStreamHeader sends a stream's response headers: the backend's
// relayable ones and SSE's own.
func (s *Server) writeStreamHeader(w http.ResponseWriter, ex *exchange, resp *http.Response) {
	h := w.Header()
	upstream.CopyResponseHeaders(h, resp.Header)
	keepalive.SetHeaders(h)
	ex.status = resp.StatusCode
	w.WriteHeader(resp.StatusCode)
	_ = http.NewResponseController(w).Flush()
	ex.clientFirst = s.Now()
}

// relayStream relays an SSE response: headers flushed at once, then every
// event written and flushed as it completes. After the first byte nothing
// is retried: a failure ends the stream with one SSE error event.
func (s *Server) relayStream(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, ex *exchange, resp *http.Response, body *idleReader, stripUsage bool) {
	ex.wroteHeader = true
	var dst io.Writer = w
	flush := rc.Flush
	if ka := ex.keepalive; ka != nil {
		// Comments fill long gaps mid-stream too: the relay writes
		// through the keepalive from here.
		ka.Commit(func() { s.writeStreamHeader(w, ex, resp) })
		if ex.status == 0 { // a keepalive comment sent the headers
			ex.status = http.StatusOK
		}
		dst, flush = ka, ka.Flush
	} else {
		s.writeStreamHeader(w, ex, resp)
	}

	// From the first event on only data resets the idle timer: a backend
	// that sends nothing but comments is cut after StreamIdleTimeout. The
	// relay stores the idle clock itself (Activity), so it reads the body
	// as it is, with no reader in between; it starts with the first
	// event, read by the attempt into its buffer (ex.first).
	meter := ex.op.Meter()
	res, err := s.relay.Relay(dst, flush, body.r, sse.Options{StripUsageChunk: stripUsage, MaxTokenEvents: ex.budget.MaxTokenEvents(),
		Activity: body.last, Meter: meter, Pending: &ex.first})
	if res.AfterDone {
		ex.detail = "dropped what the backend sent after the terminal event"
		s.Log.Warn("backend sent events after the stream's terminal event: dropped", "request_id", ex.id, "endpoint", ex.endpoint)
	}
	ex.keepalive.Stop()
	ex.bytes += res.Bytes
	ex.events, ex.tokenEvents = res.Events, res.TokenEvents
	ex.outputFloor = meter.OutputFloor(res.FloorEvents, ex.budget.ChoiceCount())
	ex.setUsage(res.Usage, res.HasUsage)
	ex.usageFinal = res.Final
	if !res.FirstWrite.IsZero() {
		ex.clientFirstEvent = res.FirstWrite
	}
	var ae *apiError
	switch {
	case (err != nil || !res.Done) && !errors.Is(err, sse.ErrClient) && errors.Is(context.Cause(ctx), ErrShutdown):
		ae = shuttingDown()
	case errors.Is(err, sse.ErrClient):
		ex.outcome = "client_gone"
		return
	case err == nil && res.Done:
		// The terminal event was written and flushed: the stream is
		// finished, whatever the client did next. Codex hangs up right
		// after response.completed, while the relay still reads the
		// backend's end; checking the cancelled request first logged
		// those streams client_gone (issue 37).
		return
	case errors.Is(ctx.Err(), context.Canceled):
		ex.outcome = "client_gone"
		return
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		ae = streamDeadline()
	case errors.Is(err, sse.ErrTokenLimit):
		// The backend ignored the output cap written into the request:
		// the stream ends at its reservation, and is charged what was sent.
		ex.budget.Cut = true
		ae = budgetExceeded()
	case res.EndedWithError:
		// The backend's own error event already reached the client: one
		// error event is the contract, not two.
		ex.outcome = "upstream_stream_error"
		return
	case errors.Is(context.Cause(ctxOf(resp)), errStreamIdle):
		ae = streamIdle(s.StreamIdleTimeout)
		s.streamHealth(ex, false)
	case err != nil:
		ae = streamFailed(cause(err))
		s.streamHealth(ex, false)
	case !res.Done:
		ae = streamEndedEarly()
		s.streamHealth(ex, false)
	default:
		s.streamHealth(ex, true)
		return
	}
	ex.outcome = ae.Code
	ev := appendStreamError(nil, ex, ae, res.Events)
	if n, werr := w.Write(ev); werr == nil {
		ex.bytes += int64(n)
		_ = rc.Flush()
	}
}

// streamHealth tells the router how the served endpoint's stream ended:
// a stall, a reset or an end without the terminal event count toward
// ejecting it (the client leaving, a deadline, the output cap or the
// backend's own error event do not: a caller can provoke those).
func (s *Server) streamHealth(ex *exchange, done bool) {
	switch {
	case ex.served == nil:
	case done:
		s.Router.StreamDone(ex.served)
	default:
		s.Router.StreamFailed(ex.served)
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

func ctxOf(resp *http.Response) context.Context { return resp.Request.Context() }

// relayJSON relays a non-streaming answer byte for byte. Its head was
// read and checked by the attempt (awaitJSON); the rest is copied through
// the same scanner, so usage and a Responses id are read from their
// documented places in an answer of any size. A stored response's owner
// is recorded before the client gets a byte of it. It fails only before
// the client got a byte; a body cut after that aborts the response.
func (s *Server) relayJSON(w http.ResponseWriter, ex *exchange, resp *http.Response, body io.Reader) error {
	ans := ex.answer
	ex.answer = nil
	if ans == nil { // the stored-response routes read no head in an attempt
		ans = getAnswer()
		if err := ans.readHead(body); err != nil {
			answerPool.Put(ans)
			if errors.Is(context.Cause(ctxOf(resp)), errStreamIdle) {
				return bodyIdle(s.StreamIdleTimeout)
			}
			return bodyCut(err)
		}
	}
	defer answerPool.Put(ans)
	// A binary answer (the row's answer kind) is bytes: relayed as they
	// come, nothing in them read. An error answer is JSON whatever the
	// row.
	scan := ex.op.Answer() == request.AnswerJSON || resp.StatusCode/100 != 2
	created := ex.creates && resp.StatusCode/100 == 2
	if created {
		s.rememberAnswer(ex, &ans.scan, w.Header())
	}
	upstream.CopyResponseHeaders(w.Header(), resp.Header)
	ex.status = resp.StatusCode
	switch {
	case ans.whole:
		w.Header().Set("Content-Length", strconv.Itoa(ans.n))
	case resp.ContentLength > 0:
		// The client can then tell a body cut short from a whole one.
		w.Header().Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	ex.wroteHeader = true
	m, _ := w.Write(ans.buf[:ans.n])
	ex.bytes += int64(m)
	ex.clientFirst = s.Now()
	if !ans.whole {
		src := body
		if scan {
			src = io.TeeReader(body, &ans.scan)
		}
		c, err := io.CopyBuffer(struct{ io.Writer }{w}, src, ans.buf[:])
		ex.bytes += c
		switch {
		case err != nil:
			ex.outcome = "upstream_body_error"
		case scan && resp.StatusCode/100 == 2 && !ans.scan.Complete():
			ex.outcome = "upstream_bad_response"
			err = errors.New("not one whole JSON object")
		}
		if err != nil {
			ex.detail = fmt.Sprintf("endpoint %s: answer cut after %d bytes: %v", ex.endpoint, ex.bytes, err)
			s.readUsage(ex, &ans.scan)
			panic(http.ErrAbortHandler) // a truncated JSON body must not look complete
		}
		if created {
			s.rememberAnswer(ex, &ans.scan, nil) // an id past the head
		}
	}
	if scan {
		s.readUsage(ex, &ans.scan)
	}
	if resp.StatusCode/100 == 2 {
		ex.answerBytes = ex.bytes
	}
	return nil
}

// readUsage takes the answer's top-level usage for the record.
func (s *Server) readUsage(ex *exchange, scan *sse.AnswerScanner) {
	if u, ok := scan.Usage(); ok {
		ex.setUsage(u, true)
		ex.usageFinal = true // a JSON answer's top-level usage is its bill
	}
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if n > 0 {
		i.last.Store(time.Now().UnixNano())
	}
	return n, err
}
