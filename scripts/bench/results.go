package main

import (
	"fmt"
	"github.com/llmgw/gateway/scripts/binsize"
	"math"
	"time"
)

// runKey names a set of repetitions: one target, one mode, one level.
type runKey struct {
	target string
	mode   string
	level  int
}

// ceilingResult is the non-streaming rate ladder of one target.
type ceilingResult struct {
	target string
	runs   []runResult
	best   int // highest rate that passed; 0 when none did
}

// results is everything one invocation measured.
type results struct {
	plan    plan
	cpus    cpuPlan
	nginx   nginxPeer
	targets []string // what ran, in table order
	legs    []string // backend legs of the closed-loop and syscall phases

	// backendProto is what each relay spoke to the stub on each leg, as
	// the stub counted it (protocolOf).
	backendProto map[legKey]string
	gatewayFrom  string // where the gateway under test came from

	// telemetry: the plain phase measured telemetryKind beside the
	// gateway; sink is what its exports brought the sink, sampler the
	// sampler it ran with (samplerName).
	telemetry bool
	sink      sinkCounts
	sampler   string

	syscalls []syscallRun
	tracer   string // how syscalls were counted

	runs        map[runKey][]runResult
	idleRSS     map[string][]int64
	ceiling     map[string]ceilingResult
	coldHealthy []time.Duration
	coldEvent   []time.Duration
	coldErrors  map[string]int

	neighbours []neighbourRun // the neighbour phase, in order

	binSize, imageSize int64
	imageNote          string
	deps               *binsize.Report // the working tree's gateway, by module
	depsErr            error
	elapsed            time.Duration
}

func newResults(p plan, c cpuPlan) *results {
	return &results{
		plan: p, cpus: c,
		runs:       map[runKey][]runResult{},
		idleRSS:    map[string][]int64{},
		ceiling:    map[string]ceilingResult{},
		coldErrors: map[string]int{},

		backendProto: map[legKey]string{},
	}
}

func (r *results) add(run runResult) {
	k := runKey{run.target, run.mode, run.level}
	r.runs[k] = append(r.runs[k], run)
}

// medianOf is the median of f over runs, with its min and max.
func medianOf(runs []runResult, f func(runResult) float64) (med, lo, hi float64) {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return median(v)
}

// held reports whether the machine holds a closed-loop level cleanly: the
// direct run (load generator + stub, no relay) had no errors in any
// repetition, and its median p99 added TTFT stayed within the plan's bound
// (the median, as every figure: one repetition hit by other load on a
// shared machine does not disqualify a level).
func (r *results) held(level int) (bool, string) {
	runs := r.runs[runKey{"direct", "closed", level}]
	if len(runs) == 0 {
		return false, "no direct run"
	}
	for _, d := range runs {
		if n := d.errCount(); n > 0 {
			return false, fmt.Sprintf("direct run had %d errors", n)
		}
	}
	if m, _, _ := medianOf(runs, func(x runResult) float64 { return float64(x.ttft.P99) }); time.Duration(m) > r.plan.cleanP99 {
		return false, fmt.Sprintf("direct run p99 added TTFT %s > %s", ms(time.Duration(m)), ms(r.plan.cleanP99))
	}
	return true, ""
}

// errorsOf counts the errors of target over every run.
func (r *results) errorsOf(target string) (int, map[string]int) {
	n, kinds := 0, map[string]int{}
	for k, runs := range r.runs {
		if k.target != target {
			continue
		}
		for _, run := range runs {
			for e, c := range run.errors {
				n += c
				kinds[e] += c
			}
		}
	}
	for _, c := range r.ceiling {
		if c.target != target {
			continue
		}
		for _, run := range c.runs {
			if !passesCeiling(run) {
				continue // the failing top rung is where the ladder stops, not an error of the relay
			}
			for e, c := range run.errors {
				n += c
				kinds[e] += c
			}
		}
	}
	return n, kinds
}

func medianDur(v []time.Duration) time.Duration {
	f := make([]float64, len(v))
	for i, d := range v {
		f[i] = float64(d)
	}
	m, _, _ := median(f)
	if math.IsNaN(m) {
		return 0
	}
	return time.Duration(m)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1000) }
func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d.Nanoseconds())/1000) }
func mib(b int64) string        { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
