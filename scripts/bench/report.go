package main

import (
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/gateway/scripts/binsize"
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
		"Gateway under test: " + res.gatewayFrom,
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

// Target bounds.
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

	rows = append(rows, r.nginxVerdicts()...)

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

// Targets against nginx: CPU per event within 10% of
// nginx's at every level, and at 500 streams (or the highest level below
// it) p99 added TTFT within 1.5× and RSS within 2× of nginx's.
const (
	nginxCPURatio = 1.1
	nginxP99Ratio = 1.5
	nginxRSSRatio = 2.0
	nginxLevel    = 500
)

// nginxVerdicts compares the gateway with nginx, same run, same load.
func (r *report) nginxVerdicts() []verdictRow {
	res := r.res
	cpuT := fmt.Sprintf("CPU per relayed event ≤ %.1f× nginx's, every level", nginxCPURatio)
	lvl := 0
	for _, n := range res.plan.levels {
		if n <= nginxLevel {
			lvl = max(lvl, n)
		}
	}
	p99T := fmt.Sprintf("added TTFT p99 ≤ %.1f× nginx's at %d streams", nginxP99Ratio, lvl)
	rssT := fmt.Sprintf("RSS ≤ %.0f× nginx's at %d streams", nginxRSSRatio, lvl)
	if res.nginx.bin == "" || lvl == 0 {
		why := "nginx not measured: " + res.nginx.why
		if res.nginx.bin != "" {
			why = "no level ≤ 500 streams measured"
		}
		return []verdictRow{{cpuT, why, false, true}, {p99T, why, false, true}, {rssT, why, false, true}}
	}
	// CPU per event is the relay's own time, so it is compared at every
	// level with clean runs, held or not; a level this machine did not
	// hold is marked, since contention for the core inflates it too.
	var rows []verdictRow
	var cpus []string
	cpuok, any := true, false
	for _, n := range res.plan.levels {
		if !clean(r.closed("gateway", n)) || !clean(r.closed("nginx", n)) {
			continue
		}
		any = true
		gc, _, _ := medianOf(r.closed("gateway", n), cpuEvt)
		nc, _, _ := medianOf(r.closed("nginx", n), cpuEvt)
		cpuok = cpuok && gc <= nginxCPURatio*nc
		mark := ""
		if ok, _ := res.held(n); !ok {
			mark = " (not held)"
		}
		cpus = append(cpus, fmt.Sprintf("%d: %.1f vs %.1f µs (%.2f×)%s", n, gc, nc, gc/nc, mark))
	}
	rows = append(rows, verdictRow{cpuT, orNone(cpus, "no clean runs"), cpuok && any, !any})
	g, n := r.closed("gateway", lvl), r.closed("nginx", lvl)
	if !clean(g) || !clean(n) {
		return append(rows, verdictRow{p99T, "errors or no streams", false, false}, verdictRow{rssT, "errors or no streams", false, false})
	}
	g99, _, _ := medianOf(g, ttftP99)
	n99, _, _ := medianOf(n, ttftP99)
	grss, _, _ := medianOf(g, rssMiB)
	nrss, _, _ := medianOf(n, rssMiB)
	rows = append(rows,
		verdictRow{p99T, fmt.Sprintf("%.2f vs %.2f ms (%.2f×)", g99, n99, g99/n99), g99 <= nginxP99Ratio*n99, false},
		verdictRow{rssT, fmt.Sprintf("%.1f vs %.1f MiB (%.2f×)", grss, nrss, grss/nrss), grss <= nginxRSSRatio*nrss, false})
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

//go:embed report.md.tmpl
var reportTmpl string

// mdTemplate renders BENCHMARKS.md from an mdView; the layout lives in
// report.md.tmpl, the figures in the view.
var mdTemplate = template.Must(template.New("report").Funcs(template.FuncMap{"join": strings.Join}).Parse(reportTmpl))

// mdTable is one markdown table: a header, an alignment row ("---" or
// "---:") and rows of cells.
type mdTable struct {
	Head, Align []string
	Rows        [][]string
}

func newTable(cols ...string) *mdTable {
	t := &mdTable{}
	for _, c := range cols {
		h, right := strings.CutSuffix(c, ">")
		t.Head = append(t.Head, h)
		if right {
			t.Align = append(t.Align, "---:")
		} else {
			t.Align = append(t.Align, "---")
		}
	}
	return t
}

func (t *mdTable) add(cells ...string) { t.Rows = append(t.Rows, cells) }

// mdView is everything report.md.tmpl shows, already formatted.
type mdView struct {
	Machine       []string
	Nginx         string
	FloorEpoll    bool
	DocDir        string // docs/bench relative to the report: the plots and nginx-gap.md
	Verdicts      []verdictRow
	ABTargets     []abRow
	SinkNote      string // how the telemetry-on gateway ran, "" when it did not
	MinABReps     int
	ABEventSlices int    // windows per side per level of the per-event A/B
	ABEventWindow string // each one's length
	Carry         string
	Noise         float64 // percent; 0: no warning
	Closed        *mdTable
	ClosedSamples string
	Ratios        *mdTable
	Legs          *legView
	Plots         []struct{ Name, Path string }
	Syscalls      *sysView
	GC            *gcView
	Open          *mdTable
	LateAfter     time.Duration
	Plain         *mdTable
	FixedRate     int
	FixedReps     int
	FixedWindow   time.Duration
	Ceiling       *mdTable
	CeilingP99    string
	CeilingWindow time.Duration
	Memory        *mdTable
	Neighbour     *mdTable
	Cold          *mdTable
	ColdErrors    string
	BinSize       string
	BinBytes      int64
	Deps          *mdTable
	DepsNote      string
	Image         string
}

type sysView struct {
	Tool          string
	Conc, Streams int
	Table         *mdTable
	Notes         []string
}

type gcView struct {
	Level, Reps int
	Table       *mdTable
}

// Mark is the verdict's last column.
func (v verdictRow) Mark() string { return passMark(v) }

// Target and Measured are the verdict's first columns, for the template.
func (v verdictRow) Target() string   { return v.target }
func (v verdictRow) Measured() string { return v.measured }

// relays is res.targets less direct.
func (r *report) relays() []string {
	return slices.DeleteFunc(slices.Clone(r.res.targets), func(t string) bool { return t == "direct" })
}

func (r *report) markdown(pngs []string, plotDir string) string {
	res := r.res
	v := mdView{
		Machine: r.machine, Verdicts: r.verdict, Carry: r.carry,
		LateAfter: lateAfter, FixedRate: res.plan.fixedRate, FixedReps: res.plan.fixedReps, FixedWindow: res.plan.fixedWindow,
		CeilingP99: ms(ceilingP99), CeilingWindow: res.plan.ceilingWindow,
	}
	if res.nginx.bin != "" {
		v.Nginx = res.nginx.version + ": one process (`master_process off`, so it is its own single worker), epoll, `proxy_buffering off`, `proxy_request_buffering off`, HTTP/1.1 to the backend with `upstream keepalive`, an access log to a file as in production; its config is written by the bench (scripts/bench/nginx.go)"
	} else {
		v.Nginx = "not measured on this machine: " + res.nginx.why
	}
	if worst := r.worstForeign(); worst > noisyShare {
		v.Noise = worst * 100
	}
	v.FloorEpoll = slices.Contains(res.targets, "floor-epoll")
	v.ABTargets = r.abTargets(path.Join(plotDir, "../benchmarks.md") + "#allocations-per-request")
	v.SinkNote = sinkNote(res.sampler, res.sink, res.telemetry)
	v.MinABReps = minABReps
	v.ABEventSlices, v.ABEventWindow = abEventSlices, res.plan.abEventWindow.String()
	v.Neighbour = neighbourTable(res.neighbours)
	v.DocDir = plotDir

	v.Closed = newTable("streams>", "relay", "added TTFT p50>", "p90>", "p99>", "p99.9>", "max>", "added end p50>", "end p99>", "per-event p99>", "streams/s>", "events/s>", "errors", "CPU/event>", "RSS max>", "other load on relay core>")
	for _, n := range res.plan.levels {
		for _, t := range res.targets {
			runs := r.closed(t, n)
			if len(runs) == 0 {
				continue
			}
			cpu, rss := "—", "—"
			if t != "direct" {
				cpu = medOnly(runs, cpuEvt, "%.1f µs")
				rss = medOnly(runs, rssMiB, "%.1f MiB")
			}
			v.Closed.add(fmt.Sprint(n), t,
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
		if ok, why := res.held(n); !ok && len(r.closed("direct", n)) > 0 {
			row := make([]string, len(v.Closed.Head))
			row[0], row[2] = fmt.Sprint(n), "*not held cleanly by this machine: "+why+"*"
			v.Closed.add(row...)
		}
	}
	var counts []string
	for _, n := range res.plan.levels {
		if runs := r.closed("gateway", n); len(runs) > 0 {
			counts = append(counts, fmt.Sprintf("%d streams: ~%d", n, runs[0].ttft.N))
		}
	}
	v.ClosedSamples = strings.Join(counts, ", ")

	v.Ratios = newTable("streams>", "gateway ÷", "TTFT p50>", "TTFT p99>", "added end p99>", "CPU/event>", "RSS max>")
	for _, n := range res.plan.levels {
		g := r.closed("gateway", n)
		for _, peer := range []string{"floor", "nginx"} {
			f := r.closed(peer, n)
			if len(g) == 0 || len(f) == 0 {
				continue
			}
			ratio := func(fn func(runResult) float64) string {
				a, _, _ := medianOf(g, fn)
				c, _, _ := medianOf(f, fn)
				if c == 0 || math.IsNaN(a) || math.IsNaN(c) {
					return "—"
				}
				return fmt.Sprintf("%.2f×", a/c)
			}
			v.Ratios.add(fmt.Sprint(n), peer, ratio(ttftP50), ratio(ttftP99),
				ratio(dms(func(x runResult) time.Duration { return x.end.P99 })), ratio(cpuEvt), ratio(rssMiB))
		}
	}
	v.Legs = r.legsView()
	for _, p := range pngs {
		v.Plots = append(v.Plots, struct{ Name, Path string }{strings.TrimSuffix(p, ".png"), path.Join(plotDir, p)})
	}

	if len(res.syscalls) > 0 {
		v.Syscalls = r.syscallView()
	}
	if g := r.gcView(); g != nil {
		v.GC = g
	}

	if len(res.plan.openStreamRates) > 0 {
		t := newTable("streams/s>", "relay", "added TTFT p50>", "p99>", "p99.9>", "added end p99>", "late>", "dropped>", "errors", "CPU/event>", "RSS max>")
		for _, rate := range res.plan.openStreamRates {
			for _, tg := range res.targets {
				runs := res.runs[runKey{tg, "open-stream", rate}]
				if len(runs) == 0 {
					continue
				}
				x := runs[0]
				cpu, rss := "—", "—"
				if tg != "direct" {
					cpu, rss = us(x.cpuPerEvt), mib(x.rssMax)
				}
				t.add(fmt.Sprint(rate), tg, fmt.Sprintf("%.2f", ttftP50(x)), fmt.Sprintf("%.2f", ttftP99(x)),
					fmt.Sprintf("%.2f", x.ttft.P999.Seconds()*1000), fmt.Sprintf("%.2f", x.end.P99.Seconds()*1000),
					fmt.Sprint(x.late), fmt.Sprint(x.dropped), errSum(runs), cpu, rss)
			}
		}
		if len(t.Rows) > 0 {
			v.Open = t
		}
	}

	plain := newTable("relay", "latency p50>", "p90>", "p99>", "p99.9>", "max>", "achieved req/s>", "late>", "errors", "CPU/request>", "RSS max>", "other load on relay core>")
	for _, t := range plainTargets(res.targets, res.telemetry) {
		runs := res.runs[runKey{t, "open-plain", res.plan.fixedRate}]
		if len(runs) == 0 {
			continue
		}
		cpu, rss := "—", "—"
		if t != "direct" {
			cpu = cell(runs, cpuReq, "%.1f µs")
			rss = medOnly(runs, rssMiB, "%.1f MiB")
		}
		plain.add(t,
			cell(runs, ttftP50, "%.2f"), medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.P90 }), "%.2f"),
			cell(runs, ttftP99, "%.2f"), medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.P999 }), "%.2f"),
			medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.Max }), "%.1f"),
			medOnly(runs, func(x runResult) float64 { return x.rate }, "%.0f"),
			medOnly(runs, func(x runResult) float64 { return float64(x.late) }, "%.0f"),
			errSum(runs), cpu, rss, medOnly(runs, func(x runResult) float64 { return x.foreign * 100 }, "%.0f%%"))
	}
	if len(plain.Rows) > 0 {
		v.Plain = plain
	}

	if len(res.ceiling) > 0 {
		t := newTable("relay", "ceiling>", "ratio to floor>", "first failing rate")
		fl := res.ceiling["floor"].best
		for _, tg := range res.targets {
			c, ok := res.ceiling[tg]
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
			t.add(tg, fmt.Sprintf("%d req/s", c.best), ratio, fail)
		}
		v.Ceiling = t
	}

	relays := r.relays()
	v.Memory = newTable(append([]string{""}, suffixAll(relays, ">")...)...)
	idle := func(t string) string {
		xs := res.idleRSS[t]
		if len(xs) == 0 {
			return "—"
		}
		f := make([]float64, len(xs))
		for i, x := range xs {
			f[i] = float64(x) / (1 << 20)
		}
		m, lo, hi := median(f)
		return fmt.Sprintf("%.1f MiB (%.1f–%.1f)", m, lo, hi)
	}
	row := []string{fmt.Sprintf("idle RSS after start (median of %d starts)", len(res.idleRSS["gateway"]))}
	for _, t := range relays {
		row = append(row, idle(t))
	}
	v.Memory.add(row...)
	for _, n := range res.plan.levels {
		row := []string{fmt.Sprintf("RSS max at %d streams", n)}
		for _, t := range relays {
			row = append(row, cell(r.closed(t, n), rssMiB, "%.1f MiB"))
		}
		v.Memory.add(row...)
	}
	row = []string{fmt.Sprintf("RSS max at %d req/s (non-streaming)", res.plan.fixedRate)}
	for _, t := range relays {
		row = append(row, cell(res.runs[runKey{t, "open-plain", res.plan.fixedRate}], rssMiB, "%.1f MiB"))
	}
	v.Memory.add(row...)

	cold := newTable(fmt.Sprintf("cold start (gateway, %d fresh processes each)", len(res.coldEvent)), "median>", "min>", "max>")
	for _, c := range []struct {
		name string
		v    []time.Duration
	}{{"exec → first 200 on /healthz", res.coldHealthy}, {"exec → first proxied streamed event (X-Stub-TTFT: 0s)", res.coldEvent}} {
		if len(c.v) == 0 {
			continue
		}
		cold.add(c.name, ms(medianDur(c.v)), ms(slices.Min(c.v)), ms(slices.Max(c.v)))
	}
	if len(cold.Rows) > 0 {
		v.Cold = cold
	}
	if len(res.coldErrors) > 0 {
		v.ColdErrors = kindsString(res.coldErrors)
	}
	v.BinSize, v.BinBytes = mib(res.binSize), res.binSize
	v.Deps, v.DepsNote = depsTable(res.deps, res.depsErr)
	if res.imageSize > 0 {
		v.Image = fmt.Sprintf("%s (%s)", mib(res.imageSize), res.imageNote)
	} else {
		v.Image = res.imageNote
	}

	var b strings.Builder
	if err := mdTemplate.Execute(&b, v); err != nil {
		// The template is parsed at start and the view is plain data: an
		// error here is a bug in report.md.tmpl.
		panic(fmt.Sprintf("report.md.tmpl: %v", err))
	}
	return b.String()
}

func suffixAll(v []string, suffix string) []string {
	out := make([]string, len(v))
	for i, s := range v {
		out[i] = s + suffix
	}
	return out
}

// syscallView is the syscalls-per-event table.
func (r *report) syscallView() *sysView {
	res := r.res
	sv := &sysView{Tool: res.tracer, Conc: res.plan.sysConc, Streams: res.plan.sysStreams}
	sv.Table = newTable("relay", "backend leg", "events>", "syscalls/event>", "read>", "of which EAGAIN>", "write>", "epoll>", "futex>", "nanosleep>", "other>", "context switches>", "CPU/event while counted>", "of which kernel>", "errors")
	per := map[legKey]float64{}
	for _, s := range res.syscalls {
		if s.err != "" {
			sv.Table.add(s.target, legTitle(s.leg), "—", "*"+s.err+"*", "", "", "", "", "", "", "", "", "", "", "")
			continue
		}
		ev := float64(max(s.run.events, 1))
		k := s.count.kinds()
		f := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/ev) }
		per[legKey{s.leg, s.target}] = float64(s.count.total) / ev
		cs := "—"
		if s.count.ctxsw >= 0 {
			cs = f(s.count.ctxsw)
		}
		sv.Table.add(s.target, legTitle(s.leg), fmt.Sprint(s.run.events), f(s.count.total), f(k["read"]), f(s.count.eagain), f(k["write"]),
			f(k["epoll"]), f(k["futex"]), f(k["nanosleep"]), f(k["other"]), cs, us(s.run.cpuPerEvt),
			fmt.Sprintf("%.0f%%", 100*float64(s.run.sysCPU)/float64(max(s.run.cpu, 1))), errSum([]runResult{s.run}))
	}
	for _, leg := range allLegs {
		if g, n := per[legKey{leg, "gateway"}], per[legKey{leg, "nginx"}]; g > 0 && n > 0 {
			sv.Notes = append(sv.Notes, fmt.Sprintf("Backend leg %s: the gateway makes %.2f× nginx's system calls per event (%.2f vs %.2f).", legTitle(leg), g/n, g, n))
		}
	}
	return sv
}

// gcView is the GC settings table, nil when the phase did not run.
func (r *report) gcView() *gcView {
	res := r.res
	p := res.plan
	g := &gcView{Level: p.gcLevel, Reps: p.gcReps}
	g.Table = newTable("setting", "added TTFT p50>", "p99>", "p99.9>", "end p99>", "CPU/event>", "RSS max>", "errors", "other load on relay core>")
	for _, s := range p.gcSettings {
		runs := res.runs[runKey{"gateway", gcMode(s), p.gcLevel}]
		if len(runs) == 0 {
			continue
		}
		g.Table.add(s.name, cell(runs, ttftP50, "%.2f"), cell(runs, ttftP99, "%.2f"),
			medOnly(runs, dms(func(x runResult) time.Duration { return x.ttft.P999 }), "%.2f"),
			medOnly(runs, dms(func(x runResult) time.Duration { return x.end.P99 }), "%.2f"),
			cell(runs, cpuEvt, "%.1f µs"), cell(runs, rssMiB, "%.1f MiB"), errSum(runs),
			medOnly(runs, func(x runResult) float64 { return x.foreign * 100 }, "%.0f%%"))
	}
	if len(g.Table.Rows) == 0 {
		return nil
	}
	return g
}

// summary is the console version: targets and the headline table.
func (r *report) summary() string {
	var b strings.Builder
	fmt.Fprintln(&b, "\n== targets ==")
	for _, v := range r.verdict {
		fmt.Fprintf(&b, "%-6s %s: %s\n", strings.Trim(passMark(v), "*"), v.target, v.measured)
	}
	fmt.Fprintln(&b, r.carry)
	fmt.Fprintln(&b, "\n== interleaved A/B targets (median of per-repetition ratios) ==")
	for _, a := range r.abTargets("docs/benchmarks.md#allocations-per-request") {
		fmt.Fprintf(&b, "%-6s %s: %s; ratios %s → %s; other load on relay core %s\n", strings.ReplaceAll(a.Mark, "*", ""), a.Target, a.Measured, a.Ratios, a.Ratio, a.Other)
	}
	if worst := r.worstForeign(); worst > noisyShare {
		fmt.Fprintf(&b, "NOISE: other processes took up to %.0f%% of the relay core during relay runs; re-run on a quiet machine\n", worst*100)
	}
	fmt.Fprintln(&b, "\n== added TTFT, median of repetitions (ms) ==")
	fmt.Fprintf(&b, "%7s %-8s %8s %8s %8s %10s %8s\n", "streams", "relay", "p50", "p99", "end p99", "CPU/event", "RSS")
	for _, n := range r.res.plan.levels {
		for _, t := range r.res.targets {
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
	b.WriteString(r.legsSummary())
	return b.String()
}

// depsTable is what each module costs the binary and the start, with the
// reason budget.tsv gives for it (scripts/binsize).
func depsTable(r *binsize.Report, err error) (*mdTable, string) {
	switch {
	case err != nil:
		return nil, "Not measured: " + err.Error() + "."
	case r == nil:
		return nil, "Not measured in this run."
	}
	_, lines, err := binsize.Budget()
	if err != nil {
		return nil, "Not measured: " + err.Error() + "."
	}
	why := map[string]string{}
	for _, l := range lines {
		why[l.Module] = l.Why
	}
	t := newTable("module", "KiB>", "init ms>", "init bytes>", "why")
	var sum int64
	for _, m := range r.Modules {
		sum += m.Bytes
		t.add(m.Path, strconv.FormatInt((m.Bytes+1023)/1024, 10), strconv.FormatFloat(m.InitMs, 'f', 3, 64),
			strconv.FormatInt(m.InitBytes, 10), cmp.Or(why[m.Path], "(no line in budget.tsv)"))
	}
	return t, fmt.Sprintf("The symbols add up to %s of the stripped %s; the rest is the function tables (pclntab) and headers, which grow with the code.", mib(sum), mib(r.Stripped))
}
