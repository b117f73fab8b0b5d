package main

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// The per-event A/B: the gateway's CPU per relayed event
// against the floor's, each level's two figures taken over the same
// seconds. Run one after the other, as the closed loop runs them, the
// two sides of one repetition meet different states of a shared
// machine: on this project's two-core VMs a relay's CPU per event moved
// by ±25% between runs seconds apart, as much as the gap it measures.
// Here both relays run side by side on the relay core and the closed
// loop's users take turns between them: every user opens its next stream
// at whichever relay holds the current window, so the level (streams in
// flight) stays n throughout and a drift of the machine meets both
// within seconds of each other.

// abEventsMode is the runKey mode of the per-event A/B's runs.
const abEventsMode = "ab-events"

// abEventKinds are the two sides of the per-event A/B.
var abEventKinds = []string{"gateway", "floor"}

// abEventSlices is how many windows each side holds per level in one run
// of switchedLoop, in turns (A B A B: each side's load comes and goes the
// same number of times, so the streams of a turn, which meet fewer others
// in flight on their relay, weigh alike on both).
const abEventSlices = 2

// abEvents is one repetition of the per-event A/B: the gateway and the
// floor started side by side on the relay core (the first started
// alternating by repetition), then at each level a switched closed loop
// (switchedLoop: two runs, each side first in one) with each relay's CPU
// counted over both runs whole, its idle windows included, and divided
// by the events it relayed.
func (b *bench) abEvents(ctx context.Context, res *results, rep int) error {
	p := b.plan
	order := slices.Clone(abEventKinds)
	if rep%2 == 0 {
		slices.Reverse(order)
	}
	maxLevel := 0
	for _, l := range p.levels {
		maxLevel = max(maxLevel, l)
	}
	relays, stop, err := b.startSideBySide(ctx, order, maxLevel)
	defer stop()
	if err != nil {
		return err
	}
	tgts := make([]*target, len(relays))
	for i, r := range relays {
		tgts[i] = r.tgt
	}
	for _, n := range p.levels {
		if err := ctx.Err(); err != nil {
			return err
		}
		count := b.countSideBySide(relays)
		runs := switchedLoop(ctx, tgts, n, p.ramp, p.abEventWindow, abEventSlices, p.tail)
		if err := count.finish(runs, runs[0].elapsed); err != nil {
			return err
		}
		for i := range runs {
			run := &runs[i]
			run.rep = rep
			if run.events > 0 {
				run.cpuPerEvt = run.cpu / time.Duration(run.events)
			}
			res.add(*run)
			b.logf("rep %d a/b %-7s %5d streams, 2 runs of %d windows of %s each side: %d events, %d streams, %d errors %v, cpu %s/event, other load on relay core %.0f%%",
				rep, order[i], n, abEventSlices, p.abEventWindow, run.events, run.done, run.errCount(), run.errors, us(run.cpuPerEvt), run.foreign*100)
		}
	}
	return nil
}

// switchedLoop is closedLoop over two targets taking turns, run twice:
// n virtual users, each opening its next stream when the last ends, at
// the first side over the ramp and then at whichever target holds the
// current window (2·perSide windows of window each, in turns), ts[0]
// first in the one run and ts[1] in the other, so that each side has the
// ramp, the first window and the last once. No stream starts after a
// run's last window, and a run waits for its open ones up to hardLimit
// before the next begins. Each target's result counts the events it
// relayed over both runs whole (so CPU over them divides by them) and,
// for latency and completions, the streams it started after a ramp. At a
// turn the streams on the one side end while the other's begin, so n
// streams are in flight at every moment across the two.
func switchedLoop(ctx context.Context, ts []*target, n int, ramp, window time.Duration, perSide int, hardLimit time.Duration) []runResult {
	var acc switchAcc
	acc.events = make([]atomic.Int64, len(ts))
	for first := range 2 {
		acc.run(ctx, ts, n, ramp, window, perSide, first, hardLimit)
	}
	return acc.results(ts, n, time.Duration(2*perSide)*window)
}

// switchAcc gathers the runs of one switchedLoop.
type switchAcc struct {
	events  []atomic.Int64   // per target, whole runs
	streams [][]streamResult // per user per run: after the ramp, or failed
	sides   [][]int          // the target of each of streams
	elapsed time.Duration
}

// run is one run of switchedLoop, ts[first] holding the ramp.
func (a *switchAcc) run(ctx context.Context, ts []*target, n int, ramp, window time.Duration, perSide, first int, hardLimit time.Duration) {
	windows := 2 * perSide
	total := ramp + time.Duration(windows)*window
	ctx, cancel := context.WithTimeout(ctx, total+hardLimit)
	defer cancel()
	start := time.Now()
	measureFrom, stopAt := start.Add(ramp), start.Add(total)
	owner := func(now time.Time) int {
		k := 0
		if !now.Before(measureFrom) {
			k = min(int(now.Sub(measureFrom)/window), windows-1)
		}
		return (first + k) % 2
	}
	streams := make([][]streamResult, n)
	sides := make([][]int, n)
	users(ctx, n, ramp, start, stopAt, func(i int, now time.Time) {
		side := owner(now)
		r := ts[side].doStream(ctx, reqOpts{}, nil)
		a.events[side].Add(int64(r.events))
		if measured := !now.Before(measureFrom); measured || r.err != "" {
			if !measured {
				r.start = time.Time{} // an error of the warm-up
			}
			streams[i] = append(streams[i], r)
			sides[i] = append(sides[i], side)
		}
	})
	a.elapsed += time.Since(start)
	a.streams = append(a.streams, streams...)
	a.sides = append(a.sides, sides...)
}

// results is each target's runResult; held is how long each side held
// the load over the runs, for its rate.
func (a *switchAcc) results(ts []*target, n int, held time.Duration) []runResult {
	out := make([]runResult, len(ts))
	ttft := make([][]time.Duration, len(ts))
	end := make([][]time.Duration, len(ts))
	for s, t := range ts {
		out[s] = runResult{target: t.name, mode: abEventsMode, level: n, errors: map[string]int{}, elapsed: a.elapsed, events: a.events[s].Load()}
	}
	for i, rs := range a.streams {
		for j, r := range rs {
			side := a.sides[i][j]
			o := &out[side]
			if r.err != "" {
				o.errors[r.err]++
			}
			if r.start.IsZero() {
				continue
			}
			o.requests++
			if r.err == "" {
				o.done++
				ttft[side] = append(ttft[side], r.ttft)
				end[side] = append(end[side], r.end)
			}
		}
	}
	for s := range out {
		out[s].ttft, out[s].end = summarize(ttft[s]), summarize(end[s])
		out[s].rate = float64(out[s].done) / held.Seconds()
		out[s].eventRate = float64(out[s].events) / a.elapsed.Seconds()
	}
	return out
}
