package keepalive

import (
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/sse"
)

// discard is a client that takes every write and flush, as a connection
// that keeps up does.
type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}
func (discard) FlushError() error           { return nil }

// oneEventPerRead yields one event per Read, events times, then io.EOF,
// and rewinds itself, so each op reads the same stream without
// allocating.
type oneEventPerRead struct {
	event     []byte
	events, i int
}

func (r *oneEventPerRead) Read(p []byte) (int, error) {
	if r.i == r.events {
		r.i = 0
		return 0, io.EOF
	}
	r.i++
	return copy(p, r.event), nil
}

// BenchmarkWriteFlush relays a stream through a Writer as a stream
// request does (sse.WriteFlusher: one locked write and flush per read,
// tokens arriving apart) and reports the cost and the allocations per
// event; the path allocates nothing.
func BenchmarkWriteFlush(b *testing.B) {
	const events = 128
	src := &oneEventPerRead{event: []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"}}]}` + "\n\n"), events: events}
	k := Start(discard{h: http.Header{}}, 0, time.Now)
	defer k.Stop()
	var r sse.Relayer
	relayOnce := func() {
		if res, err := r.Relay(k, nil, src, sse.Options{}); err != nil || res.Events != events {
			b.Fatalf("Relay: %v, %+v", err, res)
		}
	}
	relayOnce() // warm the relayer's pool
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ops := 0
	for b.Loop() {
		relayOnce()
		ops++
	}
	runtime.ReadMemStats(&after)
	n := float64(ops * events)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
}
