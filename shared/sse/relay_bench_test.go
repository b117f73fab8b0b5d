package sse

import (
	"bytes"
	"io"
	"runtime"
	"testing"
)

// BenchmarkRelay relays a realistic stream (128 content chunks, the usage
// chunk, [DONE]) per op and reports the cost per event. "one event per
// read" is the network case: tokens arrive apart, so every Read returns one
// event and is followed by one Write and one flush. "buffered" is a backlog:
// 4 KiB reads full of events, one Write and one flush per read.
//
// cpu-ns/event is process CPU time (GC included) per event; run with
// -cpu 1 so it is the relay's alone. allocs/event counts every allocation
// during the timed loop.
func BenchmarkRelay(b *testing.B) {
	stream := openAIStream(128)
	events, _ := refEvents(stream)
	resp := responsesStream(128)
	respEvents, _ := refEvents(resp)
	msgs := messagesStream(128)
	msgEvents, _ := refEvents(msgs)
	cases := []struct {
		name   string
		src    func() io.Reader
		strip  bool
		stream []byte
		meter  Meter
	}{
		{name: "one event per read", src: perEvent(events)},
		{name: "one event per read strip usage", src: perEvent(events), strip: true},
		{name: "buffered", src: whole(stream)},
		{name: "buffered strip usage", src: whole(stream), strip: true},
		{name: "responses one event per read", src: perEvent(respEvents), stream: resp, meter: testResponsesMeter},
		{name: "responses buffered", src: whole(resp), stream: resp, meter: testResponsesMeter},
		{name: "messages one event per read", src: perEvent(msgEvents), stream: msgs, meter: testMessagesMeter},
		{name: "messages buffered", src: whole(msgs), stream: msgs, meter: testMessagesMeter},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var r Relayer
			flushes := 0
			flush := func() error { flushes++; return nil }
			src := c.src()
			opt := Options{StripUsageChunk: c.strip, Meter: c.meter}
			relayOnce := func() {
				if res, err := r.Relay(io.Discard, flush, src, opt); err != nil || !res.Done {
					b.Fatalf("Relay: %v, %+v", err, res)
				}
			}
			relayOnce() // warm the pool
			perOp, nEvents := stream, len(events)
			if c.stream != nil {
				perOp, nEvents = c.stream, len(respEvents)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(perOp)))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0 := processCPU()
			flushes = 0
			ops := 0
			for b.Loop() {
				relayOnce()
				ops++
			}
			cpu := processCPU() - cpu0
			runtime.ReadMemStats(&after)
			n := float64(ops * nEvents)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
			b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/event")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
			b.ReportMetric(float64(flushes)/n, "flushes/event")
		})
	}
}

// perEvent returns a source that yields one event per Read and rewinds
// itself at EOF, so each op reads the same stream without allocating.
func perEvent(events [][]byte) func() io.Reader {
	return func() io.Reader { return &rewindEvents{events: events} }
}

type rewindEvents struct {
	events [][]byte
	i      int
}

func (r *rewindEvents) Read(p []byte) (int, error) {
	if r.i == len(r.events) {
		r.i = 0
		return 0, io.EOF
	}
	n := copy(p, r.events[r.i])
	r.i++
	return n, nil
}

func whole(stream []byte) func() io.Reader {
	return func() io.Reader { return &rewindReader{r: bytes.NewReader(stream), b: stream} }
}

type rewindReader struct {
	r *bytes.Reader
	b []byte
}

func (r *rewindReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == io.EOF {
		r.r.Reset(r.b)
	}
	return n, err
}

// BenchmarkRelayLargeEvent relays one 1 MiB event that arrives in 1 KiB
// reads: the scan resumes where it stopped and pending bytes are not moved
// on every read, so the cost stays linear in the event's size.
func BenchmarkRelayLargeEvent(b *testing.B) {
	stream := []byte("data: " + string(bytes.Repeat([]byte("x"), 1<<20)) + "\n\n" + chunkDone)
	var r Relayer
	src := &rewindChunks{b: stream, size: 1 << 10}
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		if res, err := r.Relay(io.Discard, nil, src, Options{}); err != nil || !res.Done {
			b.Fatalf("Relay: %v, %+v", err, res)
		}
	}
}

type rewindChunks struct {
	b    []byte
	off  int
	size int
}

func (r *rewindChunks) Read(p []byte) (int, error) {
	if r.off == len(r.b) {
		r.off = 0
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.size)], r.b[r.off:])
	r.off += n
	return n, nil
}
