package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The request bodies: a streamed chat completion that asks for the usage
// chunk (so the gateway counts usage), and a non-streamed one, which the
// stub answers at once.
const (
	streamBody    = `{"model":"bench-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say something."}]}`
	nonStreamBody = `{"model":"bench-model","messages":[{"role":"user","content":"Say something."}]}`
	chatPath      = "/v1/chat/completions"
)

// target is where the load goes: the gateway, the floor, or the stub itself.
type target struct {
	name   string // "gateway", "floor", "direct"
	base   string // http://host:port
	token  string
	client *http.Client
}

// newClient is the load generator's client: one keep-alive connection per
// virtual user, no gzip, no HTTP/2 (the relays under test speak HTTP/1.1
// to clients as the stub does).
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxConnsPerHost:     conns,
		MaxIdleConnsPerHost: conns,
		MaxIdleConns:        0,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
}

func (t *target) close() { t.client.CloseIdleConnections() }

// reqOpts are per-request stub overrides, sent as X-Stub-* headers that the
// gateway and the floor forward.
type reqOpts struct {
	stream   bool
	ttft     string // X-Stub-TTFT, "" = stub default
	tokens   string // X-Stub-Tokens
	interval string // X-Stub-Interval, "" = stub default
}

func (t *target) newRequest(ctx context.Context, o reqOpts) (*http.Request, error) {
	body := nonStreamBody
	if o.stream {
		body = streamBody
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+chatPath, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Authorization"] = []string{"Bearer " + t.token}
	if o.ttft != "" {
		req.Header["X-Stub-Ttft"] = []string{o.ttft}
	}
	if o.tokens != "" {
		req.Header["X-Stub-Tokens"] = []string{o.tokens}
	}
	if o.interval != "" {
		req.Header["X-Stub-Interval"] = []string{o.interval}
	}
	return req, nil
}

// streamResult is one streamed request as the client saw it.
type streamResult struct {
	start     time.Time
	ttft      time.Duration // receipt of the first data event - its stub_emit_ns
	end       time.Duration // receipt of the end ([DONE]) - the last stub_emit_ns
	firstRecv time.Time     // when the first data event arrived
	events    int
	err       string // "" when the stream ended with [DONE] after a 200
}

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

var doneLine = []byte("data: [DONE]")

// doStream sends one streamed request and reads it to the end, timing each
// event against the stub's stamp in it. perEvent, when set, gets every
// event's added latency.
func (t *target) doStream(ctx context.Context, o reqOpts, perEvent *Histogram) streamResult {
	r := streamResult{start: time.Now()}
	o.stream = true
	req, err := t.newRequest(ctx, o)
	if err != nil {
		r.err = "request: " + err.Error()
		return r
	}
	resp, err := t.client.Do(req)
	if err != nil {
		r.err = errKind(err)
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		r.err = fmt.Sprintf("status %d", resp.StatusCode)
		return r
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() { br.Reset(nil); readers.Put(br) }()
	var lastEmit int64
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				// A line longer than the buffer: not the stub's; skip it.
				for errors.Is(err, bufio.ErrBufferFull) {
					_, err = br.ReadSlice('\n')
				}
				if err == nil {
					continue
				}
			}
			if errors.Is(err, io.EOF) {
				r.err = "truncated"
			} else {
				r.err = errKind(err)
			}
			return r
		}
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		now := time.Now()
		if bytes.HasPrefix(line, doneLine) {
			r.events++
			if lastEmit == 0 {
				r.err = "no stamped event"
				return r
			}
			r.end = time.Duration(now.UnixNano() - lastEmit)
			_, _ = io.Copy(io.Discard, br)
			return r
		}
		emit, ok := parseEmit(line)
		if !ok {
			r.err = "event without stub_emit_ns"
			return r
		}
		d := time.Duration(now.UnixNano() - emit)
		if r.events == 0 {
			r.ttft, r.firstRecv = d, now
		}
		if perEvent != nil {
			perEvent.Add(d)
		}
		lastEmit = emit
		r.events++
	}
}

// doPlain sends one non-streamed request and reads the whole answer.
func (t *target) doPlain(ctx context.Context) (int, string) {
	req, err := t.newRequest(ctx, reqOpts{})
	if err != nil {
		return 0, "request: " + err.Error()
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, errKind(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp.StatusCode, errKind(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Sprintf("status %d", resp.StatusCode)
	}
	return resp.StatusCode, ""
}

// errKind names an error in a few words, so that errors can be counted by
// kind.
func errKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "deadline"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated"
	}
	s := err.Error()
	for _, k := range []string{"connection refused", "connection reset", "broken pipe", "timeout", "EOF", "too many open files"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// runResult is one run at one level against one target.
type runResult struct {
	target  string
	mode    string // "closed", "open-stream", "open-plain"
	level   int    // streams (closed loop) or requests/s (open loop)
	rep     int    // the repetition it belongs to (closed and plain phases; 0 elsewhere), for paired ratios
	elapsed time.Duration

	requests int            // started in the measured window
	done     int            // of those, completed without error
	errors   map[string]int // every request, warm-up included
	late     int            // open loop: started more than lateAfter behind schedule
	dropped  int            // open loop: could not start (every connection busy)

	ttft, end Dist // streams: added time; plain: latency
	// lat is an open loop's latencies, unsummarized (sorted), for a
	// caller that merges runs (abPair).
	lat       []time.Duration
	perEvent  Dist
	events    int64   // events received, whole run
	rate      float64 // completed requests per second in the window
	eventRate float64 // events per second, whole run

	cpu       time.Duration // relay CPU over the run
	sysCPU    time.Duration // of which in the kernel (stime)
	rssMax    int64         // relay's largest sampled RSS in the run
	cpuPerEvt time.Duration // cpu / events
	foreign   float64       // CPU other processes used on the relay core, as a share of the run
}

func (r *runResult) errCount() int {
	n := 0
	for _, v := range r.errors {
		n += v
	}
	return n
}

// closedLoop runs n virtual users against t: each opens its next stream
// when the last ends. Users start spread over ramp (one stream's length, so
// arrivals are even rather than in waves); streams started in the ramp are
// warm-up (each opens a connection) and only counted for errors and
// events. New streams start until ramp+window; the run then waits for the
// open ones, up to a hard limit.
func closedLoop(ctx context.Context, t *target, n int, ramp, window, hardLimit time.Duration) runResult {
	res := runResult{target: t.name, mode: "closed", level: n, errors: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, ramp+window+hardLimit)
	defer cancel()
	var hist Histogram
	var events atomic.Int64
	start := time.Now()
	measureFrom, stopAt := start.Add(ramp), start.Add(ramp+window)
	results := make([][]streamResult, n)
	users(ctx, n, ramp, start, stopAt, func(i int, now time.Time) {
		measured := !now.Before(measureFrom)
		var h *Histogram
		if measured {
			h = &hist
		}
		r := t.doStream(ctx, reqOpts{}, h)
		events.Add(int64(r.events))
		if measured || r.err != "" {
			if !measured {
				r.start = time.Time{} // an error of the warm-up
			}
			results[i] = append(results[i], r)
		}
	})
	res.elapsed = time.Since(start)
	var ttft, end []time.Duration
	for _, rs := range results {
		for _, r := range rs {
			if r.err != "" {
				res.errors[r.err]++
			}
			if r.start.IsZero() {
				continue
			}
			res.requests++
			if r.err == "" {
				res.done++
				ttft = append(ttft, r.ttft)
				end = append(end, r.end)
			}
		}
	}
	res.ttft, res.end = summarize(ttft), summarize(end)
	res.perEvent = histDist(&hist)
	res.events = events.Load()
	res.rate = float64(res.done) / window.Seconds()
	res.eventRate = float64(res.events) / res.elapsed.Seconds()
	return res
}

// users runs a closed loop's n virtual users: user i starts at
// i/n of the ramp after start and calls next (which opens one stream and
// returns when it ends) until stopAt or ctx's end; users returns when
// every user has.
func users(ctx context.Context, n int, ramp time.Duration, start, stopAt time.Time, next func(i int, now time.Time)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			delay := time.Duration(int64(ramp) * int64(i) / int64(n))
			select {
			case <-time.After(time.Until(start.Add(delay))):
			case <-ctx.Done():
				return
			}
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(stopAt) {
					return
				}
				next(i, now)
			}
		})
	}
	wg.Wait()
}

func histDist(h *Histogram) Dist {
	return Dist{
		N:    int(h.Count()),
		P50:  h.Quantile(0.5),
		P90:  h.Quantile(0.9),
		P99:  h.Quantile(0.99),
		P999: h.Quantile(0.999),
		Max:  h.Quantile(1),
	}
}

// lateAfter is how far behind its schedule an open-loop request may start
// before it counts as late.
const lateAfter = 5 * time.Millisecond

// openLoop sends requests at a fixed rate for window, whatever the answers
// do. Latency is taken from each request's scheduled time, so a stalled
// generator or relay shows as latency, not as a lower rate. A request that
// would exceed maxInFlight is dropped and counted. Streams report added
// TTFT (ttft) and added end (end); plain requests report latency (ttft).
func openLoop(ctx context.Context, t *target, rate int, stream bool, window, hardLimit time.Duration, maxInFlight int) runResult {
	mode := "open-plain"
	if stream {
		mode = "open-stream"
	}
	res := runResult{target: t.name, mode: mode, level: rate, errors: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, window+hardLimit)
	defer cancel()
	var hist Histogram
	var events atomic.Int64
	var inFlight atomic.Int64
	var mu sync.Mutex
	var lat, end []time.Duration
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	total := int(window / interval)
	start := time.Now()
	for i := 0; i < total && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if time.Since(due) > lateAfter {
			res.late++
		}
		if inFlight.Load() >= int64(maxInFlight) {
			res.dropped++
			continue
		}
		inFlight.Add(1)
		wg.Go(func() {
			defer inFlight.Add(-1)
			var l, e time.Duration
			var errS string
			if stream {
				r := t.doStream(ctx, reqOpts{}, &hist)
				events.Add(int64(r.events))
				// Added TTFT as the client saw it, plus any wait for a
				// start behind schedule.
				l, e, errS = r.ttft+r.start.Sub(due), r.end, r.err
			} else {
				_, errS = t.doPlain(ctx)
				l = time.Since(due)
			}
			mu.Lock()
			defer mu.Unlock()
			if errS != "" {
				res.errors[errS]++
				return
			}
			lat = append(lat, l)
			if stream {
				end = append(end, e)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.requests = total
	res.done = len(lat)
	res.ttft, res.end = summarize(lat), summarize(end)
	res.lat = lat
	res.perEvent = histDist(&hist)
	res.events = events.Load()
	res.rate = float64(res.done) / window.Seconds()
	res.eventRate = float64(res.events) / res.elapsed.Seconds()
	return res
}
