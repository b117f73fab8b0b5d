package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultBufferSize is the read buffer a stream starts with: several
	// ordinary chunks fit, and a stream holds nothing larger until an event
	// needs it.
	DefaultBufferSize = 4 << 10
	// DefaultMaxEventBytes bounds one event when Options.MaxEventBytes is zero.
	DefaultMaxEventBytes = 4 << 20

	// maxEmptyReads mirrors bufio's guard against a Reader that keeps
	// returning 0, nil.
	maxEmptyReads = 100
)

var (
	// ErrUpstream wraps every error that came from reading the upstream
	// stream: read errors, a stream that ends inside an event
	// (io.ErrUnexpectedEOF), and an event over the size limit.
	ErrUpstream = errors.New("sse: upstream stream failed")
	// ErrClient wraps every error from writing or flushing to the client,
	// which usually means the client has gone.
	ErrClient = errors.New("sse: client write failed")
	// ErrEventTooLarge is an upstream event longer than
	// Options.MaxEventBytes; it always comes wrapped together with
	// ErrUpstream.
	ErrEventTooLarge = errors.New("sse: event too large")
	// ErrTokenLimit: the stream reached Options.MaxTokenEvents and was
	// ended before the event that would have passed it.
	ErrTokenLimit = errors.New("sse: token event limit reached")
)

// Options says how one stream is relayed. The zero value relays every byte.
type Options struct {
	// StripUsageChunk removes the usage-only chunk (a data: JSON event whose
	// "choices" is an empty array and whose "usage" is a non-null object)
	// from what the client receives, while still counting its usage. The
	// gateway sets it when it injected stream_options.include_usage itself,
	// so a client that did not ask for the chunk does not get it.
	StripUsageChunk bool
	// MaxEventBytes bounds one event, its closing empty line included;
	// default DefaultMaxEventBytes (4 MiB) when zero or negative. A larger
	// event is an upstream error (ErrEventTooLarge), so a broken upstream
	// cannot grow the buffer without bound.
	MaxEventBytes int
	// MaxTokenEvents, when positive, ends the stream before the token
	// event (see Result.TokenEvents) that would make their count exceed
	// it: the events before it are written and flushed, and Relay returns
	// ErrTokenLimit. Token budgets set it from the output cap they wrote
	// into the request, to cut a backend that ignores the cap.
	MaxTokenEvents int64
	// Activity, when set, is stored the time (Unix nanoseconds) of each
	// read that completed an event carrying data: comments alone do not
	// count, so a backend that sends only comments cannot hold a stream
	// open past an idle bound that watches Activity.
	Activity *atomic.Int64
	// Meter says which event's usage is the stream's bill and which
	// events floor its output (Result.Final, Result.FloorEvents); the
	// zero Meter is a data-only stream's (chat, completions).
	Meter Meter
	// Pending, when set, holds what was read from src before Relay (a
	// stream's first event, Pending.ReadFirst): it is relayed first,
	// from the buffer it is in, which Relay then owns and returns to
	// the pool. nil: Relay takes a buffer of its own.
	Pending *Pending
}

// WriteFlusher is a client writer that writes and flushes in one call
// (keepalive.Writer: one lock per read, not one for the write and one for
// the flush). Relay uses it for its usual one write and flush per read
// when dst has it; flushed says the flush was made, err is the write's,
// or the flush's when flushed.
type WriteFlusher interface {
	WriteFlush(p []byte) (n int, flushed bool, err error)
}

// Result describes what one Relay did. The fields a relay updates per
// event come first, so that they share the first cache lines of the
// relay's state with its own (relay): at hundreds of streams per core,
// every line of a stream's state an event touches is a likely cache miss.
type Result struct {
	Events int64 // events written to the client (stripped ones excluded)
	// TokenEvents counts the events written that may carry generated
	// tokens, each at least one: data events holding a JSON object other
	// than a usage-only chunk or an error, and in named-event streams the
	// Meter's token events (the Responses API's ".delta" events, the
	// Messages API's content_block_delta).
	TokenEvents int64
	Bytes       int64 // bytes written to the client
	// FloorEvents counts the events written that each carry at least
	// one generated token (Meter.Floor; in a data-only stream the same
	// events as TokenEvents): Meter.OutputFloor of them bounds the
	// output a true usage reports.
	FloorEvents int64
	FirstWrite  time.Time // when the first byte was written to dst; zero if none
	// Done: saw data: [DONE] or one of the Meter's End events (the
	// Responses API's response.completed, .incomplete, .failed, the
	// Messages API's message_stop). Nothing after it is relayed: the
	// relay stops there.
	Done bool
	// EndedWithError: the last event relayed was an error event (OpenAI's
	// data: {"error"…, or the Meter's Error event), so the client has
	// already been told.
	EndedWithError bool
	// AfterDone: the backend sent bytes after the terminal event; they
	// were dropped.
	AfterDone bool
	HasUsage  bool // a usage object was seen
	// Final: the usage was read from the stream's bill (Meter), so it is
	// the backend's count of the whole answer. Without it a usage is at
	// most the input counts or a running total: a client that leaves
	// before the bill must not be charged those.
	Final bool
	Usage Usage // the last usage object seen (usage is cumulative)
}

// Relayer relays SSE streams with pooled read buffers. It is safe for
// concurrent use, and its zero value is ready to use; it must not be copied
// after first use.
type Relayer struct {
	// BufferSize is the size of the read buffer a stream starts with;
	// default DefaultBufferSize when zero. A buffer grows (by doubling, up to
	// MaxEventBytes+1) only while one event does not fit, and a grown buffer
	// is dropped rather than pooled, so one huge event does not pin memory.
	// Set it before the first Relay.
	BufferSize int

	pool sync.Pool // of *[]byte, each of len BufferSize
}

func (r *Relayer) getBuf() *[]byte {
	if p, _ := r.pool.Get().(*[]byte); p != nil {
		return p
	}
	size := r.BufferSize
	if size <= 0 {
		size = DefaultBufferSize
	}
	b := make([]byte, size)
	return &b
}

// Relay copies the SSE stream src to dst until src ends, event by event.
//
// Each src.Read goes into one buffer; every complete event in it is written
// with a single dst.Write of the contiguous range (two when a stripped usage
// chunk sits between events), followed by one flush, so events reach the
// client as soon as they are complete and never one write per event when
// several arrived together; a dst that is a WriteFlusher gets the one range
// and its flush in one call. Bytes of an incomplete event wait for the next
// read. flush may be nil.
//
// Relay returns a nil error when src ends cleanly at an event boundary,
// whether or not data: [DONE] was seen (Result.Done tells). An error
// wrapping ErrUpstream means src failed: a read error, a stream that ends
// inside an event (whose partial bytes are not written), or an event over
// MaxEventBytes (also ErrEventTooLarge). An error wrapping ErrClient means a
// write or flush failed; Relay stops at once. Result is valid in every case.
func (r *Relayer) Relay(dst io.Writer, flush func() error, src io.Reader, opt Options) (Result, error) {
	rl := relay{dst: dst, flush: flush, strip: opt.StripUsageChunk, max: opt.MaxEventBytes, maxTok: opt.MaxTokenEvents, activity: opt.Activity, meter: opt.Meter, named: opt.Meter.Named()}
	rl.wf, _ = dst.(WriteFlusher)
	if rl.max <= 0 {
		rl.max = DefaultMaxEventBytes
	}
	p := opt.Pending
	if p == nil || p.pooled == nil {
		p = &Pending{r: r, pooled: r.getBuf()}
		p.buf = *p.pooled
	}
	defer p.Release()
	err := rl.run(p.buf, p.n, src)
	return rl.res, err
}

// Pending is a stream's first bytes, read before Relay (the server awaits
// a stream's first event before it commits to the endpoint) into a buffer
// of the Relayer's pool, so that the relay goes on in the same buffer
// instead of the stream holding a second one for its whole life. Its zero
// value holds nothing; Relayer.Pending fills one in.
type Pending struct {
	r      *Relayer
	pooled *[]byte // the pool's buffer, put back by Release
	buf    []byte  // *pooled, or a larger one for a first event that did not fit
	n      int     // buf[:n] was read
}

// Pending takes a buffer of the pool into p, for ReadFirst.
func (r *Relayer) Pending(p *Pending) {
	*p = Pending{r: r, pooled: r.getBuf()}
	p.buf = *p.pooled
}

var (
	// ErrNoFirstEvent: the stream ended before its first event.
	ErrNoFirstEvent = errors.New("the backend ended the stream before its first event")
	// ErrFirstEventTooLarge: the first event did not end within max bytes.
	ErrFirstEventTooLarge = errors.New("the backend's first event is too large")
)

// ReadFirst reads src until p holds a whole event that is not only
// comments (a backend's own keepalives are not a first token), growing
// the buffer while it does not fit, up to max bytes. Bytes says what it
// read, the event and anything after it.
func (p *Pending) ReadFirst(src io.Reader, max int) error {
	scanned := 0
	for {
		if p.n == len(p.buf) {
			if p.n >= max {
				return ErrFirstEventTooLarge
			}
			nb := make([]byte, min(2*len(p.buf), max))
			copy(nb, p.buf[:p.n])
			p.buf = nb
		}
		m, err := src.Read(p.buf[p.n:])
		p.n += m
		for {
			end, ok := EventEnd(p.buf[scanned:p.n], false)
			if !ok {
				break
			}
			ev := p.buf[scanned : scanned+end]
			scanned += end
			if !commentOnly(ev) {
				return nil
			}
		}
		if err == io.EOF {
			return ErrNoFirstEvent
		}
		if err != nil {
			return err
		}
	}
}

// Bytes is what ReadFirst read; valid until Relay or Release.
func (p *Pending) Bytes() []byte { return p.buf[:p.n] }

// Release returns p's buffer to the pool (Relay does, for a stream it
// relayed); a Pending released, or never filled in, holds nothing.
func (p *Pending) Release() {
	if p.pooled != nil {
		p.r.pool.Put(p.pooled)
	}
	*p = Pending{}
}

// commentOnly reports whether an event holds nothing but comment lines and
// blank lines.
func commentOnly(ev []byte) bool {
	start := 0
	for i := 0; i <= len(ev); i++ {
		if i == len(ev) || ev[i] == '\n' || ev[i] == '\r' {
			if line := ev[start:i]; len(line) > 0 && line[0] != ':' {
				return false
			}
			start = i + 1
		}
	}
	return true
}

// relay is the state of one Relay call; it lives on Relay's stack. What
// an event touches comes first (then Result's own per-event fields), so
// that an event reads and writes three cache lines of it, not six: the
// Meter and the usage at the end are read only by the few events that
// carry usage or a name.
type relay struct {
	wf    WriteFlusher // dst, when it writes and flushes in one call
	dst   io.Writer
	flush func() error
	// activity is Options.Activity; data notes that the current read
	// completed an event that is not only comments.
	activity *atomic.Int64
	max      int
	// maxTok is Options.MaxTokenEvents; cut is set by inspect on the event
	// that would pass it.
	maxTok int64
	// Where scanning resumes in the pending incomplete event, relative to
	// its start (see scanEvent).
	lineStart, pos int
	strip          bool
	cut            bool
	data           bool
	named          bool // meter.Named()
	res            Result
	meter          Meter
}

// run relays src, starting with the end bytes already in buf (read
// before Relay: Options.Pending), handled as the first read's.
func (rl *relay) run(buf []byte, end int, src io.Reader) error {
	n, rerr := end, error(nil)
	end = 0
	if n == 0 {
		var err error
		if buf, n, rerr, err = rl.read(buf, end, src); err != nil {
			return err
		}
	}
	for {
		end += n
		atEOF := rerr == io.EOF
		consumed, err := rl.process(buf[:end], atEOF)
		if err != nil {
			return err
		}
		if rl.data && rl.activity != nil {
			rl.activity.Store(time.Now().UnixNano())
		}
		rl.data = false
		if rl.res.Done {
			// The terminal event ends what the client gets: anything after
			// it is dropped (noted in AfterDone). The backend's body is read
			// to its end (a little at most: its chunked terminator), so its
			// connection is reused; a backend that keeps sending is left
			// after maxAfterDone bytes.
			rl.res.AfterDone = consumed < end
			rl.discardRest(buf, src, rerr)
			return nil
		}
		// Keep the pending bytes at the start of buf; they are at most one
		// partial event, usually a few hundred bytes. Nothing consumed means
		// nothing moves: a large event read in small pieces is not copied
		// once per read.
		if consumed > 0 {
			end = copy(buf, buf[consumed:end])
		}
		switch {
		case end > rl.max:
			return rl.tooLarge()
		case atEOF && end > 0:
			return fmt.Errorf("%w: stream ended inside an event (%d bytes dropped): %w", ErrUpstream, end, io.ErrUnexpectedEOF)
		case atEOF:
			return nil
		case rerr != nil:
			return fmt.Errorf("%w: read: %w", ErrUpstream, rerr)
		}
		if buf, n, rerr, err = rl.read(buf, end, src); err != nil {
			return err
		}
	}
}

// read reads into buf[end:] (growing buf when one incomplete event fills
// it) until a read returns bytes or an error: n and rerr are that read's.
// err is a broken Reader's: a count out of range, or no progress.
func (rl *relay) read(buf []byte, end int, src io.Reader) (_ []byte, n int, rerr, err error) {
	if end == len(buf) {
		// One incomplete event fills the buffer: grow. The check after
		// process keeps end <= max, so the buffer never exceeds max+1,
		// the one byte more that tells a trailing CR from a CRLF.
		nb := make([]byte, min(2*len(buf), rl.max+1))
		copy(nb, buf[:end])
		buf = nb
	}
	for empty := 0; ; {
		n, rerr = src.Read(buf[end:])
		switch {
		case n < 0 || n > len(buf)-end:
			return buf, 0, nil, fmt.Errorf("%w: invalid Read count %d", ErrUpstream, n)
		case n > 0 || rerr != nil:
			return buf, n, rerr, nil
		}
		if empty++; empty >= maxEmptyReads {
			return buf, 0, nil, fmt.Errorf("%w: %w", ErrUpstream, io.ErrNoProgress)
		}
	}
}

// maxAfterDone bounds what is read, and dropped, after a terminal event.
const maxAfterDone = 64 << 10

func (rl *relay) discardRest(buf []byte, src io.Reader, err error) {
	for n, total := 0, 0; err == nil && total < maxAfterDone; total += n {
		n, err = src.Read(buf)
		if n > 0 {
			rl.res.AfterDone = true
		}
	}
}

func (rl *relay) tooLarge() error {
	return fmt.Errorf("%w: %w: over %d bytes", ErrUpstream, ErrEventTooLarge, rl.max)
}

// process writes every complete event in buf and flushes once if anything
// was written. It returns how many bytes of buf it consumed.
func (rl *relay) process(buf []byte, atEOF bool) (int, error) {
	var (
		start     = 0 // start of the event being scanned
		wstart    = 0 // start of the range not yet written
		events    = int64(0)
		wrote     = false
		lineStart = rl.lineStart
		pos       = rl.pos
	)
	for start < len(buf) {
		end, ls, p, ok := scanEvent(buf, lineStart, pos, atEOF)
		if !ok {
			rl.lineStart, rl.pos = ls-start, p-start
			break
		}
		if end-start > rl.max {
			if err := rl.write(buf[wstart:start], events, &wrote); err != nil {
				return 0, err
			}
			if err := rl.flushIf(wrote); err != nil {
				return 0, err
			}
			return 0, rl.tooLarge()
		}
		strip := rl.inspect(buf[start:end])
		if rl.cut { // the event is not written; the ones before it are
			if err := rl.write(buf[wstart:start], events, &wrote); err != nil {
				return 0, err
			}
			if err := rl.flushIf(wrote); err != nil {
				return 0, err
			}
			return 0, ErrTokenLimit
		}
		if strip {
			if err := rl.write(buf[wstart:start], events, &wrote); err != nil {
				return 0, err
			}
			wstart, events = end, 0
		} else {
			events++
		}
		start, lineStart, pos = end, end, end
		if rl.res.Done {
			break // nothing after the terminal event is written
		}
	}
	if start == len(buf) || rl.res.Done {
		rl.lineStart, rl.pos = 0, 0
	}
	return start, rl.writeFlush(buf[wstart:start], events, wrote)
}

// writeFlush writes p (holding events) and flushes whatever this read
// wrote: one WriteFlush when dst has it, the usual case of one range per
// read.
func (rl *relay) writeFlush(p []byte, events int64, wrote bool) error {
	if rl.wf == nil || len(p) == 0 {
		if err := rl.write(p, events, &wrote); err != nil {
			return err
		}
		return rl.flushIf(wrote)
	}
	n, flushed, err := rl.wf.WriteFlush(p)
	rl.wrote(n)
	switch {
	case err != nil && !flushed:
		return fmt.Errorf("%w: write: %w", ErrClient, err)
	case err != nil:
		return fmt.Errorf("%w: flush: %w", ErrClient, err)
	case n < len(p):
		return fmt.Errorf("%w: write: %w", ErrClient, io.ErrShortWrite)
	}
	rl.res.Events += events
	return nil
}

func (rl *relay) write(p []byte, events int64, wrote *bool) error {
	if len(p) == 0 {
		return nil
	}
	n, err := rl.dst.Write(p)
	if n > 0 {
		rl.wrote(n)
		*wrote = true
	}
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("%w: write: %w", ErrClient, err)
	}
	rl.res.Events += events
	return nil
}

// wrote accounts for n bytes written to the client.
func (rl *relay) wrote(n int) {
	if n <= 0 {
		return
	}
	if rl.res.FirstWrite.IsZero() {
		rl.res.FirstWrite = time.Now()
	}
	rl.res.Bytes += int64(n)
}

func (rl *relay) flushIf(wrote bool) error {
	if !wrote || rl.flush == nil {
		return nil
	}
	if err := rl.flush(); err != nil {
		return fmt.Errorf("%w: flush: %w", ErrClient, err)
	}
	return nil
}

var (
	lineData        = []byte("\ndata:")
	lineEvent       = []byte("\nevent:")
	prefixEvent     = []byte("event: ")
	prefixJSONData  = []byte("data: {")
	prefixErrorData = []byte(`data: {"error"`)
	markerDone      = []byte("[DONE]")
)

// inspect records the event's usage and [DONE], and whether it carries
// data (not only comments: Options.Activity), and reports whether the
// event is to be stripped.
func (rl *relay) inspect(ev []byte) (strip bool) {
	if ev[0] != ':' {
		rl.data = true
	} else if !rl.data && (bytes.Contains(ev, lineData) || bytes.Contains(ev, lineEvent)) {
		rl.data = true // a comment first, then a field
	}
	rl.res.EndedWithError = bytes.HasPrefix(ev, prefixErrorData)
	if bytes.HasPrefix(ev, prefixEvent) { // a named event: the Responses or Messages API
		name, delta := rl.namedEvent(ev)
		if delta {
			rl.countToken()
		}
		usage, where, final, floor := rl.meter.named(name, ev)
		if floor && !rl.cut {
			rl.res.FloorEvents++
		}
		if !usage {
			return false // only a few events carry usage: no scan for the rest
		}
		if u, _, ok := EventUsage(ev, where); ok {
			rl.noteUsage(u, where, final)
		}
		return false
	}
	isJSON := bytes.HasPrefix(ev, prefixJSONData)
	if !isJSON && bytes.Contains(ev, markerDone) && isDone(ev) {
		rl.res.Done = true
		// A usage seen before [DONE] is the whole answer's (a backend
		// that reports it on its finish chunk).
		rl.res.Final = rl.res.Final || (rl.res.HasUsage && !rl.named)
		return false
	}
	u, usageOnly, ok := EventUsage(ev, TopLevel)
	if isJSON && !usageOnly && !rl.res.EndedWithError {
		// A chunk with choices, or with running usage beside them (vLLM's
		// continuous_usage_stats).
		rl.countToken()
		if !rl.cut && !rl.named {
			rl.res.FloorEvents++
		}
	}
	if !ok {
		return false
	}
	rl.res.Usage, rl.res.HasUsage = u, true
	// Only the usage chunk is the bill: a running usage (vLLM's
	// continuous_usage_stats) is not, until [DONE] ends the stream.
	rl.res.Final = usageOnly && !rl.named
	return usageOnly && rl.strip
}

// noteUsage records a named event's usage; final: it is the bill. A
// Messages stream's message_delta (TopLevel) carries the cumulative
// output, and input counts only when the backend revised them: its input
// counts replace message_start's only when present.
func (rl *relay) noteUsage(u Usage, where Where, final bool) {
	rl.res.Final = rl.res.Final || final
	if where == TopLevel && rl.res.HasUsage {
		p := &rl.res.Usage
		p.CompletionTokens, p.TotalTokens = u.CompletionTokens, u.TotalTokens
		if u.PromptTokens > 0 {
			p.PromptTokens, p.CachedTokens = u.PromptTokens, u.CachedTokens
			p.CacheWriteTokens, p.CacheWrite1hTokens = u.CacheWriteTokens, u.CacheWrite1hTokens
		}
		if u.TierReported {
			p.Tier, p.TierReported = u.Tier, true
		}
		if u.ServerTools.Reported { // cumulative, as the output is
			p.ServerTools = u.ServerTools
		}
		return
	}
	rl.res.Usage, rl.res.HasUsage = u, true
}

// countToken counts a token event, or marks the cut when it would pass
// MaxTokenEvents (the event is then not written, nor counted).
func (rl *relay) countToken() {
	if rl.maxTok > 0 && rl.res.TokenEvents >= rl.maxTok {
		rl.cut = true
		return
	}
	rl.res.TokenEvents++
}

// namedEvent reads a named event's name and whether it is a token event
// for the cut (MaxTokenEvents); the Meter's event table says which events
// end the stream, which is the backend's error (the backend telling the
// client itself) and which carry tokens.
func (rl *relay) namedEvent(ev []byte) (name []byte, token bool) {
	name = ev[len(prefixEvent):]
	if i := bytes.IndexAny(name, "\r\n"); i >= 0 {
		name = name[:i]
	}
	name = bytes.TrimSpace(name)
	end, errorEvent, token := rl.meter.event(name)
	rl.res.Done = rl.res.Done || end
	rl.res.EndedWithError = rl.res.EndedWithError || errorEvent
	return name, token
}

// AppendErrorEvent appends an SSE event carrying errorJSON as its data, the
// way the gateway reports an error after the first byte of a stream:
// "data: " + errorJSON + "\n\n". A raw CR or LF in errorJSON (only legal as
// JSON whitespace) would end the data line early, so each is written as a
// space.
func AppendErrorEvent(dst, errorJSON []byte) []byte {
	dst = append(dst, "data: "...)
	for len(errorJSON) > 0 {
		i := bytes.IndexAny(errorJSON, "\r\n")
		if i < 0 {
			dst = append(dst, errorJSON...)
			break
		}
		dst = append(dst, errorJSON[:i]...)
		dst = append(dst, ' ')
		errorJSON = errorJSON[i+1:]
	}
	return append(dst, '\n', '\n')
}
