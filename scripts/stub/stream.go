package stub

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"
)

// EmitField is the field every streamed chunk carries besides OpenAI's:
// the stub's wall clock in Unix nanoseconds when it wrote the chunk, so a
// benchmark on the same host can compute the latency a relay adds per
// event. OpenAI SDK clients ignore unknown fields.
const EmitField = "stub_emit_ns"

// The per-event parts of the stream templates (OpenAI's chunk layout);
// a chat token is chatChoice, index, chatToken, word, chatTokEnd, and a
// text token textToken, word, textIndex, index, textTokEnd.
const (
	chatChoice  = `,"choices":[{"index":`
	chatRole    = `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`
	chatToken   = `,"delta":{"content":"`
	chatTokEnd  = `"},"logprobs":null,"finish_reason":null}]`
	chatFinish  = `,"delta":{},"logprobs":null,"finish_reason":"` // + reason + `"}]`
	textToken   = `,"choices":[{"text":"`
	textIndex   = `","index":`
	textTokEnd  = `,"logprobs":null,"finish_reason":null}]`
	textFinish  = `,"choices":[{"text":"","index":` // + index + textFinEnd + reason + `"}]`
	textFinEnd  = `,"logprobs":null,"finish_reason":"`
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

// hole is what goes between two fixed parts of an event template.
type hole uint8

const (
	holeNone  hole = iota
	holeIndex      // the choice index
	holeWord       // the token's text
)

// tmpl is one kind of event: three fixed parts of templates.buf, and the
// holes between them.
type tmpl struct {
	cut   [4]int // the parts are buf[cut[0]:cut[1]], buf[cut[1]:cut[2]], buf[cut[2]:cut[3]]
	holes [2]hole
}

// templates holds one stream's events pre-rendered up to the emit time,
// with holes for the choice index and the token's text: writing an event
// is a few appends, one AppendInt and the closing brace.
type templates struct {
	buf                []byte // all templates, back to back
	ev                 [evDone]tmpl
	chat, includeUsage bool
	tokens, n          int
	wd                 *wording
	seed               uint64
	first              time.Time     // when the first token is due
	interval           time.Duration // between tokens
}

// render fills t for a: the id, model and usage are fixed per request.
func (t *templates) render(a answer) {
	b := t.buf[:0]
	var cur *tmpl
	var part int
	begin := func(ev event) {
		cur, part = &t.ev[ev], 0
		*cur = tmpl{}
		cur.cut[0] = len(b)
		b = append(b, `data: {"id":"`...)
		b = append(b, a.id...)
		if a.chat {
			b = append(b, `","object":"chat.completion.chunk","created":`...)
		} else {
			b = append(b, `","object":"text_completion","created":`...)
		}
		b = strconv.AppendInt(b, a.created, 10)
		b = append(b, `,"model":`...)
		b = appendJSONString(b, a.model)
	}
	gap := func(h hole) {
		part++
		cur.cut[part], cur.holes[part-1] = len(b), h
	}
	end := func(withTail bool) {
		if withTail {
			if a.includeUsage {
				b = append(b, usageNull...)
			}
			b = append(b, emitKey...)
		}
		for part < 3 {
			part++
			cur.cut[part] = len(b)
		}
	}
	if a.chat {
		begin(evRole)
		b = append(b, chatChoice...)
		gap(holeIndex)
		b = append(b, chatRole...)
		end(true)
		begin(evToken)
		b = append(b, chatChoice...)
		gap(holeIndex)
		b = append(b, chatToken...)
		gap(holeWord)
		b = append(b, chatTokEnd...)
		end(true)
		begin(evFinish)
		b = append(b, chatChoice...)
		gap(holeIndex)
		b = append(b, chatFinish...)
	} else {
		begin(evToken)
		b = append(b, textToken...)
		gap(holeWord)
		b = append(b, textIndex...)
		gap(holeIndex)
		b = append(b, textTokEnd...)
		end(true)
		begin(evFinish)
		b = append(b, textFinish...)
		gap(holeIndex)
		b = append(b, textFinEnd...)
	}
	b = append(append(b, a.finish...), `"}]`...)
	end(true)
	begin(evUsage)
	b = append(b, `,"choices":[],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(a.promptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(a.completionTokens()), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(a.promptTokens+a.completionTokens()), 10)
	b = append(b, "}"+emitKey...)
	end(false)
	t.buf = b
	t.chat, t.includeUsage, t.tokens, t.n = a.chat, a.includeUsage, a.tokens, max(a.n, 1)
	t.wd, t.seed = a.wd, a.seed
}

// steps is the number of events per choice: [role], tokens, finish.
func (t *templates) steps() int {
	if t.chat {
		return t.tokens + 2
	}
	return t.tokens + 1
}

// count is the number of events in the stream, [DONE] included.
func (t *templates) count() int {
	n := t.steps()*t.n + 1 // [DONE]
	if t.includeUsage {
		n++
	}
	return n
}

// at returns the kind of event i, its choice and, for a token, its index
// within the choice. The choices are interleaved, as OpenAI sends them:
// every choice's role chunk, then every choice's first token, and so on.
func (t *templates) at(i int) (ev event, choice, k int) {
	steps := t.steps()
	if i >= steps*t.n {
		if i == steps*t.n && t.includeUsage {
			return evUsage, 0, 0
		}
		return evDone, 0, 0
	}
	step, choice := i/t.n, i%t.n
	if t.chat {
		if step == 0 {
			return evRole, choice, 0
		}
		step--
	}
	if step < t.tokens {
		return evToken, choice, step
	}
	return evFinish, choice, 0
}

// appendEvent appends event ev of choice c (token k for evToken), stamped
// with now.
func (t *templates) appendEvent(dst []byte, ev event, c, k int, now int64) []byte {
	if ev >= evDone {
		return append(dst, doneEvent...)
	}
	tm := &t.ev[ev]
	for p := range 3 {
		dst = append(dst, t.buf[tm.cut[p]:tm.cut[p+1]]...)
		if p == 2 {
			break
		}
		switch tm.holes[p] {
		case holeIndex:
			dst = strconv.AppendInt(dst, int64(c), 10)
		case holeWord:
			dst = append(dst, t.wd.word(t.seed, c, k)...)
		}
	}
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
	endDone                    // the last event ([DONE]) written
)

// stream writes a as SSE: headers at once, the role chunks and the first
// tokens TTFT after arrived, a token of each choice every Interval after
// that, then the finish chunks, the usage chunk and [DONE] right after the
// last token.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, a answer, f Fault, sh shape, arrived time.Time) {
	end := endCanceled
	rc, ok := s.beginStream(w)
	defer func() { s.endStream(end) }()
	if !ok {
		return
	}
	bufs, _ := s.bufs.Get().(*streamBufs)
	if bufs == nil {
		bufs = &streamBufs{}
	}
	defer s.bufs.Put(bufs)
	t := &bufs.t
	t.render(a)
	t.first, t.interval = arrived.Add(sh.ttft), sh.interval
	s.pump(w, r, rc, f, t, streamError, &bufs.out, &end)
}

// due is when event i may go out: a role chunk at the first token's time,
// token k k Intervals after it, the rest at once (zero).
func (t *templates) due(i int) time.Time {
	switch ev, _, k := t.at(i); ev {
	case evRole:
		return t.first
	case evToken:
		return t.first.Add(time.Duration(k) * t.interval)
	}
	return time.Time{}
}

// tokensAt is the completion tokens event i carries: one per token event.
func (t *templates) tokensAt(i int) int {
	if ev, _, _ := t.at(i); ev == evToken {
		return 1
	}
	return 0
}

// appendAt appends event i, stamped with now.
func (t *templates) appendAt(dst []byte, i int, now int64) []byte {
	ev, c, k := t.at(i)
	return t.appendEvent(dst, ev, c, k, now)
}

// eventSource is one stream's events, as pump writes them.
type eventSource interface {
	count() int
	// due is when event i may go out; zero means at once.
	due(i int) time.Time
	// appendAt appends event i, stamped with now (EmitField).
	appendAt(dst []byte, i int, now int64) []byte
	// tokensAt is the completion tokens event i carries (Stats).
	tokensAt(i int) int
}

// pump writes src's events in order, each when due (in step mode, on its
// step), and flushes each, with any stream fault of f in place of the
// event it is due at (errEvent is the stream's error event, for
// ErrorAfter). It sets *end to endDone after the last event, or to
// endFault when a fault ended the stream, before a drop aborts the
// handler. *buf is the event buffer, reused.
func (s *Server) pump(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, f Fault, src eventSource, errEvent string, buf *[]byte, end *outcome) {
	ctx := r.Context()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	dropAt, errorAt, stallAt := faultIndex(f.DropAfter), faultIndex(f.ErrorAfter), faultIndex(f.StallAfter)
	for i := range src.count() {
		switch i {
		case dropAt:
			*end = endFault
			panic(http.ErrAbortHandler)
		case errorAt:
			*end = endFault
			if _, err := io.WriteString(w, errEvent); err == nil {
				_ = rc.Flush()
			}
			return
		case stallAt:
			s.hold(r)
			return
		}
		if !s.wait(ctx, timer, src.due(i)) {
			return
		}
		*buf = src.appendAt((*buf)[:0], i, time.Now().UnixNano())
		if _, err := w.Write(*buf); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		s.events.Add(1)
		if n := src.tokensAt(i); n > 0 {
			s.generated.Add(int64(n))
		}
	}
	*end = endDone
}

// beginStream sends the SSE response headers and counts the stream in
// Stats; the caller defers endStream. It reports false when the client is
// already gone.
func (s *Server) beginStream(w http.ResponseWriter) (*http.ResponseController, bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	s.streams.Add(1)
	s.active.Add(1)
	rc := http.NewResponseController(w)
	return rc, rc.Flush() == nil
}

// endStream counts how a stream begun by beginStream ended.
func (s *Server) endStream(end outcome) {
	s.active.Add(-1)
	switch end {
	case endCanceled:
		s.canceled.Add(1)
	case endDone:
		s.completed.Add(1)
	}
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
