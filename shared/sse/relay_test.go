package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/llmgw/gateway/shared/price"
)

func TestRelayByteIdentity(t *testing.T) {
	t.Parallel()
	readers := map[string]func([]byte) io.Reader{
		"whole":                     func(b []byte) io.Reader { return bytes.NewReader(b) },
		"one byte":                  func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"half reads":                func(b []byte) io.Reader { return iotest.HalfReader(bytes.NewReader(b)) },
		"data with EOF":             func(b []byte) io.Reader { return iotest.DataErrReader(bytes.NewReader(b)) },
		"random chunks":             func(b []byte) io.Reader { return &chunkReader{src: b, sizes: randomSizes(uint64(len(b)), 97, 700)} },
		"empty reads between bytes": func(b []byte) io.Reader { return &chunkReader{src: b, sizes: []int{0, 1}} },
		"one event per read": func(b []byte) io.Reader {
			events, _ := refEvents(b)
			return &eventReader{events: events}
		},
	}
	var r Relayer
	for shape, stream := range shapes() {
		for rname, newReader := range readers {
			t.Run(shape+"/"+rname, func(t *testing.T) {
				t.Parallel()
				var out recorder
				res, err := r.Relay(&out, out.Flush, newReader(stream), Options{})
				if err != nil {
					t.Fatalf("Relay: %v", err)
				}
				if got := out.String(); got != string(stream) {
					t.Fatalf("client bytes differ from upstream: got %d bytes, want %d\n%s", len(got), len(stream), firstDiff(got, string(stream)))
				}
				events, _ := refEvents(stream)
				if res.Events != int64(len(events)) || res.Bytes != int64(len(stream)) {
					t.Errorf("Result Events=%d Bytes=%d; want %d, %d", res.Events, res.Bytes, len(events), len(stream))
				}
				if wantDone := bytes.Contains(stream, []byte("data: [DONE]")); res.Done != wantDone {
					t.Errorf("Done = %v; want %v", res.Done, wantDone)
				}
				if (len(stream) > 0) == res.FirstWrite.IsZero() {
					t.Errorf("FirstWrite = %v for %d bytes", res.FirstWrite, len(stream))
				}
				if len(stream) > 0 && out.flushes == 0 {
					t.Error("never flushed")
				}
			})
		}
	}
}

func firstDiff(a, b string) string {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at %d: %q vs %q", i, a[i:min(i+40, len(a))], b[i:min(i+40, len(b))])
		}
	}
	return fmt.Sprintf("one is a prefix of the other (%d vs %d)", len(a), len(b))
}

func TestRelayUsageAndStripping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       string
		strip    bool
		want     string
		usage    Usage
		hasUsage bool
		events   int64
	}{
		{
			name: "usage-only chunk stripped and counted", strip: true,
			in:   chunkContent + chunkContent + chunkUsage + chunkDone,
			want: chunkContent + chunkContent + chunkDone, usage: Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}, hasUsage: true, events: 3,
		},
		{
			name: "usage-only chunk kept without StripUsageChunk",
			in:   chunkContent + chunkUsage + chunkDone,
			want: chunkContent + chunkUsage + chunkDone, usage: Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}, hasUsage: true, events: 3,
		},
		{
			name: "azure prompt_filter_results chunk is not stripped", strip: true,
			in:   chunkAzure + chunkContent + chunkUsage + chunkDone,
			want: chunkAzure + chunkContent + chunkDone, usage: Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}, hasUsage: true, events: 3,
		},
		{
			name: "vllm continuous usage counted, never stripped", strip: true,
			in:    chunkVLLM + strings.Replace(chunkVLLM, `"completion_tokens":3`, `"completion_tokens":4`, 1) + chunkDone,
			want:  chunkVLLM + strings.Replace(chunkVLLM, `"completion_tokens":3`, `"completion_tokens":4`, 1) + chunkDone,
			usage: Usage{PromptTokens: 10, CompletionTokens: 4, TotalTokens: 13}, hasUsage: true, events: 3,
		},
		{
			name: "usage null only", strip: true,
			in: chunkContent + chunkDone, want: chunkContent + chunkDone, events: 2,
		},
		{
			name: "stripped chunk first", strip: true,
			in: chunkUsage + chunkDone, want: chunkDone, usage: Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}, hasUsage: true, events: 1,
		},
		{
			name: "stripped chunk last", strip: true,
			in: chunkContent + chunkUsage, want: chunkContent, usage: Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}, hasUsage: true, events: 1,
		},
	}
	var r Relayer
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/one byte %v", tt.name, oneByte), func(t *testing.T) {
				t.Parallel()
				var src io.Reader = strings.NewReader(tt.in)
				if oneByte {
					src = iotest.OneByteReader(src)
				}
				var out recorder
				res, err := r.Relay(&out, out.Flush, src, Options{StripUsageChunk: tt.strip})
				if err != nil {
					t.Fatalf("Relay: %v", err)
				}
				if got := out.String(); got != tt.want {
					t.Errorf("client got\n%q\nwant\n%q", got, tt.want)
				}
				if res.Usage != tt.usage || res.HasUsage != tt.hasUsage || res.Events != tt.events || res.Bytes != int64(len(tt.want)) {
					t.Errorf("Result = %+v; want usage %+v (%v), %d events, %d bytes", res, tt.usage, tt.hasUsage, tt.events, len(tt.want))
				}
			})
		}
	}
}

// TestRelayWritesPerRead checks the write pattern: everything complete in
// one read goes out in one Write (two around a stripped chunk) and one flush.
func TestRelayWritesPerRead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		reads   []string
		strip   bool
		writes  []string
		flushes int
	}{
		{name: "three events in one read", reads: []string{chunkContent + chunkContent + chunkDone}, writes: []string{chunkContent + chunkContent + chunkDone}, flushes: 1},
		{name: "stripped chunk in the middle", strip: true, reads: []string{chunkContent + chunkUsage + chunkDone}, writes: []string{chunkContent, chunkDone}, flushes: 1},
		{name: "event split over reads", reads: []string{chunkContent[:10], chunkContent[10:] + chunkDone[:3], chunkDone[3:]}, writes: []string{chunkContent, chunkDone}, flushes: 2},
		{name: "only a stripped chunk writes nothing", strip: true, reads: []string{chunkUsage}, flushes: 0},
		{name: "comment alone is flushed", reads: []string{": ping\n\n"}, writes: []string{": ping\n\n"}, flushes: 1},
	}
	var r Relayer
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reads := make([][]byte, len(tt.reads))
			for i, s := range tt.reads {
				reads[i] = []byte(s)
			}
			var out recorder
			if _, err := r.Relay(&out, out.Flush, &eventReader{events: reads}, Options{StripUsageChunk: tt.strip}); err != nil {
				t.Fatalf("Relay: %v", err)
			}
			if len(out.writes) != len(tt.writes) {
				t.Fatalf("%d writes %q; want %d %q", len(out.writes), out.writes, len(tt.writes), tt.writes)
			}
			for i := range tt.writes {
				if string(out.writes[i]) != tt.writes[i] {
					t.Errorf("write %d = %q; want %q", i, out.writes[i], tt.writes[i])
				}
			}
			if out.flushes != tt.flushes {
				t.Errorf("%d flushes; want %d", out.flushes, tt.flushes)
			}
		})
	}
}

// TestRelayFlushesEachEventBeforeNextArrives proves causally that an event
// reaches the client, flushed, before the upstream sends the next one: the
// test only writes event k+1 after it has seen the flush of event k.
func TestRelayFlushesEachEventBeforeNextArrives(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events []string
		split  bool // send each event in two halves
	}{
		{name: "whole events", events: []string{chunkAzure, chunkContent, ": ping\n\n", chunkContent, chunkDone}},
		{name: "events in halves", events: []string{chunkContent, "event: x\r\ndata: y\r\n\r\n", chunkDone}, split: true},
	}
	var r Relayer
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pr, pw := io.Pipe()
			out := &recorder{flushed: make(chan string)}
			done := make(chan error, 1)
			go func() {
				_, err := r.Relay(out, out.Flush, pr, Options{})
				pr.CloseWithError(err)
				close(out.flushed)
				done <- err
			}()
			want := ""
			for k, ev := range tt.events {
				parts := []string{ev}
				if tt.split {
					parts = []string{ev[:len(ev)/2], ev[len(ev)/2:]}
				}
				for _, p := range parts {
					if _, err := io.WriteString(pw, p); err != nil {
						t.Fatalf("upstream write of event %d: %v", k, err)
					}
				}
				want += ev
				// The next flush must carry exactly events 0..k: a flush of a
				// half event, or none at all, fails here.
				var got string
				var ok bool
				select {
				case got, ok = <-out.flushed:
				case <-time.After(time.Minute):
					// Not a timing assertion: only so a relay that never
					// flushes fails instead of hanging the test binary.
					t.Fatalf("no flush of event %d within a minute", k)
				}
				if !ok {
					t.Fatalf("relay ended before flushing event %d", k)
				}
				if got != want {
					t.Fatalf("after event %d the client has %q; want %q", k, got, want)
				}
			}
			pw.Close()
			if err := <-done; err != nil {
				t.Fatalf("Relay: %v", err)
			}
		})
	}
}

var errBoom = errors.New("boom")

// failingWriter fails its n-th Write (from 1) or, with short, writes half.
type failingWriter struct {
	n, calls int
	short    bool
	buf      bytes.Buffer
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.calls++
	if w.calls < w.n {
		return w.buf.Write(p)
	}
	if w.short {
		return w.buf.Write(p[:len(p)/2])
	}
	return 0, errBoom
}

// countingReader counts Reads, to show that Relay stops reading at once.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) { c.reads++; return c.r.Read(p) }

func TestRelayErrors(t *testing.T) {
	t.Parallel()
	big := "data: " + strings.Repeat("z", 200) + "\n\n"
	tests := []struct {
		name    string
		src     func() io.Reader
		dst     func() io.Writer
		flush   func() error
		opt     Options
		want    string // what the client receives
		is      []error
		notIs   []error
		maxRead int // if non-zero, Relay must stop after this many reads
	}{
		{
			name: "clean EOF without DONE is no error",
			src:  func() io.Reader { return strings.NewReader(chunkContent) },
			want: chunkContent,
		},
		{
			name: "truncated mid-event",
			src:  func() io.Reader { return strings.NewReader(chunkContent + `data: {"choices":[{"delta":{"content":"ha`) },
			want: chunkContent, is: []error{ErrUpstream, io.ErrUnexpectedEOF}, notIs: []error{ErrClient},
		},
		{
			name: "truncated after one line end",
			src:  func() io.Reader { return iotest.OneByteReader(strings.NewReader(chunkContent + "data: [DONE]\n")) },
			want: chunkContent, is: []error{ErrUpstream, io.ErrUnexpectedEOF},
		},
		{
			name: "read error mid-stream",
			src: func() io.Reader {
				return io.MultiReader(strings.NewReader(chunkContent+"data: par"), iotest.ErrReader(errBoom))
			},
			want: chunkContent, is: []error{ErrUpstream, errBoom}, notIs: []error{io.ErrUnexpectedEOF},
		},
		{
			name: "read error with data",
			src:  func() io.Reader { return iotest.TimeoutReader(strings.NewReader(chunkContent + chunkContent)) },
			want: chunkContent + chunkContent, is: []error{ErrUpstream, iotest.ErrTimeout},
		},
		{
			name: "client write error stops at once",
			src: func() io.Reader {
				return iotest.OneByteReader(strings.NewReader(chunkContent + chunkContent + chunkDone))
			},
			dst: func() io.Writer { return &failingWriter{n: 1} },
			is:  []error{ErrClient, errBoom}, notIs: []error{ErrUpstream}, maxRead: len(chunkContent),
		},
		{
			name: "short write",
			src:  func() io.Reader { return strings.NewReader(chunkContent) },
			dst:  func() io.Writer { return &failingWriter{n: 1, short: true} },
			want: chunkContent[:len(chunkContent)/2], is: []error{ErrClient, io.ErrShortWrite},
		},
		{
			name:  "flush error",
			src:   func() io.Reader { return strings.NewReader(chunkContent + chunkDone) },
			flush: func() error { return errBoom },
			want:  chunkContent + chunkDone, is: []error{ErrClient, errBoom}, maxRead: 1,
		},
		{
			name: "complete event too large",
			src:  func() io.Reader { return strings.NewReader(chunkContent + big + chunkDone) },
			opt:  Options{MaxEventBytes: 180},
			want: chunkContent, is: []error{ErrUpstream, ErrEventTooLarge},
		},
		{
			name: "incomplete event too large, read in small pieces",
			src:  func() io.Reader { return iotest.HalfReader(strings.NewReader(chunkContent + big + chunkDone)) },
			opt:  Options{MaxEventBytes: 180},
			want: chunkContent, is: []error{ErrUpstream, ErrEventTooLarge},
		},
		{
			name: "endless event hits the default limit",
			src:  func() io.Reader { return io.MultiReader(strings.NewReader("data: "), endless{}) },
			is:   []error{ErrUpstream, ErrEventTooLarge}, maxRead: DefaultMaxEventBytes,
		},
		{
			name: "endless event beyond a grown buffer",
			src:  func() io.Reader { return io.MultiReader(strings.NewReader("data: "), endless{}) },
			opt:  Options{MaxEventBytes: 100 << 10},
			is:   []error{ErrUpstream, ErrEventTooLarge},
		},
		{
			name: "event of exactly MaxEventBytes passes, CR look-ahead included",
			src:  func() io.Reader { return iotest.OneByteReader(strings.NewReader("data: x\r\rdata: y\r\r")) },
			opt:  Options{MaxEventBytes: 9},
			want: "data: x\r\rdata: y\r\r",
		},
		{
			name: "reader that makes no progress",
			src:  func() io.Reader { return noProgress{} },
			is:   []error{ErrUpstream, io.ErrNoProgress},
		},
	}
	var r Relayer
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			var dst io.Writer = &out
			if tt.dst != nil {
				dst = tt.dst()
			}
			src := &countingReader{r: tt.src()}
			res, err := r.Relay(dst, tt.flush, src, tt.opt)
			if len(tt.is) == 0 && err != nil {
				t.Fatalf("Relay: %v", err)
			}
			for _, want := range tt.is {
				if !errors.Is(err, want) {
					t.Errorf("error %v is not %v", err, want)
				}
			}
			for _, not := range tt.notIs {
				if errors.Is(err, not) {
					t.Errorf("error %v is %v", err, not)
				}
			}
			got := out.String()
			if fw, ok := dst.(*failingWriter); ok {
				got = fw.buf.String()
			}
			if got != tt.want {
				t.Errorf("client got %q; want %q", got, tt.want)
			}
			if res.Bytes != int64(len(tt.want)) {
				t.Errorf("Result.Bytes = %d; want %d", res.Bytes, len(tt.want))
			}
			if tt.maxRead > 0 && src.reads > tt.maxRead {
				t.Errorf("%d reads after the error; want at most %d", src.reads, tt.maxRead)
			}
		})
	}
}

// timedReader is an eventReader that notes when its second Read began.
type timedReader struct {
	events [][]byte
	reads  int
	second time.Time
}

func (r *timedReader) Read(p []byte) (int, error) {
	if r.reads++; r.reads == 2 {
		r.second = time.Now()
	}
	if len(r.events) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.events[0])
	r.events = r.events[1:]
	return n, nil
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

type noProgress struct{}

func (noProgress) Read([]byte) (int, error) { return 0, nil }

func TestRelayFirstWrite(t *testing.T) {
	t.Parallel()
	var r Relayer
	before := time.Now()
	res, err := r.Relay(io.Discard, nil, strings.NewReader(chunkContent), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.FirstWrite.Before(before) || res.FirstWrite.After(time.Now()) {
		t.Errorf("FirstWrite %v not within the call", res.FirstWrite)
	}
	// FirstWrite is the first write, not a later one: it happens before
	// the second read begins.
	src := &timedReader{events: [][]byte{[]byte(chunkContent), []byte(chunkDone)}}
	res, err = r.Relay(io.Discard, nil, src, Options{})
	if err != nil || src.second.IsZero() {
		t.Fatal(err, src.second)
	}
	if res.FirstWrite.After(src.second) {
		t.Errorf("FirstWrite %v is after the second read began at %v", res.FirstWrite, src.second)
	}
	res, _ = r.Relay(io.Discard, nil, strings.NewReader("data: partial"), Options{})
	if !res.FirstWrite.IsZero() || res.Events != 0 {
		t.Errorf("nothing written, yet Result = %+v", res)
	}
}

// TestRelayConcurrent shares one Relayer (and its pool) among many streams.
func TestRelayConcurrent(t *testing.T) {
	t.Parallel()
	var r Relayer
	stream := openAIStream(64)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range 32 {
		wg.Go(func() {
			var out bytes.Buffer
			src := &chunkReader{src: stream, sizes: randomSizes(uint64(i), 31, 5000)}
			res, err := r.Relay(&out, nil, src, Options{StripUsageChunk: i%2 == 0})
			switch {
			case err != nil:
				errs <- err
			case !res.Done || res.Usage != (Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}):
				errs <- fmt.Errorf("stream %d: result %+v", i, res)
			case i%2 == 1 && !bytes.Equal(out.Bytes(), stream):
				errs <- fmt.Errorf("stream %d: bytes differ", i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestAppendErrorEvent(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"compact", `{"error":{"message":"upstream failed","type":"server_error"}}`, `data: {"error":{"message":"upstream failed","type":"server_error"}}` + "\n\n"},
		{"indented", "{\n  \"error\": {}\r\n}", "data: {   \"error\": {}  }\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := AppendErrorEvent([]byte("prev"), []byte(tt.in))
			if string(got) != "prev"+tt.want {
				t.Errorf("got %q; want %q", got, "prev"+tt.want)
			}
			if end, ok := EventEnd(got[4:], false); !ok || end != len(got)-4 {
				t.Errorf("not one SSE event: EventEnd = %d, %v", end, ok)
			}
		})
	}
}

func FuzzRelay(f *testing.F) {
	for _, s := range shapes() {
		if len(s) < 1<<12 {
			f.Add(s, []byte{1, 7, 0, 200}, false, uint8(0))
			f.Add(s, []byte{3}, true, uint8(40))
		}
	}
	f.Add([]byte(chunkContent+chunkUsage+chunkDone), []byte{50, 1}, true, uint8(0))
	f.Add([]byte("data: a\r\r\ndata: b\r"), []byte{1}, false, uint8(9))
	var r Relayer
	f.Fuzz(func(t *testing.T, stream, splits []byte, strip bool, maxEvent uint8) {
		sizes := make([]int, len(splits))
		for i, s := range splits {
			sizes[i] = int(s) // 0 is an empty read
		}
		if len(sizes) > 0 && sizes[len(sizes)-1] == 0 && slicesAllZero(sizes) {
			sizes = append(sizes, 1)
		}
		opt := Options{StripUsageChunk: strip, MaxEventBytes: int(maxEvent), Meter: testEventsMeter}
		var out recorder
		res, err := r.Relay(&out, out.Flush, &chunkReader{src: stream, sizes: sizes}, opt)

		// The oracle: complete events of the whole stream, in order, up to
		// the first one over the limit, less stripped usage chunks, and
		// nothing after a terminal event: what follows it, even
		// a cut event, is no error.
		events, rest := refEvents(stream)
		var want bytes.Buffer
		var wantEvents int64
		wantErr := len(rest) > 0
		for _, ev := range events {
			if maxEvent > 0 && len(ev) > int(maxEvent) {
				wantErr = true
				break
			}
			if _, only, ok := EventUsage(ev, TopLevel); strip && ok && only {
				continue
			}
			want.Write(ev)
			wantEvents++
			if refTerminal(ev) {
				wantErr = false
				break
			}
		}
		if got := out.String(); got != want.String() {
			t.Fatalf("client got %q; want %q", got, want.String())
		}
		if res.Events != wantEvents || res.Bytes != int64(want.Len()) {
			t.Fatalf("Result Events=%d Bytes=%d; want %d, %d", res.Events, res.Bytes, wantEvents, want.Len())
		}
		if wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrUpstream)) {
			t.Fatalf("error %v; want an ErrUpstream: %v", err, wantErr)
		}

		// The same stream with its first event read first, into the
		// pool's buffer (the server's way), to a client that writes and
		// flushes in one call: the same bytes, the same result.
		src := &chunkReader{src: stream, sizes: sizes}
		var p Pending
		r.Pending(&p)
		if p.ReadFirst(src, DefaultMaxEventBytes) != nil {
			p.Release()
			return
		}
		opt.Pending = &p
		var wf writeFlusher
		res2, err2 := r.Relay(&wf, wf.Flush, src, opt)
		if got := wf.String(); got != want.String() {
			t.Fatalf("after ReadFirst, client got %q; want %q", got, want.String())
		}
		if res2.Events != res.Events || res2.Bytes != res.Bytes || res2.Done != res.Done || (err2 != nil) != (err != nil) {
			t.Fatalf("after ReadFirst: %+v, %v; without: %+v, %v", res2, err2, res, err)
		}
		if p.pooled != nil || p.n != 0 {
			t.Fatal("Relay left its Pending holding the buffer")
		}
	})
}

// TestRelayPendingFirstEvent: a stream's first event read before the
// relay (past the backend's own comments) is written by the relay's first
// write, before it reads again, and ReadFirst says why a stream has none.
func TestRelayPendingFirstEvent(t *testing.T) {
	t.Parallel()
	var r Relayer
	stream := ": keepalive\n\n" + chunkContent + chunkContent + chunkDone
	src := &eventReader{events: [][]byte{[]byte(": keepalive\n\n"), []byte(chunkContent), []byte(chunkContent), []byte(chunkDone)}}
	var p Pending
	r.Pending(&p)
	if err := p.ReadFirst(src, DefaultMaxEventBytes); err != nil {
		t.Fatal(err)
	}
	if got := string(p.Bytes()); got != ": keepalive\n\n"+chunkContent {
		t.Fatalf("ReadFirst read %q", got)
	}
	var out writeFlusher
	res, err := r.Relay(&out, nil, src, Options{Pending: &p})
	if err != nil || !res.Done || out.String() != stream {
		t.Fatalf("Relay: %v, %+v, %q", err, res, out.String())
	}
	if string(out.writes[0]) != ": keepalive\n\n"+chunkContent || out.writeFlushes != 3 {
		t.Errorf("first write %q, %d write-flushes: want the pending bytes alone, then one per read", out.writes[0], out.writeFlushes)
	}

	for _, c := range []struct {
		name, in string
		max      int
		want     error
	}{
		{"comments only", ": a\n\n: b\n\n", DefaultMaxEventBytes, ErrNoFirstEvent},
		{"cut inside the first event", "data: {", DefaultMaxEventBytes, ErrNoFirstEvent},
		{"too large", "data: " + strings.Repeat("x", 9000), 8192, ErrFirstEventTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p Pending
			r.Pending(&p)
			defer p.Release()
			if err := p.ReadFirst(strings.NewReader(c.in), c.max); !errors.Is(err, c.want) {
				t.Fatalf("ReadFirst: %v, want %v", err, c.want)
			}
		})
	}
}

// TestRelayWriteFlusher: a client with WriteFlush gets one call per read
// that completes events, and the relay's flush is not called besides; its
// errors are the client's.
func TestRelayWriteFlusher(t *testing.T) {
	t.Parallel()
	var r Relayer
	stream := openAIStream(5)
	events, _ := refEvents(stream)
	var out writeFlusher
	flushes := 0
	res, err := r.Relay(&out, func() error { flushes++; return nil }, &eventReader{events: events}, Options{})
	if err != nil || out.String() != string(stream) || res.Events != int64(len(events)) {
		t.Fatalf("Relay: %v, %+v", err, res)
	}
	if out.writeFlushes != len(events) || flushes != 0 || out.flushes != len(events) {
		t.Errorf("%d write-flushes, %d relay flushes, %d client flushes for %d events", out.writeFlushes, flushes, out.flushes, len(events))
	}
	bad := writeFlusher{err: errors.New("client gone")}
	if _, err := r.Relay(&bad, nil, bytes.NewReader(stream), Options{}); !errors.Is(err, ErrClient) || !strings.Contains(err.Error(), "flush") {
		t.Errorf("a failed flush: %v", err)
	}
}

// refTerminal reports whether ev ends a stream: data: [DONE] on a line of
// its own (an event whose data is not a JSON object), or a named event
// response.completed, .incomplete, .failed or message_stop.
func refTerminal(ev []byte) bool {
	s := string(ev)
	if name, ok := strings.CutPrefix(s, "event: "); ok {
		if i := strings.IndexAny(name, "\r\n"); i >= 0 {
			name = name[:i]
		}
		switch strings.TrimSpace(name) {
		case "response.completed", "response.incomplete", "response.failed", "message_stop":
			return true
		}
		return false
	}
	if strings.HasPrefix(s, "data: {") {
		return false
	}
	for _, line := range strings.Split(strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n"), "\n") {
		if line == "data: [DONE]" || line == "data:[DONE]" {
			return true
		}
	}
	return false
}

func slicesAllZero(s []int) bool {
	for _, v := range s {
		if v != 0 {
			return false
		}
	}
	return true
}

func TestEndedWithError(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   bool
	}{
		{"ends with an error event", "data: {\"a\":1}\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n", true},
		{"error then more events", "data: {\"error\":{\"message\":\"x\"}}\n\ndata: {\"a\":1}\n\n", false},
		{"plain stream", "data: {\"a\":1}\n\ndata: [DONE]\n\n", false},
		{"error word in content", "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"error\\\"\"}}]}\n\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Relayer
			res, err := r.Relay(io.Discard, nil, strings.NewReader(tt.stream), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.EndedWithError != tt.want {
				t.Fatalf("EndedWithError = %v, want %v", res.EndedWithError, tt.want)
			}
		})
	}
}

// TestRelayResponsesStream: a Responses API stream (named events, no
// [DONE]) is done at response.completed, counted from its usage, and an
// error event is the backend's own.
func TestRelayResponsesStream(t *testing.T) {
	created := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n"
	delta := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"
	done := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1,\"total_tokens\":6}}}\n\n"
	errEv := "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\"}\n\n"
	for _, tt := range []struct {
		name, in      string
		done, errored bool
	}{
		{"completed", created + delta + done, true, false},
		{"cut", created + delta, false, false},
		{"error event", created + errEv, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			var r Relayer
			res, err := r.Relay(&out, nil, strings.NewReader(tt.in), Options{Meter: testResponsesMeter})
			if err != nil || out.String() != tt.in || res.Done != tt.done || res.EndedWithError != tt.errored {
				t.Fatalf("err %v done %v errored %v out %q", err, res.Done, res.EndedWithError, out.String())
			}
			if tt.done && (res.Usage.PromptTokens != 5 || res.Usage.CompletionTokens != 1) {
				t.Fatalf("usage %+v", res.Usage)
			}
		})
	}
}

// TestRelayTokenEvents: token events are counted (content chunks, Azure's
// filter chunk, Responses deltas; not usage, errors, [DONE], comments or
// other named events), and MaxTokenEvents ends the stream before the event
// that would pass it, with everything before it written and flushed,
// whatever the read sizes.
func TestRelayTokenEvents(t *testing.T) {
	chat := chunkAzure + strings.Repeat(chunkContent, 5) + ": keepalive\n\n" + chunkUsage + chunkDone
	created := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"usage\":null}}\n\n"
	delta := "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"
	done := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":3,\"total_tokens\":8}}}\n\n"
	responses := created + strings.Repeat(delta, 3) + done
	tests := []struct {
		name, in string
		max      int64
		want     string // what the client gets
		tokens   int64
		cut      bool
	}{
		{"chat counted", chat, 0, chat, 6, false},
		{"chat at the limit", chat, 6, chat, 6, false},
		{"chat cut", chat, 4, chunkAzure + strings.Repeat(chunkContent, 3), 4, true},
		{"usage-only stream", chunkUsage + chunkDone, 1, chunkUsage + chunkDone, 0, false},
		{"running usage counted", chunkVLLM + chunkVLLM + chunkUsage + chunkDone, 1, chunkVLLM, 1, true},
		{"error event not counted", chunkContent + `data: {"error":{"message":"x"}}` + "\n\n", 1, chunkContent + `data: {"error":{"message":"x"}}` + "\n\n", 1, false},
		{"responses counted", responses, 3, responses, 3, false},
		{"responses cut", responses, 2, created + delta + delta, 2, true},
	}
	for _, tt := range tests {
		for _, sizes := range [][]int{nil, {1}, {7, 300}} {
			t.Run(fmt.Sprintf("%s/%v", tt.name, sizes), func(t *testing.T) {
				rec := &recorder{}
				var r Relayer
				res, err := r.Relay(rec, rec.Flush, &chunkReader{src: []byte(tt.in), sizes: sizes}, Options{MaxTokenEvents: tt.max, Meter: testEventsMeter})
				if tt.cut != errors.Is(err, ErrTokenLimit) || (!tt.cut && err != nil) {
					t.Fatalf("err %v, cut %v", err, tt.cut)
				}
				if rec.String() != tt.want || res.TokenEvents != tt.tokens || res.Bytes != int64(len(tt.want)) {
					t.Fatalf("token events %d (want %d), bytes %d, out %q\nwant %q", res.TokenEvents, tt.tokens, res.Bytes, rec.String(), tt.want)
				}
				if tt.cut && rec.flushes == 0 {
					t.Fatal("the events before the cut were not flushed")
				}
			})
		}
	}
}

// FuzzTokenLimit: with MaxTokenEvents m, a stream of at most m token
// events is relayed exactly as without a limit; a longer one is cut with
// ErrTokenLimit after exactly m, its output a prefix (at an event
// boundary) of the unlimited output; and read sizes change nothing.
func FuzzTokenLimit(f *testing.F) {
	f.Add([]byte(chunkAzure+chunkContent+chunkContent+chunkUsage+chunkDone), []byte{7, 1, 90}, uint8(2))
	f.Add([]byte("event: response.output_text.delta\ndata: {}\n\nevent: response.completed\ndata: {}\n\n"), []byte{5}, uint8(0))
	f.Add([]byte(chunkVLLM+chunkVLLM+`data: {"error":{}}`+"\n\n"), []byte{}, uint8(1))
	var r Relayer
	f.Fuzz(func(t *testing.T, stream, splits []byte, m uint8) {
		sizes := make([]int, 0, len(splits))
		for _, s := range splits {
			sizes = append(sizes, int(s)+1)
		}
		var full recorder
		fres, ferr := r.Relay(&full, full.Flush, bytes.NewReader(stream), Options{Meter: testEventsMeter})
		var out recorder
		res, err := r.Relay(&out, out.Flush, &chunkReader{src: stream, sizes: sizes}, Options{MaxTokenEvents: int64(m), Meter: testEventsMeter})
		if m == 0 || fres.TokenEvents <= int64(m) {
			if out.String() != full.String() || res.TokenEvents != fres.TokenEvents || (err == nil) != (ferr == nil) {
				t.Fatalf("limit %d, %d token events: got %q (%v), want %q (%v)", m, fres.TokenEvents, out.String(), err, full.String(), ferr)
			}
			return
		}
		if !errors.Is(err, ErrTokenLimit) && !errors.Is(err, ErrUpstream) {
			t.Fatalf("limit %d of %d token events: error %v", m, fres.TokenEvents, err)
		}
		if errors.Is(err, ErrTokenLimit) && res.TokenEvents != int64(m) {
			t.Fatalf("cut after %d token events, limit %d", res.TokenEvents, m)
		}
		if got := out.String(); !strings.HasPrefix(full.String(), got) || (got != "" && !strings.HasSuffix(got, "\n") && !strings.HasSuffix(got, "\r")) {
			t.Fatalf("cut output %q is not an event-aligned prefix of %q", got, full.String())
		}
	})
}

// TestRelayStopsAtTerminalEvent: nothing after data: [DONE] or
// a Responses terminal event reaches the client, and the relay says it
// dropped something.
func TestRelayStopsAtTerminalEvent(t *testing.T) {
	t.Parallel()
	completed := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2,\"total_tokens\":3}}}\n\n"
	for _, tc := range []struct {
		name, in, want string
		after          bool
	}{
		{"events after [DONE]", chunkContent + chunkDone + chunkContent + chunkDone, chunkContent + chunkDone, true},
		{"events after [DONE] read one byte at a time", chunkContent + chunkDone + chunkContent, chunkContent + chunkDone, true},
		{"events after response.completed", completed + "event: response.output_text.delta\ndata: {}\n\n", completed, true},
		{"nothing after", chunkContent + chunkDone, chunkContent + chunkDone, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			var src io.Reader = strings.NewReader(tc.in)
			if strings.Contains(tc.name, "one byte") {
				src = iotest.OneByteReader(src)
			}
			var r Relayer
			res, err := r.Relay(&out, nil, src, Options{Meter: testResponsesMeter})
			if err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want || !res.Done {
				t.Fatalf("client got %q (done %v); want %q", out.String(), res.Done, tc.want)
			}
			// One byte at a time the relay stops before reading the rest.
			if !strings.Contains(tc.name, "one byte") && res.AfterDone != tc.after {
				t.Fatalf("AfterDone = %v, want %v", res.AfterDone, tc.after)
			}
		})
	}
}

// TestRelayEventTable: which events end a stream, which is the backend's
// error and which carry tokens is the Meter's, the operation row's event
// table, not a name the relay knows: a data-only stream's zero
// Meter does not end at response.completed or count a ".delta", and a
// shape of its own ends where its table says.
func TestRelayEventTable(t *testing.T) {
	t.Parallel()
	completed := "event: response.completed\ndata: {}\n\n"
	delta := "event: response.output_text.delta\ndata: {}\n\n"
	audio := "event: speech.audio.delta\ndata: {\"audio\":\"AAAA\"}\n\n"
	audioDone := "event: speech.audio.done\ndata: {\"usage\":{\"input_tokens\":3,\"output_tokens\":2,\"total_tokens\":5}}\n\n"
	oops := "event: oops\ndata: {}\n\n"
	speech := Meter{End: []string{"speech.audio.done"}, Error: "oops", Tokens: []string{"speech.audio.delta"},
		Bill: []string{"speech.audio.done"}, BillAt: TopLevel, Floor: []string{"speech.audio.delta"}}
	for _, tc := range []struct {
		name           string
		meter          Meter
		in             string
		done, errored  bool
		tokens, floors int64
	}{
		{"data-only stream ignores named events", Meter{}, delta + completed + chunkContent, false, false, 1, 1},
		{"responses table", testResponsesMeter, delta + completed + chunkContent, true, false, 1, 1},
		{"a shape of its own", speech, audio + audio + audioDone + delta, true, false, 2, 2},
		{"its own error event", speech, audio + oops, false, true, 1, 1},
		{"another shape's terminal event is not its", speech, audio + completed + "event: message_stop\ndata: {}\n\n", false, false, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var r Relayer
			res, err := r.Relay(io.Discard, nil, strings.NewReader(tc.in), Options{Meter: tc.meter})
			if err != nil || res.Done != tc.done || res.EndedWithError != tc.errored || res.TokenEvents != tc.tokens || res.FloorEvents != tc.floors {
				t.Fatalf("err %v, done %v, errored %v, token events %d, floor events %d", err, res.Done, res.EndedWithError, res.TokenEvents, res.FloorEvents)
			}
			if tc.name == "a shape of its own" && (!res.Final || res.Usage.CompletionTokens != 2) {
				t.Fatalf("usage %+v final %v", res.Usage, res.Final)
			}
		})
	}
}

// TestRelayActivityIsData: comments alone never move Options.Activity.
func TestRelayActivityIsData(t *testing.T) {
	t.Parallel()
	var act atomic.Int64
	var r Relayer
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.Relay(io.Discard, nil, pr, Options{Activity: &act})
	}()
	_, _ = io.WriteString(pw, ": ping\n\n: ping\n\n")
	_, _ = io.WriteString(pw, ": ping\n\n") // the relay has consumed the first write when this returns
	if act.Load() != 0 {
		t.Fatal("comments moved the activity clock")
	}
	_, _ = io.WriteString(pw, chunkContent)
	_, _ = io.WriteString(pw, ": ping\n\n")
	if act.Load() == 0 {
		t.Fatal("a data event did not move the activity clock")
	}
	_ = pw.Close()
	<-done
}

// searched is a message_delta whose usage counts n web searches.
func searched(n int) string {
	return fmt.Sprintf("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":42,\"server_tool_use\":{\"web_search_requests\":%d}}}\n\n", n)
}

// TestRelayMessagesStream: an Anthropic Messages stream is relayed byte
// for byte, done at message_stop (nothing after it relayed), its token
// events are content_block_delta, and its usage is read from message_start
// (input with cache creation and reads) and message_delta (output) only:
// usage-shaped objects in tool inputs, deltas and message content are the
// caller's own JSON. Read one byte at a time too.
func TestRelayMessagesStream(t *testing.T) {
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[{\"type\":\"tool_use\",\"input\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}],\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":5,\"cache_read_input_tokens\":20,\"output_tokens\":1}},\"usage\":{\"input_tokens\":1}}\n\n"
	tool := "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{\"usage\":{\"output_tokens\":0}}}}\n\n"
	delta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"usage\\\":{\\\"output_tokens\\\":0}}\",\"usage\":{\"output_tokens\":0}}}\n\n"
	ping := "event: ping\ndata: {\"type\": \"ping\"}\n\n"
	msgDelta := "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"usage\":{\"output_tokens\":1}},\"usage\":{\"output_tokens\":42}}\n\n"
	stop := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	errEv := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	after := "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":1}}\n\n"
	want := Usage{PromptTokens: 35, CompletionTokens: 42, CachedTokens: 20, CacheWriteTokens: 5}
	for _, tt := range []struct {
		name, in, out string
		done, errored bool
		usage         Usage
		tokens        int64
		afterDone     bool
	}{
		{"whole", start + tool + ping + delta + delta + msgDelta + stop, "", true, false, want, 2, false},
		{"after message_stop dropped", start + delta + msgDelta + stop + after, start + delta + msgDelta + stop, true, false, want, 1, true},
		{"cut before message_stop", start + delta + msgDelta, "", false, false, want, 1, false},
		{"backend's error event", start + delta + errEv, "", false, true, Usage{PromptTokens: 35, CompletionTokens: 1, CachedTokens: 20, CacheWriteTokens: 5}, 1, false},
		// The server tools' uses, billed per use, cumulative in message_delta
		// like the output, are the last event's.
		{"server tool uses", start + delta + searched(1) + searched(3) + stop, "", true, false,
			Usage{PromptTokens: 35, CompletionTokens: 42, CachedTokens: 20, CacheWriteTokens: 5, ServerTools: ServerToolUse{WebSearches: 3, Reported: true}}, 1, false},
	} {
		for _, size := range []int{1, 7, 1 << 16} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, size), func(t *testing.T) {
				var out strings.Builder
				var r Relayer
				res, err := r.Relay(&out, nil, &chunkReader{src: []byte(tt.in), sizes: []int{size}}, Options{Meter: testMessagesMeter})
				wantOut := tt.out
				if wantOut == "" {
					wantOut = tt.in
				}
				if err != nil || out.String() != wantOut || res.Done != tt.done || res.EndedWithError != tt.errored || res.AfterDone != tt.afterDone {
					t.Fatalf("err %v done %v errored %v afterDone %v out %q", err, res.Done, res.EndedWithError, res.AfterDone, out.String())
				}
				if !res.HasUsage || res.Usage != tt.usage || res.TokenEvents != tt.tokens {
					t.Fatalf("usage %+v (want %+v), token events %d (want %d)", res.Usage, tt.usage, res.TokenEvents, tt.tokens)
				}
			})
		}
	}
}

// TestAnthropicUsage: Anthropic's usage objects read at their documented
// places, with cache creation and reads counted as prompt tokens, and
// cache counts that cannot be true refused.
func TestAnthropicUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		in    string
		where Where
		want  Usage
		ok    bool
	}{
		{"message_start", `{"type":"message_start","message":{"usage":{"input_tokens":3,"cache_creation_input_tokens":4,"cache_read_input_tokens":5,"output_tokens":1}}}`, InMessage, Usage{PromptTokens: 12, CompletionTokens: 1, CachedTokens: 5, CacheWriteTokens: 4}, true},
		{"cache writes by hour and tier", `{"usage":{"input_tokens":3,"cache_creation_input_tokens":10,"cache_creation":{"ephemeral_5m_input_tokens":4,"ephemeral_1h_input_tokens":6},"output_tokens":1,"service_tier":"priority"}}`, TopLevel, Usage{PromptTokens: 13, CompletionTokens: 1, CacheWriteTokens: 10, CacheWrite1hTokens: 6, Tier: price.TierPriority, TierReported: true}, true},
		{"hour's writes above the writes", `{"usage":{"input_tokens":3,"cache_creation_input_tokens":2,"cache_creation":{"ephemeral_1h_input_tokens":6}}}`, TopLevel, Usage{PromptTokens: 5, CacheWriteTokens: 2, CacheWrite1hTokens: 2}, true},
		{"OpenAI's tier at the top", `{"choices":[],"service_tier":"flex","usage":{"prompt_tokens":3,"completion_tokens":1}}`, TopLevel, Usage{PromptTokens: 3, CompletionTokens: 1, Tier: price.TierFlex, TierReported: true}, true},
		{"a tier in content is not the answer's", `{"choices":[{"message":{"content":"x","service_tier":"flex"}}],"usage":{"prompt_tokens":3}}`, TopLevel, Usage{PromptTokens: 3}, true},
		{"an unknown tier", `{"service_tier":"turbo","usage":{"prompt_tokens":3}}`, TopLevel, Usage{PromptTokens: 3, Tier: price.TierUnknown, TierReported: true}, true},
		{"Responses: the response's tier", `{"type":"response.completed","response":{"service_tier":"default","usage":{"input_tokens":3}}}`, InResponse, Usage{PromptTokens: 3, TierReported: true}, true},
		{"message_start top-level usage is not the message's", `{"type":"message_start","usage":{"input_tokens":1},"message":{"content":[]}}`, InMessage, Usage{}, false},
		{"usage in message content is not the message's", `{"message":{"content":[{"input":{"usage":{"input_tokens":1}}}]}}`, InMessage, Usage{}, false},
		{"message_delta", `{"type":"message_delta","delta":{"usage":{"output_tokens":1}},"usage":{"output_tokens":9}}`, TopLevel, Usage{CompletionTokens: 9}, true},
		{"JSON answer", `{"id":"msg_1","content":[{"type":"tool_use","input":{"usage":{"input_tokens":999999}}}],"usage":{"input_tokens":2,"cache_read_input_tokens":8,"output_tokens":3}}`, TopLevel, Usage{PromptTokens: 10, CompletionTokens: 3, CachedTokens: 8}, true},
		{"escaped message key", `{"m\u0065ssage":{"usage":{"input_tokens":2}}}`, InMessage, Usage{PromptTokens: 2}, true},
		{"negative cache read", `{"usage":{"input_tokens":10,"cache_read_input_tokens":-5}}`, TopLevel, Usage{}, false},
		{"cache count beyond 2^53", `{"usage":{"input_tokens":1,"cache_creation_input_tokens":9007199254740993}}`, TopLevel, Usage{}, false},
		{"null cache counts", `{"usage":{"input_tokens":1,"cache_creation_input_tokens":null,"cache_read_input_tokens":null}}`, TopLevel, Usage{PromptTokens: 1}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, _, ok := ReadUsage([]byte(tt.in), tt.where)
			if u != tt.want || ok != tt.ok {
				t.Fatalf("ReadUsage = %+v, %v; want %+v, %v", u, ok, tt.want, tt.ok)
			}
			if tt.where == TopLevel && tt.ok {
				var s AnswerScanner
				_, _ = s.Write([]byte(tt.in))
				if su, sok := s.Usage(); su != tt.want || !sok {
					t.Fatalf("AnswerScanner.Usage = %+v, %v", su, sok)
				}
			}
		})
	}
}
