// Command bench reproduces the gateway's published measurements on one
// core, against a zero-logic floor (scripts/relayfloor), against nginx as a
// peer (one worker, proxy_buffering off, upstream keepalive; skipped with a
// note where nginx is not installed) and against the stub backend itself
// (the load generator's own floor), and writes BENCHMARKS.md and
// docs/bench/*.png. The closed loop and the syscall count run every relay
// on each backend leg (legs.go): plain HTTP, TLS behind a private CA, and
// TLS with h2 offered.
//
//	go run ./scripts/bench -quick   # make bench: about 23 minutes on 2 cores (15 with -backend plain)
//	go run ./scripts/bench -quick -phases ab-events,plain  # the interleaved A/B targets alone: about 12 minutes
//	go run ./scripts/bench -full    # make bench-full
//	go run ./scripts/bench -quick -gateway-rev 610436a -out bench-out/before.md -plots bench-out/before  # a change's before
//
// It builds the gateway as `make build` does (or at another commit:
// -gateway-rev), the stub, the dev issuer and the floor; starts the stubs
// (one per leg) and the issuer as their own processes on the
// CPUs the relay does not use; starts each relay under test (the gateway,
// the floor, nginx, at different times) on one core, the Go ones with
// GOMAXPROCS=1; and is itself the load generator. Besides the load tables
// it counts each relay's system calls per relayed event over a fixed load
// (perf stat, or strace -c -f) and runs the gateway under several
// GOGC/GOMEMLIMIT settings. Every relay runs as in production: the
// gateway and nginx write their per-request access log to a file. Every process
// it starts it stops, by PID, also on failure and Ctrl-C.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/gateway/scripts/binsize"
	"github.com/llmgw/gateway/scripts/internal/privateca"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// plan is what one bench invocation measures.
type plan struct {
	name         string // quick or full
	levels       []int  // closed-loop concurrent streams
	reps         int
	ramp, window time.Duration
	tail         time.Duration // hard limit for open streams after the window

	fixedRate int // the published non-streaming rate (3,000 req/s)
	// abRate is the rate of the telemetry on/off A/B in the plain phase:
	// well below the gateway's limit on one core, where CPU per request is
	// the relay's work and not a saturated core's batching (at 3,000
	// req/s a quiet machine's gateway once used most of its core). Equal
	// to fixedRate, the pair runs once, in the plain table.
	abRate int
	// abWindow is twice each A/B side's measured load per repetition
	// (abPair: abSlices windows of abWindow/2); abReps is how many
	// repetitions of the pair run (at least fixedReps).
	abWindow    time.Duration
	abReps      int
	fixedReps   int
	fixedWindow time.Duration

	// The per-event A/B (abEvents): abEventReps repetitions, each level
	// in abEventSlices windows of abEventWindow per side.
	abEventReps   int
	abEventWindow time.Duration

	ceilingRates  []int // non-streaming ladder; nil skips the ceiling search
	ceilingWindow time.Duration

	openStreamRates []int // open-loop streams per second
	openWindow      time.Duration

	coldStarts int
	cleanP99   time.Duration // a level is held when the direct run's p99 added TTFT is at most this

	// The syscall count: sysStreams streams, sysConc at a time, through
	// each relay with a tracer attached.
	sysConc, sysStreams int

	// The GC table: the gateway at gcLevel streams under each setting.
	gcLevel    int
	gcReps     int
	gcSettings []gcSetting

	phases map[string]bool // nil: every phase
}

// gcSetting is one GOGC/GOMEMLIMIT combination the GC table measures.
type gcSetting struct {
	name string   // as the table shows it
	env  []string // added to the gateway's environment
}

// gcSettings are the combinations measured: the gateway's default (GOGC
// 50, set in main unless GOGC is in the environment), lower and higher
// targets, and a memory limit instead of a ratio.
var gcSettings = []gcSetting{
	{"GOGC=50 (default)", nil},
	{"GOGC=25", []string{"GOGC=25"}},
	{"GOGC=100", []string{"GOGC=100"}},
	{"GOGC=200", []string{"GOGC=200"}},
	{"GOGC=100, GOMEMLIMIT=40MiB", []string{"GOGC=100", "GOMEMLIMIT=40MiB"}},
	{"GOGC=off, GOMEMLIMIT=64MiB", []string{"GOGC=off", "GOMEMLIMIT=64MiB"}},
}

// allPhases are the phases in the order they run.
var allPhases = []string{"closed", abEventsMode, "syscalls", "gc", "open", "plain", "ceiling", "cold", "neighbour"}

// phase reports whether the plan runs the named phase.
func (p plan) phase(name string) bool { return p.phases == nil || p.phases[name] }

func quickPlan() plan {
	return plan{
		name: "quick", levels: []int{100, 300, 500}, reps: minABReps,
		ramp: 1900 * time.Millisecond, window: 2500 * time.Millisecond, tail: 10 * time.Second,
		fixedRate: 3000, fixedReps: minABReps, fixedWindow: 2 * time.Second, abRate: defaultABRate, abWindow: 4 * time.Second, abReps: 5,
		abEventReps: 5, abEventWindow: 3 * time.Second,
		coldStarts: 10, cleanP99: 5 * time.Millisecond,
		sysConc: 100, sysStreams: 200,
		gcLevel: 500, gcReps: 1, gcSettings: gcSettings,
	}
}

func fullPlan() plan {
	return plan{
		name: "full", levels: []int{100, 500, 1000, 1500}, reps: 3,
		ramp: 1900 * time.Millisecond, window: 8 * time.Second, tail: 15 * time.Second,
		fixedRate: 3000, fixedReps: 3, fixedWindow: 4 * time.Second, abRate: defaultABRate, abWindow: 4 * time.Second, abReps: 5,
		ceilingRates:    []int{1000, 2000, 3000, 4000, 5000, 6000, 8000, 10000, 12000, 14000, 16000, 20000, 24000, 28000, 32000},
		ceilingWindow:   3 * time.Second,
		openStreamRates: []int{250, 500}, openWindow: 6 * time.Second,
		abEventReps: 5, abEventWindow: 4 * time.Second,
		coldStarts: 15, cleanP99: 5 * time.Millisecond,
		sysConc: 100, sysStreams: 500,
		gcLevel: 500, gcReps: 3, gcSettings: gcSettings,
	}
}

// ceilingP99 is the non-streaming ceiling's latency bound.
const ceilingP99 = 25 * time.Millisecond

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "the short run of `make bench` (the default)")
	full := fs.Bool("full", false, "every level, open-loop rates, the non-streaming ceiling (`make bench-full`)")
	out := fs.String("out", "BENCHMARKS.md", "report to write")
	plots := fs.String("plots", "docs/bench", "folder for the plots")
	levels := fs.String("levels", "", "override the closed-loop levels, e.g. 100,500")
	reps := fs.Int("reps", 0, "override the repetitions per level")
	window := fs.Duration("window", 0, "override the measured window per run")
	gatewayBin := fs.String("gateway", "", "measure this gateway binary as it is (default: build bin/gateway as make build does)")
	phases := fs.String("phases", "", "run only these phases, comma-separated: "+strings.Join(allPhases, ", ")+" (a partial report)")
	rate := fs.Int("rate", 0, "override the fixed non-streaming rate (default 3000 req/s)")
	abRate := fs.Int("ab-rate", 0, fmt.Sprintf("the non-streaming rate of the telemetry on/off A/B (default %d req/s)", defaultABRate))
	abEventReps := fs.Int("ab-event-reps", 0, "override the repetitions of the per-event gateway/floor A/B (default 5)")
	epollFloor := fs.Bool("epoll-floor", false, "also measure floor-epoll: the floor with its backend leg on scripts/relayfloor/epollconn (prototype)")
	backendLegs := fs.String("backend", strings.Join(allLegs, ","), "backend legs the closed-loop and syscall phases measure, comma-separated: "+strings.Join(allLegs, ", ")+" (the other phases run on plain)")
	gatewayRev := fs.String("gateway-rev", "", "measure the gateway built from this git revision (e.g. a commit before a change), with this bench's code and config")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick && *full {
		return errors.New("-quick and -full exclude each other")
	}
	if *gatewayBin != "" && *gatewayRev != "" {
		return errors.New("-gateway and -gateway-rev exclude each other")
	}
	legs, err := parseLegs(*backendLegs)
	if err != nil {
		return err
	}
	p := quickPlan()
	if *full {
		p = fullPlan()
	}
	if *levels != "" {
		p.levels = nil
		for f := range strings.SplitSeq(*levels, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("-levels: %q is not a positive number", f)
			}
			p.levels = append(p.levels, n)
		}
	}
	if *reps > 0 {
		p.reps = *reps
	}
	if *window > 0 {
		p.window = *window
	}
	if *rate > 0 {
		p.fixedRate = *rate
	}
	if *abRate > 0 {
		p.abRate = *abRate
	}
	if *abEventReps > 0 {
		p.abEventReps = *abEventReps
	}
	if *phases != "" {
		p.phases = map[string]bool{}
		for f := range strings.SplitSeq(*phases, ",") {
			f = strings.TrimSpace(f)
			if !slices.Contains(allPhases, f) {
				return fmt.Errorf("-phases: unknown phase %q", f)
			}
			p.phases[f] = true
		}
	}

	root, err := repoRoot()
	if err != nil {
		return err
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return err
	}
	cpus, err := planCPUs(allowed)
	if err != nil {
		return err
	}
	if err := pinSelf(cpus.loadgen); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "bench:", cpus.describe())
	fmt.Fprintln(stdout, "bench: the gateway and nginx write their access logs to files, as in production")

	b := &bench{plan: p, root: root, cpus: cpus, procs: newProcs(cpus.loadgen), log: stdout, began: time.Now(), nginx: findNginx(), legs: legs}
	if b.nginx.bin == "" {
		fmt.Fprintln(stdout, "bench: nginx peer skipped:", b.nginx.why)
	} else {
		fmt.Fprintln(stdout, "bench: nginx peer:", b.nginx.bin, b.nginx.version)
	}
	defer b.procs.stopAll()
	b.epollFloor = *epollFloor
	b.bins, err = build(ctx, root, *gatewayBin != "" || *gatewayRev != "", stdout)
	if err != nil {
		return err
	}
	b.gatewayFrom = "bin/gateway, built from the working tree as make build does"
	switch {
	case *gatewayBin != "":
		if b.bins.gateway, err = filepath.Abs(*gatewayBin); err != nil {
			return err
		}
		b.gatewayFrom = b.bins.gateway + " (-gateway), as it is"
	case *gatewayRev != "":
		var commit string
		if b.bins.gateway, commit, err = buildAtRev(ctx, root, *gatewayRev, stdout); err != nil {
			return err
		}
		b.gatewayFrom = fmt.Sprintf("built from commit %s (-gateway-rev %s) as make build does", commit, *gatewayRev)
	}
	b.tmp, err = os.MkdirTemp("", "bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(b.tmp)
	if b.sink, err = startSink(); err != nil {
		return err
	}
	defer b.sink.close()
	if err := b.startBackends(ctx); err != nil {
		return err
	}
	res, err := b.measure(ctx)
	if err != nil {
		return err
	}
	res.elapsed = time.Since(b.began)
	res.gatewayFrom = b.gatewayFrom
	res.sampler = samplerName(os.Getenv)
	rep := newReport(res, root)
	outPath, plotPath := inRoot(root, *out), inRoot(root, *plots)
	if err := os.MkdirAll(plotPath, 0o755); err != nil {
		return err
	}
	pngs, err := writePlots(res, plotPath)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	// The report links the plots relative to itself.
	rel, err := filepath.Rel(filepath.Dir(outPath), plotPath)
	if err != nil {
		rel = plotPath
	}
	md := rep.markdown(pngs, filepath.ToSlash(rel))
	if err := os.WriteFile(outPath, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, rep.summary())
	fmt.Fprintf(stdout, "bench: wrote %s and %d plots in %s (%.0f s)\n", *out, len(pngs), *plots, res.elapsed.Seconds())
	return nil
}

// inRoot resolves a relative path against the repository root.
func inRoot(root, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

// repoRoot is the module root: the bench runs from it under make, but may
// be started anywhere inside the repository.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}

// bench holds what one invocation has started.
type bench struct {
	plan  plan
	root  string
	tmp   string
	cpus  cpuPlan
	procs *procs
	bins  binaries
	log   io.Writer
	began time.Time
	nginx nginxPeer

	epollFloor bool // measure floor-epoll too
	// legs are the backend legs the closed-loop and syscall phases
	// measure; backends their stubs (plain's always runs), pki the private
	// CA behind the TLS legs, stubClient the client for the stubs'
	// counters.
	legs        []string
	backends    map[string]backendLeg
	pki         privateca.Files
	stubClient  *http.Client
	gatewayFrom string // where the gateway under test came from, for the report
	// sink is the OTLP collector telemetryKind exports to, in this
	// process.
	sink *otlpSink
	// floodCap is the flood tenant's max_concurrent_requests in the
	// gateway's config (the neighbour phase); 0: no flood tenant.
	floodCap int
	// maxConns is the gateway's max_connections (the neighbour phase's
	// anonymous floods at the cap); 0: 16384, above every level.
	maxConns int

	stubAddr, issuerURL string
	token               string
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench %5.1fs: %s\n", time.Since(b.began).Seconds(), fmt.Sprintf(format, args...))
}

// startBackends starts the stubs and the dev issuer on the stub CPUs and
// mints the one token every request carries.
func (b *bench) startBackends(ctx context.Context) error {
	if err := b.startStubs(ctx); err != nil {
		return err
	}
	issAddr, err := freePort()
	if err != nil {
		return err
	}
	iss, _, err := b.procs.start("devissuer", b.cpus.stub, nil, nil, b.bins.issuer, "-addr", issAddr)
	if err != nil {
		return err
	}
	if err := waitListening(ctx, iss, issAddr, 10*time.Second); err != nil {
		return err
	}
	b.issuerURL = "http://" + issAddr
	resp, err := http.Get(b.issuerURL + "/mint?tenant=bench&sub=bench&aud=llm-gateway&ttl=6h")
	if err != nil {
		return fmt.Errorf("mint: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("mint: %d %v %s", resp.StatusCode, err, body)
	}
	b.token = strings.TrimSpace(string(body))
	for _, leg := range allLegs {
		if be, ok := b.backends[leg]; ok {
			b.logf("stub for the %s leg on %s", leg, be.url())
		}
	}
	b.logf("dev issuer on %s, token minted (tenant bench)", b.issuerURL)
	return nil
}

// gatewayConfig is the bench's gateway config: the demo's shape with one
// pool on the stub, one tenant with a bucket no run of one process can
// empty (every request still takes from it), and the access log on
// (log_level info, stdout to a file: see logFile).
//
// The bench tenant's max_concurrent_requests and the replica's
// max_connections are raised above every level the bench drives (1,500
// streams, 4,096 connections for the non-streaming rates): the bench
// measures the relay, not the caps. The neighbour phase adds a tenant
// flood with its own cap (floodCap).
//
// The bucket is 1.8 M per hour, not "unlimited": go-limiter's memory store
// refills interval/tokens tokens per elapsed interval, so a bucket larger
// than sqrt(interval in ns) never refills to full (1e12 per second would
// refill 0 and answer 429 after the first second's burst).
//
// The pool's one endpoint is leg's stub (gatewayEndpoint). The config is
// the same shape at every commit of the config format, so a gateway built
// by -gateway-rev reads it too.
func (b *bench) gatewayConfig(listen, leg string) (string, error) {
	cfg := fmt.Sprintf(`# Written by scripts/bench.
listen: %s
log_level: info
shutdown_grace: 1s
auth:
  issuer: %s
  jwks_url: %s/jwks.json
  audiences: [llm-gateway]
  tenant_claim: tid
  algorithms: [RS256]
limiter:
  store: memory
  failure_policy: open
upstream:
  max_idle_conns_per_host: 4096
max_connections: %d
tenants:
  - id: bench
    models: [bench-model]
    requests: 1800000
    interval: 1h
    max_concurrent_requests: 100000
%spools:
  - name: stub
    kind: openai
    models: {bench-model: ""}
    forward_headers: [X-Stub-TTFT, X-Stub-Interval, X-Stub-Tokens]
    endpoints:
      - %s
`, listen, b.issuerURL, b.issuerURL, cmp.Or(b.maxConns, 16384), b.floodTenant(), b.gatewayEndpoint(leg))
	path := filepath.Join(b.tmp, "gateway-"+strings.ReplaceAll(listen, ":", "_")+".yaml")
	return path, os.WriteFile(path, []byte(cfg), 0o644)
}

// floodTenant is the neighbour phase's flooding tenant's row ("" outside it).
func (b *bench) floodTenant() string {
	if b.floodCap == 0 {
		return ""
	}
	return fmt.Sprintf("  - {id: flood, models: [bench-model], requests: 1800000, interval: 1h, max_concurrent_requests: %d}\n", b.floodCap)
}

// relay is a started relay under test.
type relay struct {
	kind    string // gateway, floor or nginx
	proc    *proc
	t0      time.Time
	tgt     *target
	idleRSS int64
}

// startRelay starts the gateway, the floor or nginx on the relay core (the
// Go relays with GOMAXPROCS=1, and extra in their environment) in front
// of leg's stub, waits until it answers, and reads its idle RSS.
func (b *bench) startRelay(ctx context.Context, leg, kind string, conns int, extra []string) (*relay, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	env := append([]string{"GOMAXPROCS=1"}, extra...)
	var pr *proc
	var t0 time.Time
	switch kind {
	case "gateway", telemetryKind:
		path, err := b.gatewayConfig(addr, leg)
		if err != nil {
			return nil, err
		}
		if kind == telemetryKind {
			env = append(env, gatewayEnv(b.sink.url)...)
			env = append(env, samplerEnv(os.Getenv)...)
		}
		pr, t0, err = b.startGateway(env, path)
		if err != nil {
			return nil, err
		}
	case "floor":
		args := []string{"-listen", addr, "-backend", b.backends[leg].url()}
		if b.backends[leg].tls {
			args = append(args, "-ca-file", b.pki.CA)
		}
		pr, t0, err = b.procs.start("floor", b.cpus.relay, env, nil, b.bins.floor, args...)
		if err != nil {
			return nil, err
		}
	case "floor-epoll":
		pr, t0, err = b.procs.start("floor-epoll", b.cpus.relay, env, nil, b.bins.floor, "-epoll", "-listen", addr, "-backend", "http://"+b.stubAddr)
		if err != nil {
			return nil, err
		}
	case "nginx":
		if b.nginx.bin == "" {
			return nil, errors.New(b.nginx.why)
		}
		var ssl *nginxSSL
		if b.backends[leg].tls {
			ssl = &nginxSSL{trusted: b.pki.CA, name: privateca.Names.DNS}
		}
		path, err := writeNginxConfig(b.tmp, addr, b.backends[leg].addr, ssl, conns)
		if err != nil {
			return nil, err
		}
		pr, t0, err = b.procs.start("nginx", b.cpus.relay, nil, nil, b.nginx.bin, "-p", filepath.Dir(path), "-c", path)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown relay %q", kind)
	}
	r := &relay{kind: kind, proc: pr, t0: t0, tgt: &target{name: kind, base: "http://" + addr, token: b.token, client: newClient(conns)}}
	if err := waitListening(ctx, pr, addr, 10*time.Second); err != nil {
		b.procs.stop(pr, time.Second)
		return nil, err
	}
	// Idle: listening, nothing served yet; give the runtime a moment to
	// settle its start-up allocations.
	time.Sleep(300 * time.Millisecond)
	if st, err := readProc(pr.pid()); err == nil {
		r.idleRSS = st.rss
	}
	return r, nil
}

func (b *bench) stopRelay(r *relay) {
	r.tgt.close()
	b.procs.stop(r.proc, 3*time.Second)
}

// directTarget is the stub itself: the load generator's own floor.
func (b *bench) directTarget(conns int) *target {
	return &target{name: "direct", base: "http://" + b.stubAddr, token: b.token, client: newClient(conns)}
}

// warm sends a burst of short streams and plain requests, so that JWKS,
// keep-alive connections and the runtime's heap are in place before a
// measured run. A request that fails is sent once more, and the failure
// logged: the floor (net/http's reverse proxy) cuts about one stream in
// 2,000 with "use of closed network connection" on its backend read, which
// the measured runs count as an error, and one such cut in the warm-up
// must not end a run of twenty minutes. A failure that recurs fails the
// bench: nothing after would be valid.
func (b *bench) warm(ctx context.Context, t *target) error {
	errs := make(chan string, 64)
	for range warmRequests {
		go func() {
			e := warmOnce(ctx, t)
			if e != "" && ctx.Err() == nil {
				b.logf("warm-up of %s: %s; sent again", t.name, e)
				e = warmOnce(ctx, t)
			}
			errs <- e
		}()
	}
	for range warmRequests {
		if e := <-errs; e != "" {
			return fmt.Errorf("warm-up of %s: %s, twice", t.name, e)
		}
	}
	return nil
}

// warmRequests is how many streams (each followed by a plain request)
// the warm-up sends at once.
const warmRequests = 32

// warmOnce sends one short stream and, if it went through, one plain
// request; it returns the first error's kind.
func warmOnce(ctx context.Context, t *target) string {
	r := t.doStream(ctx, reqOpts{ttft: "0s", tokens: "4"}, nil)
	if r.err == "" {
		_, r.err = t.doPlain(ctx)
	}
	return r.err
}

// targetOrder is every target in the order tables list them; nginx runs
// only where it is installed, floor-epoll only when asked for.
var targetOrder = []string{"direct", "floor", "floor-epoll", "nginx", "gateway"}

// targets is targetOrder less what this run does not measure.
func (b *bench) targets() []string {
	return slices.DeleteFunc(slices.Clone(targetOrder), func(t string) bool {
		return (t == "nginx" && b.nginx.bin == "") || (t == "floor-epoll" && !b.epollFloor)
	})
}

// withTarget runs f against a fresh target of kind: the stub directly, or
// a relay started for f and stopped after it. For relays f gets the PID.
func (b *bench) withTarget(ctx context.Context, kind string, conns int, res *results, f func(t *target, pid int) error) error {
	return b.withTargetEnv(ctx, kind, conns, nil, res, f)
}

// withTargetEnv is withTarget with extra environment for a Go relay.
func (b *bench) withTargetEnv(ctx context.Context, kind string, conns int, env []string, res *results, f func(t *target, pid int) error) error {
	return b.withLeg(ctx, legPlain, kind, conns, env, res, f)
}

// withLeg is withTargetEnv with the relay in front of leg's stub. It also
// records what the relay spoke to the stub (protocolOf).
func (b *bench) withLeg(ctx context.Context, leg, kind string, conns int, env []string, res *results, f func(t *target, pid int) error) error {
	if kind == "direct" {
		t := b.directTarget(conns)
		defer t.close()
		if err := b.warm(ctx, t); err != nil {
			return err
		}
		return f(t, 0)
	}
	before, statsErr := b.stubStats(ctx, leg)
	r, err := b.startRelay(ctx, leg, kind, conns, env)
	if err != nil {
		return err
	}
	defer b.stopRelay(r)
	if env == nil && leg == legPlain {
		res.idleRSS[kind] = append(res.idleRSS[kind], r.idleRSS)
	}
	if err := b.warm(ctx, r.tgt); err != nil {
		return err
	}
	if err := f(r.tgt, r.proc.pid()); err != nil {
		return err
	}
	after, err := b.stubStats(ctx, leg)
	if statsErr != nil || err != nil {
		b.logf("%s on the %s leg: protocol to the backend unknown: %v", kind, leg, errors.Join(statsErr, err))
		return nil
	}
	res.backendProto[legKey{leg, kind}] = protocolOf(before, after, b.backends[leg].tls)
	return nil
}

// measured runs one load against pid (0: no relay), sampling its CPU and
// RSS, and fills in the relay's figures and the load other processes put
// on the relay's core meanwhile (machine noise: tests, builds).
func (b *bench) measured(pid int, load func() runResult) runResult {
	core := b.cpus.relay[0]
	busy0, busyErr := cpuBusy(core)
	if pid == 0 {
		r := load()
		if busy1, err := cpuBusy(core); err == nil && busyErr == nil {
			r.foreign = float64(busy1-busy0) / float64(r.elapsed)
		}
		return r
	}
	before, _ := readProc(pid)
	s := startSampler(pid, 500*time.Millisecond)
	r := load()
	r.rssMax = s.finish()
	after, err := readProc(pid)
	busy1, err2 := cpuBusy(core)
	if err == nil {
		r.cpu = after.cpu - before.cpu
		r.sysCPU = after.sys - before.sys
		if r.events > 0 {
			r.cpuPerEvt = r.cpu / time.Duration(r.events)
		}
		if busyErr == nil && err2 == nil {
			r.foreign = max(float64(busy1-busy0-r.cpu), 0) / float64(r.elapsed)
		}
	}
	return r
}

// measure runs the plan. Each repetition visits every target in turn, so
// that drift of the machine affects them alike.
func (b *bench) measure(ctx context.Context) (*results, error) {
	p := b.plan
	res := newResults(p, b.cpus)
	res.nginx = b.nginx
	res.targets = b.targets()
	res.legs = b.legs
	maxLevel := 0
	for _, l := range p.levels {
		maxLevel = max(maxLevel, l)
	}
	for rep := 1; rep <= p.reps && p.phase("closed"); rep++ {
		// The direct run first (it has no backend leg), then every relay
		// on each leg in turn, in reverse order in even repetitions: a
		// relay that always ran right after another (or first, on an
		// idle core) would meet a drift, or the last one's leftovers,
		// alone.
		type visit struct{ leg, kind string }
		visits := []visit{{legPlain, "direct"}}
		for _, leg := range b.legs {
			kinds := b.legTargets(leg)
			if rep%2 == 0 {
				slices.Reverse(kinds)
			}
			for _, kind := range kinds {
				visits = append(visits, visit{leg, kind})
			}
		}
		for _, v := range visits {
			err := b.withLeg(ctx, v.leg, v.kind, maxLevel, nil, res, func(t *target, pid int) error {
				for _, n := range p.levels {
					if err := ctx.Err(); err != nil {
						return err
					}
					r := b.measured(pid, func() runResult { return closedLoop(ctx, t, n, p.ramp, p.window, p.tail) })
					r.mode = legMode(r.mode, v.leg)
					r.rep = rep
					res.add(r)
					b.logf("rep %d %-5s %-7s %5d streams: TTFT p50 %s p99 %s, end p99 %s, %d streams, %d errors, cpu %s/event, rss %s, other load on relay core %.0f%%",
						rep, v.leg, v.kind, n, ms(r.ttft.P50), ms(r.ttft.P99), ms(r.end.P99), r.done, r.errCount(), us(r.cpuPerEvt), mib(r.rssMax), r.foreign*100)
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}

	for rep := 1; rep <= p.abEventReps && p.phase(abEventsMode); rep++ {
		if err := b.abEvents(ctx, res, rep); err != nil {
			return nil, err
		}
	}

	if p.phase("syscalls") && p.sysStreams > 0 {
		if err := b.syscalls(ctx, res); err != nil {
			return nil, err
		}
	}
	if p.phase("gc") && len(p.gcSettings) > 0 {
		if err := b.gcTable(ctx, res); err != nil {
			return nil, err
		}
	}

	for _, rate := range p.openStreamRates {
		if !p.phase("open") {
			break
		}
		for _, kind := range b.targets() {
			conns := rate * 4 // ~2 s streams, room for a stall
			err := b.withTarget(ctx, kind, conns, res, func(t *target, pid int) error {
				r := b.measured(pid, func() runResult { return openLoop(ctx, t, rate, true, p.openWindow, p.tail, conns) })
				res.add(r)
				b.logf("open %-7s %5d streams/s: TTFT p50 %s p99 %s, %d late, %d dropped, %d errors",
					kind, rate, ms(r.ttft.P50), ms(r.ttft.P99), r.late, r.dropped, r.errCount())
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}

	// The plain phase: every target at the published rate, then the
	// gateway with telemetry off and on at abRate (abPair), in each
	// repetition; at the published rate itself, the pair runs among the
	// targets (plainVisits).
	// The pair alone runs on to abReps repetitions: its per-repetition
	// ratios move by ±8% on a quiet machine, about twice what telemetry
	// costs, so three leave the median to chance.
	ab := p.abRate != p.fixedRate
	reps := p.fixedReps
	if ab {
		reps = max(reps, p.abReps)
	}
	for rep := 1; rep <= reps && p.phase("plain"); rep++ {
		res.telemetry = true
		visits := plainVisits(b.targets(), rep)
		if ab {
			visits = b.targets()
		}
		for _, kind := range visits {
			if rep > p.fixedReps {
				break
			}
			if err := b.plainRun(ctx, res, kind, p.fixedRate, p.fixedWindow, rep); err != nil {
				return nil, err
			}
		}
		if ab {
			if err := b.abPair(ctx, res, rep); err != nil {
				return nil, err
			}
		}
	}

	if len(p.ceilingRates) > 0 && p.phase("ceiling") {
		for _, kind := range b.targets() {
			err := b.withTarget(ctx, kind, plainConns, res, func(t *target, pid int) error {
				c := ceilingResult{target: kind}
				for _, rate := range p.ceilingRates {
					r := b.measured(pid, func() runResult {
						return openLoop(ctx, t, rate, false, p.ceilingWindow, p.tail, plainConns)
					})
					ok := passesCeiling(r)
					if !ok && ctx.Err() == nil {
						// One retry: a burst of other load on a shared
						// machine should not end the ladder.
						r = b.measured(pid, func() runResult {
							return openLoop(ctx, t, rate, false, p.ceilingWindow, p.tail, plainConns)
						})
						ok = passesCeiling(r)
					}
					c.runs = append(c.runs, r)
					b.logf("ceiling %-7s %6d req/s: p99 %s, achieved %.0f/s, %d late, %d errors: %v",
						kind, rate, ms(r.ttft.P99), r.rate, r.late, r.errCount(), ok)
					if !ok {
						break
					}
					c.best = rate
				}
				res.ceiling[kind] = c
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
	}

	if p.phase("cold") {
		if err := b.coldStarts(ctx, res); err != nil {
			return nil, err
		}
	}
	if p.phase("neighbour") {
		if err := b.neighbours(ctx, res); err != nil {
			return nil, err
		}
	}
	res.binSize, res.imageSize, res.imageNote = sizes(b.root, b.bins.gateway)
	res.deps, res.depsErr = binsize.Measure(ctx, b.root, "./functions/gateway")
	return res, nil
}

// plainConns bounds the non-streaming phase's connections.
const plainConns = 4096

// plainRun is one run of the plain phase: kind, fresh, at rate for
// window. A telemetry-on gateway's exports are counted after it
// stops, so its last flush is in.
func (b *bench) plainRun(ctx context.Context, res *results, kind string, rate int, window time.Duration, rep int) error {
	p := b.plan
	sink0 := b.sink.counts()
	err := b.withTarget(ctx, kind, plainConns, res, func(t *target, pid int) error {
		r := b.measured(pid, func() runResult {
			return openLoop(ctx, t, rate, false, window, p.tail, plainConns)
		})
		r.rep = rep
		res.add(r)
		b.logf("rep %d %-17s %5d req/s: p50 %s p99 %s p99.9 %s, achieved %.0f/s, %d late, %d errors, cpu %s/request, rss %s, other load on relay core %.0f%%",
			rep, kind, rate, ms(r.ttft.P50), ms(r.ttft.P99), ms(r.ttft.P999), r.rate, r.late, r.errCount(), us(perRequest(r)), mib(r.rssMax), r.foreign*100)
		return nil
	})
	if err != nil || kind != telemetryKind {
		return err
	}
	got := b.sink.counts().sub(sink0)
	res.sink = res.sink.add(got)
	b.logf("rep %d %s: the sink received %s", rep, kind, describeSink(got))
	return nil
}

// perRequest is the relay's CPU per completed request.
func perRequest(r runResult) time.Duration {
	if r.done == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.done)
}

// passesCeiling is a non-streaming rate held (a failing rung is tried
// twice before the ladder stops): p99 latency under the bound,
// no errors, and fewer than 1% of requests late or dropped.
func passesCeiling(r runResult) bool {
	return r.errCount() == 0 && r.ttft.P99 < ceilingP99 && r.late+r.dropped <= r.requests/100 && r.done > 0
}

// coldStarts measures, over fresh gateway processes: exec → first 200 on
// /healthz, and exec → first proxied streamed event (the stub asked for no
// TTFT by the X-Stub-TTFT header, so nothing needs subtracting).
func (b *bench) coldStarts(ctx context.Context, res *results) error {
	for i := range b.plan.coldStarts * 2 {
		event := i%2 == 1
		addr, err := freePort()
		if err != nil {
			return err
		}
		path, err := b.gatewayConfig(addr, legPlain)
		if err != nil {
			return err
		}
		t := &target{name: "gateway", base: "http://" + addr, token: b.token, client: newClient(4)}
		pr, t0, err := b.startGateway([]string{"GOMAXPROCS=1"}, path)
		if err != nil {
			return err
		}
		d, err := b.firstSuccess(ctx, t, pr, t0, event, res)
		t.close()
		b.procs.stop(pr, 3*time.Second)
		if err != nil {
			return err
		}
		if event {
			res.coldEvent = append(res.coldEvent, d)
		} else {
			res.coldHealthy = append(res.coldHealthy, d)
		}
	}
	b.logf("cold start: exec→healthy median %s, exec→first proxied event median %s (%d starts each)",
		ms(medianDur(res.coldHealthy)), ms(medianDur(res.coldEvent)), len(res.coldEvent))
	return nil
}

// firstSuccess polls the new process until the first success and returns
// the time from just before its exec. Refused connections are retried at
// once (the poller runs on another core); other failures are counted.
func (b *bench) firstSuccess(ctx context.Context, t *target, pr *proc, t0 time.Time, event bool, res *results) (time.Duration, error) {
	deadline := t0.Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-pr.exited:
			return 0, fmt.Errorf("gateway exited during cold start: %v: %s", pr.err, pr.stderr.String())
		default:
		}
		if event {
			r := t.doStream(ctx, reqOpts{ttft: "0s", tokens: "1"}, nil)
			if r.err == "" {
				return r.firstRecv.Sub(t0), nil
			}
			if r.err != "connection refused" {
				res.coldErrors[r.err]++
			}
		} else {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/healthz", nil)
			resp, err := t.client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return time.Since(t0), nil
				}
				res.coldErrors[fmt.Sprintf("healthz %d", resp.StatusCode)]++
			} else if k := errKind(err); k != "connection refused" {
				res.coldErrors[k]++
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	return 0, fmt.Errorf("cold start: no success within 10 s: %s", pr.stderr.String())
}

// sizes returns the gateway binary's size and, when an OCI image layout was
// built under bin/ (make image), the size of its
// blobs.
func sizes(root, gateway string) (bin, image int64, note string) {
	if st, err := os.Stat(gateway); err == nil {
		bin = st.Size()
	}
	dir := filepath.Join(root, "bin/oci/blobs")
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				image += info.Size()
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return bin, 0, "no image under bin/ (build one with make image)"
	default:
		return bin, image, "bin/oci blobs, every architecture in the layout"
	}
}

// startGateway starts the gateway as in production: its access log (one
// JSON line per request, on stdout) goes to a file under the bench's
// temporary folder, written by the kernel from the gateway's own fd, so no
// copy in the bench process skews the figures.
func (b *bench) startGateway(env []string, config string) (*proc, time.Time, error) {
	env = append(gatewayEnv(""), env...) // telemetry off unless env turns it on
	f, err := os.OpenFile(filepath.Join(b.tmp, "gateway-access.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close() // the child has its own copy of the fd
	return b.procs.start("gateway", b.cpus.relay, env, f, b.bins.gateway, "-config", config)
}
