package main

import (
	"bytes"
	"context"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/telemetry/otlp"
)

// run is a clean run of rep with CPU per request and per event both v µs.
func abRun(target string, rep int, v float64, foreign float64) runResult {
	d := time.Duration(v * 1000)
	return runResult{target: target, rep: rep, done: 1, events: 1, cpu: d, cpuPerEvt: d, foreign: foreign, errors: map[string]int{}}
}

func TestPairedRatios(t *testing.T) {
	t.Parallel()
	bad := abRun("gateway", 2, 50, 0)
	bad.errors["status 502"] = 1
	none := abRun("gateway", 3, 50, 0)
	none.done = 0
	// A stream in 3,000 cut short keeps a repetition; four do not.
	rare := abRun("floor", 1, 10, 0)
	rare.requests, rare.done, rare.errors["truncated"] = 3000, 2999, 1
	rare.cpu *= 2999
	many := abRun("floor", 2, 10, 0)
	many.requests, many.done, many.errors["truncated"] = 3000, 2996, 4
	many.cpu *= 2996
	for _, tt := range []struct {
		name     string
		num, den []runResult
		want     []float64
	}{
		{"paired by repetition, in its order", []runResult{abRun("a", 2, 30, 0), abRun("a", 1, 20, 0), abRun("a", 3, 44, 0)},
			[]runResult{abRun("b", 1, 10, 0), abRun("b", 2, 20, 0), abRun("b", 3, 40, 0)}, []float64{2, 1.5, 1.1}},
		{"a repetition one side lacks is left out", []runResult{abRun("a", 1, 20, 0), abRun("a", 2, 30, 0)},
			[]runResult{abRun("b", 2, 10, 0)}, []float64{3}},
		{"errors, nothing done or zero CPU leave a repetition out", []runResult{abRun("a", 1, 20, 0), bad, none},
			[]runResult{abRun("b", 1, 10, 0), abRun("b", 2, 10, 0), abRun("b", 3, 10, 0), abRun("b", 4, 0, 0)}, []float64{2}},
		{"errors on at most 0.1% of the requests are borne", []runResult{abRun("a", 1, 20, 0), abRun("a", 2, 20, 0)},
			[]runResult{rare, many}, []float64{2}},
		{"zero on the denominator's side", []runResult{abRun("a", 1, 20, 0)}, []runResult{abRun("b", 1, 0, 0)}, nil},
		{"one pair per repetition", []runResult{abRun("a", 1, 20, 0), abRun("a", 1, 30, 0)}, []runResult{abRun("b", 1, 10, 0)}, []float64{2}},
		{"nothing", nil, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := pairedRatios(tt.num, tt.den, cpuReq)
			if len(got) != len(tt.want) {
				t.Fatalf("pairedRatios = %v, want %v", got, tt.want)
			}
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-9 {
					t.Fatalf("pairedRatios = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestRatioVerdict(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		ratios []float64
		noisy  bool
		med    float64
		mark   string
	}{
		{"median within the bound", []float64{1.20, 1.01, 1.03}, false, 1.03, "**pass**"},
		{"at the bound", []float64{1.05, 1.05, 1.05}, false, 1.05, "**pass**"},
		{"median above, one below", []float64{0.90, 1.08, 1.10}, false, 1.08, "**MISS**"},
		{"even count", []float64{1.00, 1.02, 1.08, 1.10}, false, 1.05, "**pass**"},
		{"noisy keeps the mark", []float64{1.10, 1.10, 1.10}, true, 1.10, "**MISS** (noisy)"},
		{"two repetitions are not enough", []float64{1.00, 1.00}, false, 1.00, "n/a"},
		{"none", nil, false, math.NaN(), "n/a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			med, mark := ratioVerdict(tt.ratios, abRatioMax, tt.noisy)
			if mark != tt.mark || (math.Abs(med-tt.med) > 1e-9 && !(math.IsNaN(med) && math.IsNaN(tt.med))) {
				t.Fatalf("ratioVerdict(%v) = %v %q, want %v %q", tt.ratios, med, mark, tt.med, tt.mark)
			}
		})
	}
}

func TestPlainVisits(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		targets []string
		rep     int
		want    []string
	}{
		{"odd: off first", []string{"direct", "floor", "nginx", "gateway"}, 1, []string{"direct", "floor", "nginx", "gateway", telemetryKind}},
		{"even: on first", []string{"direct", "floor", "nginx", "gateway"}, 2, []string{"direct", "floor", "nginx", telemetryKind, "gateway"}},
		{"beside the gateway wherever it is", []string{"gateway", "floor"}, 3, []string{"gateway", telemetryKind, "floor"}},
		{"no gateway, no telemetry", []string{"direct", "floor"}, 1, []string{"direct", "floor"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.targets)
			if got := plainVisits(in, tt.rep); !slices.Equal(got, tt.want) {
				t.Fatalf("plainVisits(%v, %d) = %v, want %v", tt.targets, tt.rep, got, tt.want)
			}
			if !slices.Equal(in, tt.targets) {
				t.Fatalf("plainVisits changed its argument: %v", in)
			}
		})
	}
}

// TestGatewayEnv reads the environment the bench gives a gateway as the
// gateway does (otlp.FromEnv), over a developer's own OTEL_* settings:
// off exports nothing wherever the developer points, on exports both
// signals over gRPC to the sink with the deploys' sampler (samplerEnv)
// and the default interval.
func TestGatewayEnv(t *testing.T) {
	t.Parallel()
	developer := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://collector.invalid:4318",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://collector.invalid:4318/v1/traces",
		"OTEL_TRACES_EXPORTER=none", "OTEL_METRIC_EXPORT_INTERVAL=1000", "OTEL_SDK_DISABLED=true",
	}
	// getenv applies env in order, the last of a name winning, as os/exec
	// builds a child's environment.
	getenv := func(env []string) func(string) string {
		m := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return func(k string) string { return m[k] }
	}
	off, err := otlp.FromEnv(getenv(append(slices.Clone(developer), gatewayEnv("")...)))
	if err != nil {
		t.Fatal(err)
	}
	if off.Enabled() {
		t.Fatalf("telemetry off exports: %+v", off)
	}
	const sink = "http://127.0.0.1:4317"
	on, err := otlp.FromEnv(getenv(slices.Concat(developer, gatewayEnv(sink), samplerEnv(func(string) string { return "" }))))
	if err != nil {
		t.Fatal(err)
	}
	if on.TracesURL != sink+grpcTracesMethod || on.MetricsURL != sink+grpcMetricsMethod || !on.TracesGRPC || !on.MetricsGRPC {
		t.Errorf("not both signals to the sink over gRPC: traces %q (grpc %v), metrics %q (grpc %v)", on.TracesURL, on.TracesGRPC, on.MetricsURL, on.MetricsGRPC)
	}
	if on.Interval != otlp.DefaultInterval || on.Sampler != "parentbased_traceidratio" || on.SamplerRatio != 0.1 || on.ServiceName != "llmgw-bench" {
		t.Errorf("interval %s, sampler %s %v, service %q: not as Container Apps runs it", on.Interval, on.Sampler, on.SamplerRatio, on.ServiceName)
	}
}

// TestSamplerName: the telemetry-on gateway runs with the deploys'
// sampler unless the bench's environment names its own (samplerEnv),
// and the report names the sampler it ran with.
func TestSamplerName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env     map[string]string
		want    string
		sampler string
		ratio   float64
	}{
		{nil, "the deploys' sampler (parentbased_traceidratio, 0.1)", "parentbased_traceidratio", 0.1},
		{map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, "OTEL_TRACES_SAMPLER=always_on", "always_on", 1},
		{map[string]string{"OTEL_TRACES_SAMPLER_ARG": "0.5"}, "the deploys' sampler with OTEL_TRACES_SAMPLER_ARG=0.5", "parentbased_traceidratio", 0.5},
		{map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1"}, "OTEL_TRACES_SAMPLER=traceidratio, OTEL_TRACES_SAMPLER_ARG=1", "traceidratio", 1},
	} {
		bench := func(k string) string { return tt.env[k] }
		if got := samplerName(bench); got != tt.want {
			t.Errorf("samplerName(%v) = %q, want %q", tt.env, got, tt.want)
		}
		// The gateway's environment: the bench's, then samplerEnv's
		// entries, the last of a name winning.
		gw := maps.Clone(tt.env)
		if gw == nil {
			gw = map[string]string{}
		}
		for _, kv := range samplerEnv(bench) {
			k, v, _ := strings.Cut(kv, "=")
			gw[k] = v
		}
		c, err := otlp.FromEnv(func(k string) string { return gw[k] })
		if err != nil || c.Sampler != tt.sampler || c.SamplerRatio != tt.ratio {
			t.Errorf("%v: the gateway runs %s %v (%v), want %s %v", tt.env, c.Sampler, c.SamplerRatio, err, tt.sampler, tt.ratio)
		}
	}
}

// TestSinkAnswersGRPC sends the sink what the gateway's exporter sends:
// an HTTP/2 cleartext POST to each Export method. Each must be answered
// with gRPC status 0 and counted by signal.
func TestSinkAnswersGRPC(t *testing.T) {
	t.Parallel()
	s, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &protocols}}
	for _, p := range []string{grpcTracesMethod, grpcTracesMethod, grpcMetricsMethod, "/elsewhere"} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.url+p, bytes.NewReader(make([]byte, 100)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/grpc")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "0" {
			t.Fatalf("%s: %s %d grpc-status %q", p, resp.Proto, resp.StatusCode, resp.Header.Get("Grpc-Status"))
		}
	}
	if got, want := s.counts(), (sinkCounts{traces: 2, metrics: 1, other: 1, bytes: 400}); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}

// abResults is results with reps interleaved repetitions of the closed
// loop (gateway, floor, nginx at 100 and 500 streams) and of the plain
// phase (gateway with telemetry off and on).
func abResults(reps int, foreign float64) *results {
	p := quickPlan()
	p.levels = []int{100, 500}
	res := newResults(p, cpuPlan{total: 2, relay: []int{0}, stub: []int{1}, loadgen: []int{1}})
	res.targets = []string{"direct", "floor", "nginx", "gateway"}
	res.nginx = nginxPeer{bin: "/usr/sbin/nginx", version: "nginx/1.22.1"}
	res.telemetry, res.sampler = true, samplerName(func(string) string { return "" })
	res.sink = sinkCounts{traces: 6, metrics: 3, bytes: 300 << 10}
	// Per event (the A/B): the gateway 1.02× the floor at 100 streams in
	// every repetition, 1.10× at 500; nginx 20 µs in the closed loop. Per request: telemetry on
	// 1.04× off in every repetition.
	for rep := 1; rep <= reps; rep++ {
		drift := float64(rep) // the machine slows down rep by rep: ratios stay
		for _, n := range p.levels {
			g := 1.02
			if n == 500 {
				g = 1.10
			}
			// The closed loop's gateway is 1.30× its floor: the targets
			// read the A/B's runs, not these.
			for t, v := range map[string]float64{"floor": 30 * drift, "nginx": 20 * drift, "gateway": 39 * drift} {
				r := abRun(t, rep, v, foreign)
				r.mode, r.level = "closed", n
				res.add(r)
			}
			for t, v := range map[string]float64{"floor": 40 * drift, "gateway": 40 * g * drift} {
				r := abRun(t, rep, v, foreign)
				r.mode, r.level = abEventsMode, n
				res.add(r)
			}
		}
		for t, v := range map[string]float64{"gateway": 300 * drift, telemetryKind: 312 * drift, "floor": 280 * drift} {
			rate := p.abRate
			if t == "floor" {
				rate = p.fixedRate // the plain table's: not the A/B's
			}
			r := abRun(t, rep, v, foreign)
			r.mode, r.level = "open-plain", rate
			r.requests, r.rate = 2*rate, float64(rate)
			res.add(r)
		}
	}
	return res
}

func TestABTargets(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		reps  int
		other float64
		want  []string // in the markdown
	}{
		{"three quiet repetitions", 3, 0.02, []string{
			"### Interleaved A/B targets",
			"| CPU per non-streaming request (1500 req/s), telemetry on ÷ off, ≤ 1.05 | on 624.0 µs, off 600.0 µs | 1.04, 1.04, 1.04 | 1.04× | allocations per request",
			"the sink received 6 trace and 3 metric exports, 300 KiB | 2% (max 2%) | **pass** |",
			"| CPU per relayed event at 100 streams, gateway ÷ floor, ≤ 1.05 | gateway 81.6 µs, floor 80.0 µs | 1.02, 1.02, 1.02 | 1.02× | nginx 40.0 µs in the closed loop, where the gateway measured 78.0 µs; gateway ÷ nginx 1.95× (1.95, 1.95, 1.95, one after the other) | 2% (max 2%) | **pass** |",
			"| CPU per relayed event at 500 streams, gateway ÷ floor, ≤ 1.05 | gateway 88.0 µs, floor 80.0 µs | 1.10, 1.10, 1.10 | 1.10× |",
			"| 2% (max 2%) | **MISS** |",
			"| machine noise: other load on the relay core ≤ 10% in every run above | 18 runs |",
			"| 2% (max 2%) | **quiet** |",
			"[benchmarks.md](docs/benchmarks.md#allocations-per-request)",
			"*gateway-telemetry* is the same gateway with telemetry on", "the deploys' sampler (parentbased_traceidratio, 0.1)",
			"| floor | ", "| 560.0 µs (280.0 µs–840.0 µs) |",
		}},
		{"noisy", 3, 0.30, []string{"| 30% (max 30%) | **pass** (noisy) |", "| 30% (max 30%) | **MISS** (noisy) |", "| 30% (max 30%) | **NOISY** |"}},
		{"two repetitions", 2, 0.02, []string{"| 1.04, 1.04 | 1.04× (2 of 3 repetitions) |", "| 1.02, 1.02 | 1.02× (2 of 3 repetitions) |", "| n/a |"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := newReport(abResults(tt.reps, tt.other), ".")
			md := rep.markdown(nil, "docs/bench")
			for _, w := range tt.want {
				if !strings.Contains(md, w) {
					t.Errorf("report lacks %q", w)
				}
			}
			if strings.Contains(md, "<no value>") || strings.Contains(md, "%!") {
				t.Errorf("report has a formatting slip:\n%s", md)
			}
			_, ab, _ := strings.Cut(md, "### Interleaved A/B targets")
			ab, _, _ = strings.Cut(ab, "**Streams per core:**")
			if tt.reps >= minABReps && strings.Contains(ab, "| n/a |") {
				t.Errorf("a target is n/a with %d repetitions:\n%s", tt.reps, ab)
			}
			if sum := rep.summary(); !strings.Contains(sum, "== interleaved A/B targets") || strings.Contains(sum, "%!") || strings.Contains(sum, "**") {
				t.Errorf("summary:\n%s", sum)
			}
		})
	}
}

func TestSaturated(t *testing.T) {
	t.Parallel()
	run := func(late, dropped int, rate float64) runResult {
		return runResult{level: 3000, requests: 6000, late: late, dropped: dropped, rate: rate}
	}
	for _, tt := range []struct {
		name string
		runs []runResult
		want int
	}{
		{"held", []runResult{run(0, 0, 3000), run(60, 0, 2940)}, 0},
		{"late", []runResult{run(61, 0, 3000)}, 1},
		{"dropped", []runResult{run(30, 31, 3000)}, 1},
		{"rate not reached", []runResult{run(0, 0, 2939)}, 1},
		{"each run counted", []runResult{run(100, 0, 3000), run(0, 0, 3000), run(0, 0, 1000)}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := saturated(tt.runs); got != tt.want {
				t.Fatalf("saturated = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestABTargetsSaturated: a telemetry A/B whose runs fell behind the rate
// keeps its mark with "(saturated)" and says why.
func TestABTargetsSaturated(t *testing.T) {
	t.Parallel()
	res := abResults(3, 0)
	res.runs[runKey{telemetryKind, "open-plain", res.plan.abRate}][1].late = 500
	md := newReport(res, ".").markdown(nil, "docs/bench")
	for _, w := range []string{"1 of 6 runs fell behind the rate", "| **pass** (saturated) |"} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}

// TestABTargetsAtThePublishedRate: with -ab-rate equal to -rate the pair
// runs once, at the published rate, and the plain table shows the
// telemetry-on gateway beside the others.
func TestABTargetsAtThePublishedRate(t *testing.T) {
	t.Parallel()
	res := abResults(3, 0)
	for _, kind := range []string{"gateway", telemetryKind} {
		for _, x := range res.runs[runKey{kind, "open-plain", res.plan.abRate}] {
			x.level, x.requests, x.rate = res.plan.fixedRate, 2*res.plan.fixedRate, float64(res.plan.fixedRate)
			res.add(x)
		}
		delete(res.runs, runKey{kind, "open-plain", res.plan.abRate})
	}
	res.plan.abRate = res.plan.fixedRate
	md := newReport(res, ".").markdown(nil, "docs/bench")
	for _, w := range []string{"| CPU per non-streaming request (3000 req/s), telemetry on ÷ off, ≤ 1.05 | on 624.0 µs, off 600.0 µs | 1.04, 1.04, 1.04 | 1.04× | floor 560.0 µs; allocations",
		"| gateway | ", "| gateway-telemetry | ", "| 624.0 µs (312.0 µs–936.0 µs) |"} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}

// TestABTargetsWithoutTraces: a telemetry-on gateway that exported no
// trace measured no telemetry, so its target is n/a and the report says
// why.
func TestABTargetsWithoutTraces(t *testing.T) {
	t.Parallel()
	res := abResults(3, 0)
	res.sink = sinkCounts{metrics: 3}
	md := newReport(res, ".").markdown(nil, "docs/bench")
	for _, w := range []string{"No trace export arrived", "0 trace and 3 metric exports, 0 KiB | 0% (max 0%) | n/a |"} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q", w)
		}
	}
}
