package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// telemetryKind is the gateway with telemetry on as Container Apps runs
// it: the same binary and config as "gateway", exporting both signals over
// OTLP/gRPC to the bench's sink (otlpSink) with the gateway's default
// sampler. The plain phase measures it beside "gateway", within each
// repetition, for the telemetry-on ÷ off target (abTargets).
const telemetryKind = "gateway-telemetry"

// The OTLP/gRPC Export methods the gateway calls (shared/telemetry/otlp):
// the sink counts exports by signal.
const (
	grpcTracesMethod  = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
	grpcMetricsMethod = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
)

// otelVars are the variables the gateway reads to export (otlp.FromEnv)
// that would send its telemetry elsewhere or turn it off. gatewayEnv sets
// each of them, so a developer's own OTEL_* environment neither turns
// telemetry on for the gateway measured without it nor redirects the
// telemetry-on one. The sampler variables are not among them: the
// bench's environment may choose another sampler (samplerEnv).
var otelVars = []string{
	"OTEL_SDK_DISABLED",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
	"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_METRIC_EXPORT_INTERVAL",
}

// gatewayEnv is the telemetry part of a gateway's environment: every
// otelVars entry empty (telemetry off), or, with sink set, both signals
// to sink over OTLP/gRPC as the Container Apps agent takes them (its
// OTEL_EXPORTER_OTLP_ENDPOINT and _PROTOCOL=grpc, and OTEL_SERVICE_NAME),
// metrics every minute (the default interval). Later entries win over
// the bench's own environment (os/exec keeps the last of a name).
func gatewayEnv(sink string) []string {
	env := make([]string, 0, len(otelVars)+1)
	for _, v := range otelVars {
		val := ""
		switch {
		case sink == "":
		case v == "OTEL_EXPORTER_OTLP_ENDPOINT":
			val = sink
		case v == "OTEL_EXPORTER_OTLP_PROTOCOL":
			val = "grpc"
		}
		env = append(env, v+"="+val)
	}
	if sink != "" {
		env = append(env, "OTEL_SERVICE_NAME=llmgw-bench")
	}
	return env
}

// The trace sampler the deploys set (bicep's container app, SAM's
// function): one trace in ten, where the gateway's own default is the
// specification's, every trace.
const (
	deploySampler      = "parentbased_traceidratio"
	deploySamplerRatio = "0.1"
)

// samplerEnv is the sampler part of the telemetry-on gateway's
// environment: the deploys' sampler, as Container Apps runs it, unless
// the bench's environment names a sampler (the gateway inherits it);
// an OTEL_TRACES_SAMPLER_ARG of its own alone sets the deploys' sampler's
// ratio.
func samplerEnv(getenv func(string) string) []string {
	if getenv("OTEL_TRACES_SAMPLER") != "" {
		return nil
	}
	env := []string{"OTEL_TRACES_SAMPLER=" + deploySampler}
	if getenv("OTEL_TRACES_SAMPLER_ARG") == "" {
		env = append(env, "OTEL_TRACES_SAMPLER_ARG="+deploySamplerRatio)
	}
	return env
}

// samplerName is the trace sampler the telemetry-on gateway runs with
// (samplerEnv), as the report names it.
func samplerName(getenv func(string) string) string {
	s, arg := getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG")
	switch {
	case s == "" && arg == "":
		return "the deploys' sampler (" + deploySampler + ", " + deploySamplerRatio + ")"
	case s == "":
		return "the deploys' sampler with OTEL_TRACES_SAMPLER_ARG=" + arg
	case arg == "":
		return "OTEL_TRACES_SAMPLER=" + s
	}
	return "OTEL_TRACES_SAMPLER=" + s + ", OTEL_TRACES_SAMPLER_ARG=" + arg
}

// otlpSink is the collector the telemetry-on gateway exports to: OTLP/gRPC
// over cleartext HTTP/2 on loopback, served by the bench process (so on
// the load generator's CPUs, never the relay's). It reads each export and
// answers OK (gRPC's trailers-only form) without decoding it, so the
// gateway pays for its telemetry and next to nothing waits on the sink; it
// counts what arrives, so the report can show that the gateway exported.
type otlpSink struct {
	srv *http.Server
	url string

	traces, metrics, other, bytes atomic.Int64
}

// sinkCounts is what the sink has received.
type sinkCounts struct {
	traces, metrics, other, bytes int64
}

func (c sinkCounts) sub(d sinkCounts) sinkCounts {
	return sinkCounts{c.traces - d.traces, c.metrics - d.metrics, c.other - d.other, c.bytes - d.bytes}
}

func (c sinkCounts) add(d sinkCounts) sinkCounts {
	return sinkCounts{c.traces + d.traces, c.metrics + d.metrics, c.other + d.other, c.bytes + d.bytes}
}

// startSink listens on a loopback port and serves until close.
func startSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp sink: %w", err)
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "bench: otlp sink:", err)
		}
	}()
	return s, nil
}

func (s *otlpSink) serve(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	s.bytes.Add(n)
	switch r.URL.Path {
	case grpcTracesMethod:
		s.traces.Add(1)
	case grpcMetricsMethod:
		s.metrics.Add(1)
	default:
		s.other.Add(1)
	}
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Grpc-Status", "0")
	w.WriteHeader(http.StatusOK)
}

func (s *otlpSink) counts() sinkCounts {
	return sinkCounts{s.traces.Load(), s.metrics.Load(), s.other.Load(), s.bytes.Load()}
}

func (s *otlpSink) close() { _ = s.srv.Close() }

// plainVisits is the order in which repetition rep of the plain phase
// visits targets: telemetryKind right beside "gateway", before it in
// even repetitions and after it in odd ones, so that neither side of the
// telemetry A/B always runs first (a drift of the machine within a
// repetition then favours each side alike).
func plainVisits(targets []string, rep int) []string {
	i := slices.Index(targets, "gateway")
	if i < 0 {
		return slices.Clone(targets)
	}
	pair := []string{"gateway", telemetryKind}
	if rep%2 == 0 {
		pair[0], pair[1] = pair[1], pair[0]
	}
	out := slices.Clone(targets[:i])
	out = append(out, pair...)
	return append(out, targets[i+1:]...)
}

// defaultABRate is plan.abRate's default: half the published rate.
const defaultABRate = 1500

// abVisits is the order of the telemetry A/B's pair in repetition rep,
// alternating as plainVisits does.
func abVisits(rep int) []string { return plainVisits([]string{"gateway"}, rep) }

// plainTargets is targets in the plain table's order: telemetryKind right
// after "gateway" when it was measured.
func plainTargets(targets []string, measured bool) []string {
	if !measured {
		return targets
	}
	return plainVisits(targets, 1)
}

// describeSink is what the sink received, in a few words.
func describeSink(c sinkCounts) string {
	s := fmt.Sprintf("%d trace and %d metric exports, %.0f KiB", c.traces, c.metrics, float64(c.bytes)/1024)
	if c.other > 0 {
		s += fmt.Sprintf(", %d to other paths", c.other)
	}
	return s
}

// sinkNote is the report's sentence on the telemetry-on gateway, "" when
// it did not run.
func sinkNote(sampler string, c sinkCounts, measured bool) string {
	if !measured {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%s* is the same gateway with telemetry on as Container Apps runs it: both signals over OTLP/gRPC (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, `OTEL_SERVICE_NAME`), metrics every minute, %s, to a sink in the bench process (on the load generator's CPU) that reads each export and discards it. Over the run the sink received %s.",
		telemetryKind, sampler, describeSink(c))
	if c.traces == 0 {
		b.WriteString(" **No trace export arrived: the telemetry-on figures do not measure telemetry.**")
	}
	return b.String()
}

// abSlices is how many measured windows each side of the telemetry A/B
// gets in one repetition, the two gateways taking turns.
const abSlices = 4

// abSettle is how long the A/B leaves both gateways idle before it first
// reads their CPU and after its last window: longer than the batch span
// processor's timed export (5 s), so the spans of the warm-up go out
// before the count and those of the last window within it.
const abSettle = 5500 * time.Millisecond

// abPair is one repetition of the telemetry A/B: both gateways (telemetry
// off and on) run side by side on the relay core, each idle while the
// other takes the load, in abSlices windows each of abWindow/2, in turns,
// in two halves with abSettle idle between them, each side first in one
// (the first of all alternating by repetition). Each gateway's CPU is
// counted from before its first window to after its last, idle time
// included, so the exports a telemetry-on gateway sends between its
// windows count against its own requests; a fresh process's first
// seconds (its heap, its first connections) count for neither. A drift
// of the machine meets both sides alike, within seconds.
func (b *bench) abPair(ctx context.Context, res *results, rep int) error {
	p := b.plan
	order := abVisits(rep)
	relays, stop, err := b.startSideBySide(ctx, order, plainConns)
	defer stop()
	if err != nil {
		return err
	}
	sink0 := b.sink.counts()
	if err := sleepCtx(ctx, abSettle); err != nil {
		return err
	}
	count := b.countSideBySide(relays)
	t0 := time.Now()
	runs := make([]runResult, len(relays))
	lats := make([][]time.Duration, len(relays))
	// Two halves, each side opening one after the idle settle: the side
	// that opened a repetition came out up to 5% dearer than in the
	// other order (telemetry first 1.08×, 1.10×; second 1.045×–1.052×).
	half := abSlices * len(relays) / 2
	for s := range abSlices * len(relays) {
		if s == half {
			if err := sleepCtx(ctx, abSettle); err != nil {
				return err
			}
		}
		i := s % len(relays)
		if s >= half {
			i = len(relays) - 1 - i
		}
		r := openLoop(ctx, relays[i].tgt, p.abRate, false, p.abWindow/2, p.tail, plainConns)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		runs[i] = mergeSlice(runs[i], r)
		lats[i] = append(lats[i], r.lat...)
	}
	if err := sleepCtx(ctx, abSettle); err != nil {
		return err
	}
	if err := count.finish(runs, time.Since(t0)); err != nil {
		return err
	}
	for i := range runs {
		run := &runs[i]
		run.rep, run.ttft = rep, summarize(lats[i])
		res.add(*run)
		b.logf("rep %d %-17s %5d req/s, %d windows of %s: p50 %s p99 %s p99.9 %s, %d late, %d errors, cpu %s/request, rss %s, other load on relay core %.0f%%",
			rep, order[i], p.abRate, abSlices, p.abWindow/2, ms(run.ttft.P50), ms(run.ttft.P99), ms(run.ttft.P999), run.late, run.errCount(), us(perRequest(*run)), mib(run.rssMax), run.foreign*100)
	}
	got := b.sink.counts().sub(sink0)
	res.sink = res.sink.add(got)
	b.logf("rep %d %s: the sink received %s", rep, telemetryKind, describeSink(got))
	return nil
}

// mergeSlice adds one A/B window to the run so far (latencies apart: the
// caller keeps them and summarizes them once).
func mergeSlice(acc, r runResult) runResult {
	if acc.errors == nil {
		acc = runResult{target: r.target, mode: r.mode, level: r.level, errors: map[string]int{}}
	}
	acc.elapsed += r.elapsed
	acc.requests += r.requests
	acc.done += r.done
	acc.late += r.late
	acc.dropped += r.dropped
	for k, v := range r.errors {
		acc.errors[k] += v
	}
	acc.rate = float64(acc.done) / acc.elapsed.Seconds()
	return acc
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// startSideBySide starts and warms a relay of each kind on the relay
// core, in order, for an A/B; stop stops every one started, also when
// err says one failed.
func (b *bench) startSideBySide(ctx context.Context, kinds []string, conns int) (relays []*relay, stop func(), err error) {
	stop = func() {
		for _, r := range relays {
			b.stopRelay(r)
		}
	}
	for _, kind := range kinds {
		r, err := b.startRelay(ctx, legPlain, kind, conns, nil)
		if err != nil {
			return relays, stop, err
		}
		relays = append(relays, r)
		if err := b.warm(ctx, r.tgt); err != nil {
			return relays, stop, err
		}
	}
	return relays, stop, nil
}

// sideBySide counts the CPU of relays running side by side on the relay
// core (the A/Bs), from countSideBySide to finish.
type sideBySide struct {
	relays   []*relay
	core     int
	busy0    time.Duration
	busyErr  error
	before   []procStat
	samplers []*sampler
}

func (b *bench) countSideBySide(relays []*relay) *sideBySide {
	c := &sideBySide{relays: relays, core: b.cpus.relay[0], before: make([]procStat, len(relays)), samplers: make([]*sampler, len(relays))}
	c.busy0, c.busyErr = cpuBusy(c.core)
	for i, r := range relays {
		c.before[i], _ = readProc(r.proc.pid())
		c.samplers[i] = startSampler(r.proc.pid(), 500*time.Millisecond)
	}
	return c
}

// finish fills in runs[i] for relays[i]: its CPU, its largest RSS and the
// other load on the core over wall (what neither relay took).
func (c *sideBySide) finish(runs []runResult, wall time.Duration) error {
	busy1, busyErr := cpuBusy(c.core)
	var relayCPU time.Duration
	for i, r := range c.relays {
		after, err := readProc(r.proc.pid())
		runs[i].rssMax = c.samplers[i].finish()
		if err != nil {
			return fmt.Errorf("%s: %w", r.kind, err)
		}
		runs[i].cpu, runs[i].sysCPU = after.cpu-c.before[i].cpu, after.sys-c.before[i].sys
		relayCPU += runs[i].cpu
	}
	if c.busyErr == nil && busyErr == nil {
		for i := range runs {
			runs[i].foreign = max(float64(busy1-c.busy0-relayCPU), 0) / float64(wall)
		}
	}
	return nil
}
