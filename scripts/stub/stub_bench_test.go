package stub

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAppendEvent is the per-token path: one template append and one
// AppendInt.
func BenchmarkAppendEvent(b *testing.B) {
	var tm templates
	tm.render(answer{id: "chatcmpl-stub-1", model: "gpt-4o-mini", chat: true, tokens: 128, finish: "stop", promptTokens: 20, includeUsage: true, created: 1})
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = tm.appendEvent(buf[:0], evToken, 0, 1, 1_700_000_000_000_000_000)
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkStreamLoopback streams 128-token responses with no delays over
// loopback HTTP/1.1, client in the same process. cpu-ns/event is the
// process's CPU (stub and client together) per event, an upper bound on
// the stub's own cost.
func BenchmarkStreamLoopback(b *testing.B) {
	_, ts := start(b, Options{TTFT: -1, Interval: -1, Tokens: 128})
	client := ts.Client()
	const body = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	const eventsPerStream = 1 + 128 + 1 + 1 + 1
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 32<<10)
		for pb.Next() {
			req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.CopyBuffer(io.Discard, resp.Body, buf)
			resp.Body.Close()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	events := float64(b.N * eventsPerStream)
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/events, "wall-ns/event")
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/events, "cpu-ns/event")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
