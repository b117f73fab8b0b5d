package stub

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// EmitField is the field every streamed chunk carries besides OpenAI's:
// the stub's wall clock in Unix nanoseconds when it wrote the chunk, so a
// benchmark on the same host can compute the latency a relay adds per
// event. OpenAI SDK clients ignore unknown fields.
const EmitField = "stub_emit_ns"

// The per-event parts of the stream templates (OpenAI's chunk layout).
const (
	chatRole    = `"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`
	chatToken   = `"delta":{"content":"` + tokenText + `"},"logprobs":null,"finish_reason":null}]`
	chatFinish  = `"delta":{},"logprobs":null,"finish_reason":"` // + reason + `"}]`
	textToken   = `"text":"` + tokenText + `","index":0,"logprobs":null,"finish_reason":null}]`
	textFinish  = `"text":"","index":0,"logprobs":null,"finish_reason":"` // + reason + `"}]`
	usageNull   = `,"usage":null`
	emitKey     = `,"` + EmitField + `":`
	eventEnd    = "}\n\n"
	doneEvent   = "data: [DONE]\n\n"
	streamError = `data: {"error":{"message":"stub: injected mid-stream error","type":"server_error","param":null,"code":"stub_error"}}` + "\n\n"
)

type event uint8

const (
	evRole event = iota
	evToken
	evFinish
	evUsage
	evDone
)

// templates holds one stream's events pre-rendered up to the emit time:
// writing an event is one append, one AppendInt and the closing brace.
type templates struct {
	buf                        []byte // all templates, back to back
	role, token, finish, usage []byte // slices of buf
	chat, includeUsage         bool
	tokens                     int
}

// render fills t for a: the id, model and usage are fixed per request.
func (t *templates) render(a answer) {
	b := t.buf[:0]
	head := func(b []byte) []byte {
		b = append(b, `data: {"id":"`...)
		b = append(b, a.id...)
		if a.chat {
			b = append(b, `","object":"chat.completion.chunk","created":`...)
		} else {
			b = append(b, `","object":"text_completion","created":`...)
		}
		b = strconv.AppendInt(b, a.created, 10)
		b = append(b, `,"model":`...)
		return appendJSONString(b, a.model)
	}
	tail := func(b []byte) []byte {
		if a.includeUsage {
			b = append(b, usageNull...)
		}
		return append(b, emitKey...)
	}
	var offs [5]int
	if a.chat {
		b = tail(append(append(head(b), `,"choices":[{"index":0,`...), chatRole...))
		offs[0] = len(b)
		b = tail(append(append(head(b), `,"choices":[{"index":0,`...), chatToken...))
		offs[1] = len(b)
		b = append(append(head(b), `,"choices":[{"index":0,`...), chatFinish...)
	} else {
		offs[0] = len(b)
		b = tail(append(append(head(b), `,"choices":[{`...), textToken...))
		offs[1] = len(b)
		b = append(append(head(b), `,"choices":[{`...), textFinish...)
	}
	b = tail(append(append(b, a.finish...), `"}]`...))
	offs[2] = len(b)
	b = append(head(b), `,"choices":[],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(a.promptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(a.tokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(a.promptTokens+a.tokens), 10)
	b = append(b, "}"+emitKey...)
	offs[3] = len(b)
	t.buf = b
	t.role, t.token, t.finish, t.usage = b[:offs[0]], b[offs[0]:offs[1]], b[offs[1]:offs[2]], b[offs[2]:offs[3]]
	t.chat, t.includeUsage, t.tokens = a.chat, a.includeUsage, a.tokens
}

// count is the number of events in the stream, [DONE] included.
func (t *templates) count() int {
	n := t.tokens + 2 // finish, [DONE]
	if t.chat {
		n++
	}
	if t.includeUsage {
		n++
	}
	return n
}

// at returns the kind of event i and, for a token, its index.
func (t *templates) at(i int) (event, int) {
	if t.chat {
		if i == 0 {
			return evRole, 0
		}
		i--
	}
	switch {
	case i < t.tokens:
		return evToken, i
	case i == t.tokens:
		return evFinish, 0
	case i == t.tokens+1 && t.includeUsage:
		return evUsage, 0
	}
	return evDone, 0
}

// appendEvent appends event ev, stamped with now.
func (t *templates) appendEvent(dst []byte, ev event, now int64) []byte {
	var tmpl []byte
	switch ev {
	case evRole:
		tmpl = t.role
	case evToken:
		tmpl = t.token
	case evFinish:
		tmpl = t.finish
	case evUsage:
		tmpl = t.usage
	default:
		return append(dst, doneEvent...)
	}
	dst = append(dst, tmpl...)
	dst = strconv.AppendInt(dst, now, 10)
	return append(dst, eventEnd...)
}

// streamBufs are one stream's buffers, pooled across streams.
type streamBufs struct {
	t   templates
	out []byte
}

// How a stream ended, for Stats.
type outcome uint8

const (
	endCanceled outcome = iota // the client went away, or Close
	endFault                   // an injected fault ended it
	endDone                    // [DONE] written
)

// stream writes a as SSE: headers at once, the role chunk and the first
// token TTFT after arrived, a token every Interval after that, then the
// finish chunk, the usage chunk and [DONE] right after the last token.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, a answer, f Fault, sh shape, arrived time.Time) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.streams.Add(1)
	s.active.Add(1)
	end := endCanceled
	defer func() {
		s.active.Add(-1)
		switch end {
		case endCanceled:
			s.canceled.Add(1)
		case endDone:
			s.completed.Add(1)
		}
	}()
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}

	bufs, _ := s.bufs.Get().(*streamBufs)
	if bufs == nil {
		bufs = &streamBufs{}
	}
	defer s.bufs.Put(bufs)
	t := &bufs.t
	t.render(a)

	ctx := r.Context()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	dropAt, errorAt, stallAt := faultIndex(f.DropAfter), faultIndex(f.ErrorAfter), faultIndex(f.StallAfter)
	firstToken := arrived.Add(sh.ttft)
	n := t.count()
	for i := range n {
		switch i {
		case dropAt:
			end = endFault
			panic(http.ErrAbortHandler)
		case errorAt:
			end = endFault
			if _, err := w.Write([]byte(streamError)); err == nil {
				_ = rc.Flush()
			}
			return
		case stallAt:
			s.hold(r)
			return
		}
		ev, k := t.at(i)
		var until time.Time
		switch ev {
		case evRole:
			until = firstToken
		case evToken:
			until = firstToken.Add(time.Duration(k) * sh.interval)
		}
		if !s.wait(ctx, timer, until) {
			return
		}
		bufs.out = t.appendEvent(bufs.out[:0], ev, time.Now().UnixNano())
		if _, err := w.Write(bufs.out); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		s.events.Add(1)
	}
	end = endDone
}

// wait blocks until the time until (none when zero), or in step mode until
// a receive from Options.Step. It reports false when the client went
// away, and aborts the response on Close.
func (s *Server) wait(ctx context.Context, timer *time.Timer, until time.Time) bool {
	if s.opts.Step != nil {
		select {
		case <-s.opts.Step:
			return true
		case <-ctx.Done():
			return false
		case <-s.done:
			panic(http.ErrAbortHandler)
		}
	}
	if until.IsZero() {
		return true
	}
	d := time.Until(until)
	if d <= 0 {
		return true
	}
	// Since Go 1.23 Reset needs no Stop-and-drain: the channel is unbuffered.
	timer.Reset(d)
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		panic(http.ErrAbortHandler)
	}
}
