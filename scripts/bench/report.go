package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// report renders results as BENCHMARKS.md and as a console summary.
type report struct {
	res     *results
	machine []string // "key: value" lines
	verdict []verdictRow
	carry   string
}

type verdictRow struct {
	target, measured string
	pass             bool
	na               bool // not measured in this mode
}

func newReport(res *results, root string) *report {
	r := &report{res: res}
	r.machine = machineInfo(root, res)
	r.verdict = r.verdicts()
	r.carry = r.carried()
	return r
}

func machineInfo(root string, res *results) []string {
	host, _ := os.Hostname()
	cpuModel := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "unknown"
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	load := "unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	commit := "unknown"
	if out, err := gitOut(root, "rev-parse", "--short=12", "HEAD"); err == nil {
		commit = out
		if st, err := gitOut(root, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
			commit += " (working tree has uncommitted changes)"
		}
	}
	return []string{
		"Machine: " + host + ", Linux " + kernel + ", " + runtime.GOARCH,
		"CPU: " + cpuModel + ", " + fmt.Sprint(res.cpus.total) + " CPUs usable",
		"Placement: " + res.cpus.describe(),
		"Go: " + runtime.Version(),
		"Load average at the end of the run (1, 5, 15 min): " + load,
		"Date: " + time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		"Commit: " + commit,
		fmt.Sprintf("Mode: %s (%d repetitions per level, %s ramp + %s measured window per run; whole bench %.0f s)",
			res.plan.name, res.plan.reps, res.plan.ramp, res.plan.window, res.elapsed.Seconds()),
	}
}

func gitOut(root string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// Target bounds, from the issue.
const (
	p50Slack      = time.Millisecond
	p99Ratio      = 1.5
	ceilingRatio  = 0.7
	idleRSSMax    = 20 << 20
	loadedRSSMax  = 64 << 20
	coldEventMax  = 20 * time.Millisecond
	coldHealthMax = 10 * time.Millisecond
	carryP99      = 10 * time.Millisecond
)

func (r *report) closed(target string, level int) []runResult {
	return r.res.runs[runKey{target, "closed", level}]
}

func ttftP50(x runResult) float64 { return x.ttft.P50.Seconds() * 1000 }
func ttftP99(x runResult) float64 { return x.ttft.P99.Seconds() * 1000 }
func cpuEvt(x runResult) float64  { return float64(x.cpuPerEvt.Nanoseconds()) / 1000 }
func rssMiB(x runResult) float64  { return float64(x.rssMax) / (1 << 20) }

func (r *report) verdicts() []verdictRow {
	res := r.res
	var rows []verdictRow
	var p50s, p99s, cpus []string
	p50ok, p99ok, cpuok, anyHeld := true, true, true, false
	for _, n := range res.plan.levels {
		if ok, _ := res.held(n); !ok {
			continue
		}
		anyHeld = true
		if !clean(r.closed("gateway", n)) || !clean(r.closed("floor", n)) {
			p50ok, p99ok, cpuok = false, false, false
			p50s = append(p50s, fmt.Sprintf("%d: errors or no streams", n))
			continue
		}
		g50, _, _ := medianOf(r.closed("gateway", n), ttftP50)
		f50, _, _ := medianOf(r.closed("floor", n), ttftP50)
		g99, _, _ := medianOf(r.closed("gateway", n), ttftP99)
		f99, _, _ := medianOf(r.closed("floor", n), ttftP99)
		gc, _, _ := medianOf(r.closed("gateway", n), cpuEvt)
		fc, _, _ := medianOf(r.closed("floor", n), cpuEvt)
		p50ok = p50ok && g50-f50 <= float64(p50Slack.Milliseconds())
		p99ok = p99ok && g99 <= p99Ratio*f99
		cpuok = cpuok && gc <= fc
		p50s = append(p50s, fmt.Sprintf("%d: %+.2f ms", n, g50-f50))
		p99s = append(p99s, fmt.Sprintf("%d: %.2f×", n, g99/f99))
		cpus = append(cpus, fmt.Sprintf("%d: %.1f vs %.1f µs", n, gc, fc))
	}
	held := "levels held: none"
	if anyHeld {
		held = ""
	}
	rows = append(rows,
		verdictRow{"added TTFT p50 within 1 ms of the floor's, every level held", orNone(p50s, held), p50ok && anyHeld, !anyHeld},
		verdictRow{"added TTFT p99 ≤ 1.5× the floor's, every level held", orNone(p99s, held), p99ok && anyHeld, !anyHeld},
		verdictRow{"CPU per relayed event ≤ the floor's, every level held", orNone(cpus, held), cpuok && anyHeld, !anyHeld})

	if g, ok := res.ceiling["gateway"]; ok {
		f := res.ceiling["floor"]
		ratio := math.NaN()
		if f.best > 0 {
			ratio = float64(g.best) / float64(f.best)
		}
		rows = append(rows, verdictRow{"non-streaming ceiling ≥ 0.7× the floor's",
			fmt.Sprintf("%d vs %d req/s (%.2f×)", g.best, f.best, ratio), ratio >= ceilingRatio, false})
	} else {
		rows = append(rows, verdictRow{target: "non-streaming ceiling ≥ 0.7× the floor's", measured: "not measured by -quick (make bench-full)", na: true})
	}

	idle := slices.Max(append([]int64{0}, res.idleRSS["gateway"]...))
	rows = append(rows, verdictRow{"idle RSS ≤ 20 MiB", mib(idle) + " (largest of every start)", idle > 0 && idle <= idleRSSMax, idle == 0})
	top := slices.Max(res.plan.levels)
	var loaded int64
	for _, x := range r.closed("gateway", top) {
		loaded = max(loaded, x.rssMax)
	}
	rows = append(rows, verdictRow{"RSS ≤ 64 MiB at the highest stream level",
		fmt.Sprintf("%s at %d streams (largest sample of every repetition)", mib(loaded), top), loaded > 0 && loaded <= loadedRSSMax, loaded == 0})

	ce, ch := medianDur(res.coldEvent), medianDur(res.coldHealthy)
	rows = append(rows,
		verdictRow{"cold start exec → first proxied event (stub TTFT 0) ≤ 20 ms", ms(ce) + fmt.Sprintf(" median of %d", len(res.coldEvent)), ce > 0 && ce <= coldEventMax, len(res.coldEvent) == 0},
		verdictRow{"cold start exec → healthy ≤ 10 ms", ms(ch) + fmt.Sprintf(" median of %d", len(res.coldHealthy)), ch > 0 && ch <= coldHealthMax, len(res.coldHealthy) == 0})

	n, kinds := res.errorsOf("gateway")
	rows = append(rows, verdictRow{"zero errors through the gateway", fmt.Sprintf("%d %s", n, kindsString(kinds)), n == 0, false})
	return rows
}

// clean reports whether every run completed streams without error.
func clean(runs []runResult) bool {
	for _, x := range runs {
		if x.errCount() > 0 || x.done == 0 {
			return false
		}
	}
	return len(runs) > 0
}

func orNone(v []string, none string) string {
	if len(v) == 0 {
		return none
	}
	return strings.Join(v, "; ")
}

func kindsString(k map[string]int) string {
	if len(k) == 0 {
		return ""
	}
	keys := make([]string, 0, len(k))
	for e := range k {
		keys = append(keys, e)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, e := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", e, k[e])
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// noisyShare is the share of the relay core other processes may take
// during a run before the report warns.
const noisyShare = 0.10

// worstForeign is the largest share of the relay core other processes took
// during a gateway or floor run.
func (r *report) worstForeign() float64 {
	worst := 0.0
	for k, runs := range r.res.runs {
		if k.target == "direct" {
			continue
		}
		for _, x := range runs {
			worst = max(worst, x.foreign)
		}
	}
	return worst
}

// carried answers: how many streams does one core carry with p99 added
// TTFT under 10 ms?
func (r *report) carried() string {
	best := 0
	for _, n := range r.res.plan.levels {
		g99, _, _ := medianOf(r.closed("gateway", n), ttftP99)
		ok, _ := r.res.held(n)
		errs := 0
		for _, x := range r.closed("gateway", n) {
			errs += x.errCount()
		}
		if ok && errs == 0 && g99 < float64(carryP99.Milliseconds()) {
			best = max(best, n)
		}
	}
	top := slices.Max(r.res.plan.levels)
	switch {
	case best == 0:
		return "No measured level kept the gateway's p99 added TTFT under 10 ms (on a level this machine held)."
	case best == top:
		return fmt.Sprintf("One core carries at least %d concurrent streams (the highest level measured) with p99 added TTFT under 10 ms.", best)
	}
	return fmt.Sprintf("One core carries %d concurrent streams with p99 added TTFT under 10 ms (the highest such level measured).", best)
}

func passMark(v verdictRow) string {
	switch {
	case v.na:
		return "n/a"
	case v.pass:
		return "**pass**"
	}
	return "**MISS**"
}

// cell is "median (min–max)" of f over runs, in the unit format.
func cell(runs []runResult, f func(runResult) float64, format string) string {
	if len(runs) == 0 {
		return "—"
	}
	m, lo, hi := medianOf(runs, f)
	if len(runs) == 1 || lo == hi {
		return fmt.Sprintf(format, m)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", m, lo, hi)
}

func medOnly(runs []runResult, f func(runResult) float64, format string) string {
	if len(runs) == 0 {
		return "—"
	}
	m, _, _ := medianOf(runs, f)
	return fmt.Sprintf(format, m)
}

func errSum(runs []runResult) string {
	n, kinds := 0, map[string]int{}
	for _, x := range runs {
		for e, c := range x.errors {
			n += c
			kinds[e] += c
		}
	}
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d %s", n, kindsString(kinds))
}

func dms(sel func(runResult) time.Duration) func(runResult) float64 {
	return func(x runResult) float64 { return sel(x).Seconds() * 1000 }
}

func (r *report) markdown(pngs []string, plotDir string) string {
	res := r.res
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("<!-- Generated by `make bench` (go run ./scripts/bench -quick) or `make bench-full` (go run ./scripts/bench -full); do not edit by hand. -->\n")
	w("# Benchmarks: the gateway on one core, against a zero-logic floor\n\n")
	w("Generated by `make bench` / `make bench-full` (scripts/bench). Re-run it to reproduce; every figure below was measured by that run unless it says otherwise.\n\n")
	for _, m := range r.machine {
		w("- %s\n", m)
	}
	w("\n")
	w("**What runs.** The relay under test is alone on one core with GOMAXPROCS=1: the gateway (`bin/gateway` as `make build` builds it, JWT auth with a real RS256 token from the dev issuer, tenant table, go-limiter memory bucket (huge, so every request takes from it and none is refused), routing, rewrite, usage counting; `log_level: warn`, so its one-line-per-request access log is off and does not dominate), or the **floor** (`scripts/relayfloor`: `httputil.ReverseProxy`, FlushInterval −1, keep-alive pool of 4096, no compression: no logic at all). **Direct** is the same load straight at the stub with no relay: the load generator's and stub's own floor on this machine. The stub (`scripts/cmd/stub`) streams 128 tokens per request, 90 ms to the first and 14 ms apart, and stamps `stub_emit_ns` in every chunk; the load generator is this program.\n\n")
	w("**Figures.** *Added TTFT* = client receipt of the first `data:` event − the stub's `stub_emit_ns` in it; *added end* = receipt of `[DONE]` − the last stamp; *per event* = the same for every event. Only streams started after the ramp (one stream's length, over which the virtual users start) count; errors count always. Each cell is the median of the repetitions, with min–max. CPU per event = the relay's utime+stime (/proc/PID/stat) over the run ÷ events the client received; RSS is the largest 2 Hz sample of VmRSS. *Other load on relay core* is the relay core's busy time (/proc/stat) less the relay's own, as a share of the run: CPU that other processes on this machine (tests, builds) took from the relay while it was measured; tail figures of runs with much of it are the machine's, not the relay's.\n\n")

	w("## Targets\n\n| target | measured | |\n| --- | --- | --- |\n")
	for _, v := range r.verdict {
		w("| %s | %s | %s |\n", v.target, v.measured, passMark(v))
	}
	w("\n**Streams per core:** %s\n\n", r.carry)
	if worst := r.worstForeign(); worst > noisyShare {
		w("**Noise warning:** other processes on this machine took up to %.0f%% of the relay core while a relay was measured (column *other load on relay core*); latency tails of those runs are the machine's as much as the relay's. Re-run `make bench` on a quiet machine before quoting them.\n\n", worst*100)
	}

	w("## Streaming, closed loop\n\nN virtual users; each opens its next stream when the last ends.\n\n")
	w("| streams | relay | added TTFT p50 | p90 | p99 | p99.9 | max | added end p50 | end p99 | per-event p99 | streams/s | events/s | errors | CPU/event | RSS max | other load on relay core |\n")
	w("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n")
	for _, n := range res.plan.levels {
		for _, t := range targetOrder {
			runs := r.closed(t, n)
			cpu, rss := "—", "—"
			if t != "direct" {
				cpu = medOnly(runs, cpuEvt, "%.1f µs")
				rss = medOnly(runs, rssMiB, "%.1f MiB")
			}
			w("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, t,
				cell(runs, ttftP50, "%.2f"), medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.P90 }), "%.2f"),
				cell(runs, ttftP99, "%.2f"), medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.P999 }), "%.2f"),
				medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.Max }), "%.1f"),
				medOnly(runs, dms(func(x runResult) time.Duration { return x.end.P50 }), "%.2f"),
				medOnly(runs, dms(func(x runResult) time.Duration { return x.end.P99 }), "%.2f"),
				medOnly(runs, dms(func(x runResult) time.Duration { return x.perEvent.P99 }), "%.2f"),
				medOnly(runs, func(x runResult) float64 { return x.rate }, "%.0f"),
				medOnly(runs, func(x runResult) float64 { return x.eventRate }, "%.0f"),
				errSum(runs), cpu, rss, medOnly(runs, func(x runResult) float64 { return x.foreign * 100 }, "%.0f%%"))
		}
		if ok, why := res.held(n); !ok {
			w("| %d | | *not held cleanly by this machine: %s* | | | | | | | | | | | | | |\n", n, why)
		}
	}
	w("\nTimes in ms. Samples per cell (streams after the ramp, per repetition): ")
	var counts []string
	for _, n := range res.plan.levels {
		if runs := r.closed("gateway", n); len(runs) > 0 {
			counts = append(counts, fmt.Sprintf("%d streams: ~%d", n, runs[0].ttft.N))
		}
	}
	w("%s. A p99.9 from fewer than 1,000 samples is close to the max.\n\n", strings.Join(counts, ", "))

	w("### Gateway as a ratio to the floor\n\n| streams | TTFT p50 | TTFT p99 | added end p99 | CPU/event | RSS max |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range res.plan.levels {
		g, f := r.closed("gateway", n), r.closed("floor", n)
		ratio := func(fn func(runResult) float64) string {
			a, _, _ := medianOf(g, fn)
			c, _, _ := medianOf(f, fn)
			if c == 0 || math.IsNaN(a) || math.IsNaN(c) {
				return "—"
			}
			return fmt.Sprintf("%.2f×", a/c)
		}
		w("| %d | %s | %s | %s | %s | %s |\n", n, ratio(ttftP50), ratio(ttftP99),
			ratio(dms(func(x runResult) time.Duration { return x.end.P99 })), ratio(cpuEvt), ratio(rssMiB))
	}
	w("\n")
	for _, p := range pngs {
		w("![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), path.Join(plotDir, p))
	}

	if len(res.plan.openStreamRates) > 0 {
		w("## Streaming, open loop\n\nStreams start at a fixed rate whatever the answers do; latency counts from the scheduled start. *Late* = started more than %s behind schedule; *dropped* = could not start (every connection busy).\n\n", lateAfter)
		w("| streams/s | relay | added TTFT p50 | p99 | p99.9 | added end p99 | late | dropped | errors | CPU/event | RSS max |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n")
		for _, rate := range res.plan.openStreamRates {
			for _, t := range targetOrder {
				runs := res.runs[runKey{t, "open-stream", rate}]
				if len(runs) == 0 {
					continue
				}
				x := runs[0]
				cpu, rss := "—", "—"
				if t != "direct" {
					cpu, rss = us(x.cpuPerEvt), mib(x.rssMax)
				}
				w("| %d | %s | %.2f | %.2f | %.2f | %.2f | %d | %d | %s | %s | %s |\n", rate, t, ttftP50(x), ttftP99(x),
					x.ttft.P999.Seconds()*1000, x.end.P99.Seconds()*1000, x.late, x.dropped, errSum(runs), cpu, rss)
			}
		}
		w("\n")
	}

	w("## Non-streaming, open loop at %d req/s\n\nSmall JSON answers (the stub answers at once, so latency through a relay is its added latency).\n\n", res.plan.fixedRate)
	w("| relay | latency p50 | p90 | p99 | p99.9 | max | achieved req/s | late | errors | CPU/request | RSS max | other load on relay core |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n")
	for _, t := range targetOrder {
		runs := res.runs[runKey{t, "open-plain", res.plan.fixedRate}]
		if len(runs) == 0 {
			continue
		}
		cpu, rss := "—", "—"
		if t != "direct" {
			cpu = medOnly(runs, func(x runResult) float64 {
				if x.done == 0 {
					return 0
				}
				return float64(x.cpu.Nanoseconds()) / 1000 / float64(x.done)
			}, "%.1f µs")
			rss = medOnly(runs, rssMiB, "%.1f MiB")
		}
		w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", t,
			cell(runs, ttftP50, "%.2f"), medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.P90 }), "%.2f"),
			cell(runs, ttftP99, "%.2f"), medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.P999 }), "%.2f"),
			medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.Max }), "%.1f"),
			medOnly(runs, func(x runResult) float64 { return x.rate }, "%.0f"),
			medOnly(runs, func(x runResult) float64 { return float64(x.late) }, "%.0f"),
			errSum(runs), cpu, rss, medOnly(runs, func(x runResult) float64 { return x.foreign * 100 }, "%.0f%%"))
	}
	w("\nTimes in ms; %d repetition(s) of %s.\n\n", res.plan.fixedReps, res.plan.fixedWindow)

	w("## Non-streaming ceiling\n\n")
	if len(res.ceiling) == 0 {
		w("Not measured by `make bench` (-quick); `make bench-full` climbs a ladder of rates.\n\n")
	} else {
		w("Highest open-loop rate with p99 latency < %s, no errors and ≤ 1%% of requests late or dropped (ladder of %s runs; it stops at the first rate that fails).\n\n", ms(ceilingP99), res.plan.ceilingWindow)
		w("| relay | ceiling | ratio to floor | first failing rate |\n| --- | ---: | ---: | --- |\n")
		fl := res.ceiling["floor"].best
		for _, t := range targetOrder {
			c, ok := res.ceiling[t]
			if !ok {
				continue
			}
			fail := "none (top of the ladder)"
			if last := c.runs[len(c.runs)-1]; !passesCeiling(last) {
				fail = fmt.Sprintf("%d req/s: p99 %s, %d late, %d dropped, %s errors", last.level, ms(last.ttft.P99), last.late, last.dropped, errSum([]runResult{last}))
			}
			ratio := "—"
			if fl > 0 {
				ratio = fmt.Sprintf("%.2f×", float64(c.best)/float64(fl))
			}
			w("| %s | %d req/s | %s | %s |\n", t, c.best, ratio, fail)
		}
		w("\nThe direct ceiling is the load generator's and stub's own on this machine: a relay's ceiling at or near it is bounded by the harness, not the relay.\n\n")
	}

	w("## Memory, start-up, size\n\n| | gateway | floor |\n| --- | ---: | ---: |\n")
	idle := func(t string) string {
		v := res.idleRSS[t]
		if len(v) == 0 {
			return "—"
		}
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x) / (1 << 20)
		}
		m, lo, hi := median(f)
		return fmt.Sprintf("%.1f MiB (%.1f–%.1f)", m, lo, hi)
	}
	w("| idle RSS after start (median of %d starts) | %s | %s |\n", len(res.idleRSS["gateway"]), idle("gateway"), idle("floor"))
	for _, n := range res.plan.levels {
		w("| RSS max at %d streams | %s | %s |\n", n, cell(r.closed("gateway", n), rssMiB, "%.1f MiB"), cell(r.closed("floor", n), rssMiB, "%.1f MiB"))
	}
	w("| RSS max at %d req/s (non-streaming) | %s | %s |\n", res.plan.fixedRate,
		cell(res.runs[runKey{"gateway", "open-plain", res.plan.fixedRate}], rssMiB, "%.1f MiB"),
		cell(res.runs[runKey{"floor", "open-plain", res.plan.fixedRate}], rssMiB, "%.1f MiB"))
	w("\n| cold start (gateway, %d fresh processes each) | median | min | max |\n| --- | ---: | ---: | ---: |\n", len(res.coldEvent))
	for _, c := range []struct {
		name string
		v    []time.Duration
	}{{"exec → first 200 on /healthz", res.coldHealthy}, {"exec → first proxied streamed event (X-Stub-TTFT: 0s)", res.coldEvent}} {
		if len(c.v) == 0 {
			continue
		}
		w("| %s | %s | %s | %s |\n", c.name, ms(medianDur(c.v)), ms(slices.Min(c.v)), ms(slices.Max(c.v)))
	}
	if len(res.coldErrors) > 0 {
		w("\nAnswers other than success or a refused connection while the process started: %s.\n", kindsString(res.coldErrors))
	}
	w("\nCold start is timed from just before the fork of the binary (pinned to the relay core) to the client's receipt; the first proxied event includes the JWKS fetch from the dev issuer (`jwks_url` set, no OIDC discovery) and the first connection to the stub.\n\n")
	w("Binary: `bin/gateway` %s (%d bytes; `-tags lambda.norpc -trimpath -ldflags='-s -w'`, CGO off).", mib(res.binSize), res.binSize)
	if res.imageSize > 0 {
		w(" Image: %s (%s).", mib(res.imageSize), res.imageNote)
	} else {
		w(" Image: %s.", res.imageNote)
	}
	w("\n\n")

	w("## Published figures (published, not re-measured)\n\nFrom the write-up this gateway answers; 4 vCPU pod unless said. Not measured here, on different hardware: for orientation only.\n\n")
	w("| published, not re-measured | .NET 9 | Node 22, 1 process | Node 22, cluster ×4 |\n| --- | --- | --- | --- |\n")
	w("| added TTFT at 1,500 streams, p50 / p99 | 18 / 46 ms | 22 / 69 ms | — |\n")
	w("| added latency at 3,000 req/s, p50 / p99 / p99.9 | 1.6 / 6.8 / 18.2 ms | 2.4 / 14.9 / 46.3 ms | 2.1 / 9.7 / 23.5 ms |\n")
	w("| highest rate with p99 added < 25 ms | 11,200 req/s | 3,100 req/s | 6,400 req/s |\n")
	w("| RSS at 3,000 req/s | 212 MB | 168 MB | 632 MB (4 processes) |\n")
	w("| cold start to first successful request | 640 ms (310 ms ReadyToRun) | 180 ms | — |\n\n")
	w("The comparable rows measured above: added TTFT at the highest stream level, the %d req/s table, the ceiling (full run), RSS at %d req/s, and cold start to the first proxied event — this gateway on **one** core, not four.\n", res.plan.fixedRate, res.plan.fixedRate)
	return b.String()
}

// summary is the console version: targets and the headline table.
func (r *report) summary() string {
	var b strings.Builder
	fmt.Fprintln(&b, "\n== targets ==")
	for _, v := range r.verdict {
		fmt.Fprintf(&b, "%-6s %s: %s\n", strings.Trim(passMark(v), "*"), v.target, v.measured)
	}
	fmt.Fprintln(&b, r.carry)
	if worst := r.worstForeign(); worst > noisyShare {
		fmt.Fprintf(&b, "NOISE: other processes took up to %.0f%% of the relay core during relay runs; re-run on a quiet machine\n", worst*100)
	}
	fmt.Fprintln(&b, "\n== added TTFT, median of repetitions (ms) ==")
	fmt.Fprintf(&b, "%7s %-8s %8s %8s %8s %10s %8s\n", "streams", "relay", "p50", "p99", "end p99", "CPU/event", "RSS")
	for _, n := range r.res.plan.levels {
		for _, t := range targetOrder {
			runs := r.closed(t, n)
			if len(runs) == 0 {
				continue
			}
			a, _, _ := medianOf(runs, ttftP50)
			c, _, _ := medianOf(runs, ttftP99)
			e, _, _ := medianOf(runs, dms(func(x runResult) time.Duration { return x.end.P99 }))
			cpu, _, _ := medianOf(runs, cpuEvt)
			rss, _, _ := medianOf(runs, rssMiB)
			fmt.Fprintf(&b, "%7d %-8s %8.2f %8.2f %8.2f %8.1fµs %6.1fMiB\n", n, t, a, c, e, cpu, rss)
		}
	}
	return b.String()
}
