package main

import (
	"bytes"
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/llmgw/gateway/scripts/internal/stats"
)

// emitKey precedes the stub's emit time in every streamed chunk
// (stub.EmitField): the stub's wall clock in Unix nanoseconds.
var emitKey = []byte(`"stub_emit_ns":`)

// parseEmit finds the stub's emit time in one SSE data line with a byte
// scan: the field is the chunk's last, so the scan starts from the end. It
// reports false for a line without one ([DONE], an error event).
func parseEmit(line []byte) (int64, bool) {
	i := bytes.LastIndex(line, emitKey)
	if i < 0 {
		return 0, false
	}
	var n int64
	digits := 0
	for _, c := range line[i+len(emitKey):] {
		if c < '0' || c > '9' {
			break
		}
		if n > (math.MaxInt64-9)/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		digits++
	}
	return n, digits > 0
}

// quantile returns the nearest-rank q-quantile (0 < q ≤ 1) of sorted: the
// smallest value with at least q of the values at or below it. Zero for an
// empty slice.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Dist is a latency distribution's summary.
type Dist struct {
	N                        int
	P50, P90, P99, P999, Max time.Duration
	Mean                     time.Duration
}

// summarize sorts v in place and summarizes it.
func summarize(v []time.Duration) Dist {
	if len(v) == 0 {
		return Dist{}
	}
	slices.Sort(v)
	var sum time.Duration
	for _, d := range v {
		sum += d
	}
	return Dist{
		N:    len(v),
		P50:  quantile(v, 0.50),
		P90:  quantile(v, 0.90),
		P99:  quantile(v, 0.99),
		P999: quantile(v, 0.999),
		Max:  v[len(v)-1],
		Mean: sum / time.Duration(len(v)),
	}
}

// Histogram counts nanosecond values in log-linear buckets (64 per power of
// two, so a bucket is at most 1.6% wide); it takes a million per-event
// latencies a run without keeping them. Add is safe for concurrent use.
type Histogram struct {
	counts [histBuckets]atomic.Int64
	n      atomic.Int64
	max    atomic.Int64
}

const (
	histSubBits = 6
	histSub     = 1 << histSubBits
	histBuckets = (64 - histSubBits) * histSub
)

// bucketOf is v's bucket: exact below 128, then 64 buckets per doubling.
func bucketOf(v int64) int {
	if v < 2*histSub {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - histSubBits - 1 // v>>e is in [64, 128)
	return (e+1)*histSub + int(v>>e) - histSub
}

// bucketRange is the smallest and largest value in bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < 2*histSub {
		return int64(i), int64(i)
	}
	e := i/histSub - 1
	m := int64(i%histSub + histSub)
	return m << e, (m+1)<<e - 1
}

// Add counts one value (negative counts as 0).
func (h *Histogram) Add(v time.Duration) {
	ns := max(int64(v), 0)
	h.counts[bucketOf(ns)].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if ns <= m || h.max.CompareAndSwap(m, ns) {
			break
		}
	}
}

// Count is how many values were added.
func (h *Histogram) Count() int64 { return h.n.Load() }

// Quantile is the nearest-rank q-quantile, as the middle of its bucket
// (the exact maximum for q = 1).
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	if q >= 1 {
		return time.Duration(h.max.Load())
	}
	rank := max(int64(math.Ceil(q*float64(n))), 1)
	var seen int64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			lo, hi := bucketRange(i)
			return time.Duration(min(lo+(hi-lo)/2, h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

// median is stats.Median with NaN for an empty list (a phase that ran no
// repetition), so a report shows a gap rather than stopping.
func median(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	return stats.Median(v)
}
