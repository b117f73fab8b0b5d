package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// The interleaved A/B targets: telemetry on costs a
// non-streaming request at most 5% more CPU than off, and the gateway's
// CPU per relayed event is within 5% of the floor's at each level, each
// as the median of at least minABReps per-repetition ratios.
const (
	abRatioMax = 1.05
	minABReps  = 3
	// abErrorShare is the share of a run's requests that may fail and
	// its CPU still count: the floor cuts about one stream in 3,000 short
	// (the client reads a truncated body) when it shares the core in the
	// per-event A/B, which says nothing of its CPU per event but dropped
	// most repetitions at 500 streams. Errors are reported apart: the
	// gateway's, in the targets, must be zero.
	abErrorShare = 0.001
)

// abRow is one row of the A/B targets table.
type abRow struct {
	Target   string // what is compared, and its bound
	Measured string // each side's median
	Ratios   string // the per-repetition ratios, in repetition order
	Ratio    string // their median
	Beside   string // peers, allocations, what the sink received
	Other    string // other load on the relay core over the row's runs
	Mark     string
}

// pairedRatios pairs num's and den's runs by repetition and returns
// f(num) ÷ f(den) for every repetition both sides ran cleanly (errors on
// at most abErrorShare of the requests, requests completed, f positive
// and finite), in repetition order. A
// ratio within one repetition compares two runs that met the same state
// of the machine; the median of such ratios is what the targets are set
// on, not the ratio of two medians taken over different moments.
func pairedRatios(num, den []runResult, f func(runResult) float64) []float64 {
	usable := func(x runResult) (float64, bool) {
		v := f(x)
		clean := float64(x.errCount()) <= abErrorShare*float64(x.requests)
		return v, clean && x.done > 0 && v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v)
	}
	byRep := map[int]float64{}
	for _, d := range den {
		if v, ok := usable(d); ok {
			byRep[d.rep] = v
		}
	}
	var out []float64
	for _, n := range slices.SortedFunc(slices.Values(num), func(a, b runResult) int { return a.rep - b.rep }) {
		v, ok := usable(n)
		dv, paired := byRep[n.rep]
		if ok && paired {
			out = append(out, v/dv)
			delete(byRep, n.rep) // one pair per repetition
		}
	}
	return out
}

// ratioVerdict is a target's median ratio and mark from its
// per-repetition ratios: n/a below minABReps of them, else pass when the
// median is at most bound. With other load on the relay core above
// noisyShare the mark keeps "(noisy)" beside it: the figure is the
// machine's as much as the relay's.
func ratioVerdict(ratios []float64, bound float64, noisy bool) (med float64, mark string) {
	med, _, _ = median(ratios)
	if len(ratios) < minABReps {
		return med, "n/a"
	}
	mark = "**MISS**"
	if med <= bound {
		mark = "**pass**"
	}
	if noisy {
		mark += " (noisy)"
	}
	return med, mark
}

// ratioList is the per-repetition ratios as the table shows them.
func ratioList(v []float64) string {
	if len(v) == 0 {
		return "—"
	}
	s := make([]string, len(v))
	for i, r := range v {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, ", ")
}

// otherLoad is the other load on the relay core over runs: the median
// and the largest share, and whether the largest is above noisyShare.
func otherLoad(runs ...[]runResult) (string, bool) {
	var v []float64
	for _, rs := range runs {
		for _, x := range rs {
			v = append(v, x.foreign*100)
		}
	}
	if len(v) == 0 {
		return "—", false
	}
	m, _, hi := median(v)
	return fmt.Sprintf("%.0f%% (max %.0f%%)", m, hi), hi > noisyShare*100
}

// saturated counts the open-loop runs that fell behind their rate: more
// than 1% of requests late or dropped, or under 98% of the rate
// achieved. A relay at its core's limit batches its reads and writes
// (fewer system calls per request), so its CPU per request is not the
// same measure as an unsaturated run's.
func saturated(runs ...[]runResult) int {
	n := 0
	for _, rs := range runs {
		for _, x := range rs {
			if x.late+x.dropped > x.requests/100 || x.rate < 0.98*float64(x.level) {
				n++
			}
		}
	}
	return n
}

// cpuReq is a run's relay CPU per completed request, in µs.
func cpuReq(x runResult) float64 { return float64(perRequest(x).Nanoseconds()) / 1000 }

// abTargets is the A/B targets table: telemetry on ÷ off per non-streaming
// request, gateway ÷ floor per event at each closed-loop level (nginx
// beside it), and the machine's noise over the runs they use. allocLink
// is where the allocations per request are (the bench cannot see inside
// the gateway's process).
func (r *report) abTargets(allocLink string) []abRow {
	res := r.res
	var rows []abRow
	var all [][]runResult

	plainRuns := func(t string) []runResult { return res.runs[runKey{t, "open-plain", res.plan.abRate}] }
	on, off := plainRuns(telemetryKind), plainRuns("gateway")
	target := fmt.Sprintf("CPU per non-streaming request (%d req/s), telemetry on ÷ off, ≤ %.2f", res.plan.abRate, abRatioMax)
	alloc := fmt.Sprintf("allocations per request: not visible from outside the gateway's process; `BenchmarkGatewayRequest` `chat_json` vs `chat_json_telemetry` in [benchmarks.md](%s)", allocLink)
	switch {
	case len(on) == 0 || len(off) == 0:
		rows = append(rows, abRow{Target: target, Measured: "not measured (the plain phase did not run)", Ratios: "—", Ratio: "—", Beside: alloc, Other: "—", Mark: "n/a"})
	default:
		all = append(all, on, off)
		ratios := pairedRatios(on, off, cpuReq)
		other, noisy := otherLoad(on, off)
		med, mark := ratioVerdict(ratios, abRatioMax, noisy)
		if res.sink.traces == 0 {
			mark = "n/a"
		}
		beside := []string{}
		if n := saturated(on, off); n > 0 && mark != "n/a" {
			mark += " (saturated)"
			beside = append(beside, fmt.Sprintf("%d of %d runs fell behind the rate (more than 1%% of requests late or dropped, or under 98%% of the rate achieved): the core was saturated, so CPU per request is not comparable; a lower -ab-rate measures below it", n, len(on)+len(off)))
		}
		for _, peer := range []string{"floor", "nginx"} {
			if runs := plainRuns(peer); len(runs) > 0 {
				beside = append(beside, fmt.Sprintf("%s %s", peer, medOnly(runs, cpuReq, "%.1f µs")))
			}
		}
		beside = append(beside, alloc, "the sink received "+describeSink(res.sink))
		rows = append(rows, abRow{
			Target:   target,
			Measured: fmt.Sprintf("on %s, off %s", medOnly(on, cpuReq, "%.1f µs"), medOnly(off, cpuReq, "%.1f µs")),
			Ratios:   ratioList(ratios), Ratio: ratioCell(med, len(ratios)),
			Beside: strings.Join(beside, "; "), Other: other, Mark: mark,
		})
	}

	for _, n := range res.plan.levels {
		abRuns := func(t string) []runResult { return res.runs[runKey{t, abEventsMode, n}] }
		g, f := abRuns("gateway"), abRuns("floor")
		cg, ng := r.closed("gateway", n), r.closed("nginx", n)
		target := fmt.Sprintf("CPU per relayed event at %d streams, gateway ÷ floor, ≤ %.2f", n, abRatioMax)
		if len(g) == 0 || len(f) == 0 {
			rows = append(rows, abRow{Target: target, Measured: "not measured (the ab-events phase did not run)", Ratios: "—", Ratio: "—", Beside: "—", Other: "—", Mark: "n/a"})
			continue
		}
		all = append(all, g, f)
		ratios := pairedRatios(g, f, cpuEvt)
		other, noisy := otherLoad(g, f)
		med, mark := ratioVerdict(ratios, abRatioMax, noisy)
		beside := "nginx not measured"
		if len(ng) > 0 && len(cg) > 0 {
			// nginx is not in the A/B: its ratio pairs the closed loop's
			// runs, one after the other.
			nr := pairedRatios(cg, ng, cpuEvt)
			nm, _, _ := median(nr)
			beside = fmt.Sprintf("nginx %s in the closed loop, where the gateway measured %s; gateway ÷ nginx %s (%s, one after the other)", medOnly(ng, cpuEvt, "%.1f µs"), medOnly(cg, cpuEvt, "%.1f µs"), ratioCell(nm, len(nr)), ratioList(nr))
		}
		if ge, fe := errSum(g), errSum(f); ge != "0" || fe != "0" {
			beside += fmt.Sprintf("; errors: gateway %s, floor %s (a repetition counts while each side's are at most %.1f%% of its streams)", ge, fe, abErrorShare*100)
		}
		rows = append(rows, abRow{
			Target:   target,
			Measured: fmt.Sprintf("gateway %s, floor %s", medOnly(g, cpuEvt, "%.1f µs"), medOnly(f, cpuEvt, "%.1f µs")),
			Ratios:   ratioList(ratios), Ratio: ratioCell(med, len(ratios)),
			Beside: beside, Other: other, Mark: mark,
		})
	}

	other, noisy := otherLoad(all...)
	mark := "**quiet**"
	if noisy {
		mark = "**NOISY**"
	}
	if other == "—" {
		mark = "n/a"
	}
	rows = append(rows, abRow{
		Target:   fmt.Sprintf("machine noise: other load on the relay core ≤ %.0f%% in every run above", noisyShare*100),
		Measured: fmt.Sprintf("%d runs", runCount(all)), Ratios: "—", Ratio: "—",
		Beside: "CPU other processes took on the relay's core while it was measured; above the bound a run's CPU figures are the machine's as much as the relay's",
		Other:  other, Mark: mark,
	})
	return rows
}

func runCount(runs [][]runResult) int {
	n := 0
	for _, rs := range runs {
		n += len(rs)
	}
	return n
}

// ratioCell is a median ratio, or why there is none.
func ratioCell(med float64, n int) string {
	switch {
	case n == 0 || math.IsNaN(med):
		return "—"
	case n < minABReps:
		return fmt.Sprintf("%.2f× (%d of %d repetitions)", med, n, minABReps)
	}
	return fmt.Sprintf("%.2f×", med)
}
