package main

import (
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"
)

func TestParseEmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line string
		want int64
		ok   bool
	}{
		{"stub chunk", `data: {"id":"x","choices":[],"usage":null,"stub_emit_ns":1764470000123456789}` + "\n", 1764470000123456789, true},
		{"last field wins", `data: {"stub_emit_ns":1,"x":{"stub_emit_ns":22}}`, 22, true},
		{"done", "data: [DONE]\n", 0, false},
		{"no digits", `data: {"stub_emit_ns":null}`, 0, false},
		{"overflow", `data: {"stub_emit_ns":99999999999999999999}`, 0, false},
		{"empty", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseEmit([]byte(tt.line))
			if got != tt.want || ok != tt.ok {
				t.Fatalf("parseEmit(%q) = %d, %v; want %d, %v", tt.line, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestQuantileNearestRank(t *testing.T) {
	t.Parallel()
	v := make([]time.Duration, 1000)
	for i := range v {
		v[i] = time.Duration(i + 1)
	}
	tests := []struct {
		name string
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{"p50 of 1..1000", v, 0.50, 500},
		{"p99 of 1..1000", v, 0.99, 990},
		{"p99.9 of 1..1000", v, 0.999, 999},
		{"max", v, 1, 1000},
		{"p99 of one", []time.Duration{7}, 0.99, 7},
		{"p50 of two", []time.Duration{1, 2}, 0.5, 1},
		{"empty", nil, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quantile(tt.in, tt.q); got != tt.want {
				t.Fatalf("quantile(q=%v) = %d, want %d", tt.q, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	v := []time.Duration{5, 1, 4, 2, 3}
	d := summarize(v)
	if d.N != 5 || d.P50 != 3 || d.Max != 5 || d.Mean != 3 || d.P99 != 5 {
		t.Fatalf("summarize = %+v", d)
	}
	if !slices.IsSorted(v) {
		t.Fatal("summarize did not sort in place")
	}
	if (summarize(nil) != Dist{}) {
		t.Fatal("empty input: want zero Dist")
	}
}

// TestHistogramBuckets checks that the buckets tile the values without
// gaps or overlaps and stay within 1/64 of their value.
func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	prevHi := int64(-1)
	for i := range histBuckets {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if lo >= 128 && float64(hi-lo+1)/float64(lo) > 1.0/64+1e-12 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/64", i, lo, hi)
		}
		for _, v := range []int64{lo, hi, lo + (hi-lo)/2} {
			if b := bucketOf(v); b != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, b, i)
			}
		}
		prevHi = hi
		if hi < 0 || i == histBuckets-1 {
			break
		}
	}
}

func TestHistogramQuantileMatchesExact(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	v := make([]time.Duration, 20000)
	for i := range v {
		// Log-normal-ish latencies from 10 µs to ~100 ms.
		v[i] = time.Duration(10_000 * (1 + rng.ExpFloat64()*rng.ExpFloat64()*50))
		h.Add(v[i])
	}
	slices.Sort(v)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact, got := quantile(v, q), h.Quantile(q)
		if diff := float64(got-exact) / float64(exact); diff > 0.02 || diff < -0.02 {
			t.Errorf("q=%v: histogram %v, exact %v (%.1f%% off)", q, got, exact, diff*100)
		}
	}
	if h.Quantile(1) != v[len(v)-1] {
		t.Errorf("max: %v, want %v", h.Quantile(1), v[len(v)-1])
	}
	if h.Count() != int64(len(v)) {
		t.Errorf("count %d", h.Count())
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 {
		t.Error("empty histogram: want 0")
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		in          []float64
		med, lo, hi float64
	}{
		{"odd", []float64{3, 1, 2}, 2, 1, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5, 1, 4},
		{"one", []float64{7}, 7, 7, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, lo, hi := median(tt.in)
			if m != tt.med || lo != tt.lo || hi != tt.hi {
				t.Fatalf("median(%v) = %v, %v, %v", tt.in, m, lo, hi)
			}
		})
	}
}

func TestParseProcFiles(t *testing.T) {
	t.Parallel()
	// The command name holds a space and a parenthesis: fields count from the last ')'.
	stat := []byte("4242 (gate way) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 3 0 100 1000000 2000 18446744073709551615\n")
	cpu, err := parseStatCPU(stat)
	if err != nil || cpu != 3*time.Second {
		t.Fatalf("parseStatCPU = %v, %v; want 3s (300 ticks)", cpu, err)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Fatal("parseStatCPU accepted garbage")
	}
	if ns, err := parseSchedstat([]byte("7158104 905185 2\n")); err != nil || ns != 7158104 {
		t.Fatalf("parseSchedstat = %v, %v; want 7158104ns", ns, err)
	}
	for _, bad := range []string{"", "x 1 2", "-5 1 2"} {
		if _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Fatalf("parseSchedstat accepted %q", bad)
		}
	}
	// This process's own: at least what it has spent so far, to the
	// nanosecond (not in 10 ms steps).
	own, err := schedRuntime(os.Getpid())
	if err != nil || own <= 0 {
		t.Fatalf("schedRuntime(self) = %v, %v", own, err)
	}
	status := []byte("Name:\tgateway\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n")
	if got := statusKB(status, "VmRSS:"); got != 10240 {
		t.Fatalf("VmRSS = %d", got)
	}
	if got := statusKB(status, "VmHWM:"); got != 20480 {
		t.Fatalf("VmHWM = %d", got)
	}
	procStat := []byte("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 100 0 50 900 7 10 20 30 0 0\ncpu1 1 1 1 1 1 1 1 1 0 0\n")
	busy, err := parseCPUBusy(procStat, 0)
	if err != nil || busy != 210*time.Second/clockTicks {
		t.Fatalf("parseCPUBusy = %v, %v; want 2.1s", busy, err)
	}
	if _, err := parseCPUBusy(procStat, 5); err == nil {
		t.Fatal("parseCPUBusy found a cpu5 line")
	}
}

func TestPlanCPUs(t *testing.T) {
	t.Parallel()
	two, err := planCPUs([]int{0, 1})
	if err != nil || !slices.Equal(two.relay, []int{0}) || !slices.Equal(two.stub, []int{1}) || !slices.Equal(two.loadgen, []int{1}) {
		t.Fatalf("2 CPUs: %+v, %v", two, err)
	}
	sixteen, err := planCPUs([]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	if err != nil || len(sixteen.relay) != 1 || len(sixteen.stub)+len(sixteen.loadgen) != 15 || slices.Contains(sixteen.stub, 0) {
		t.Fatalf("16 CPUs: %+v, %v", sixteen, err)
	}
	if _, err := planCPUs([]int{3}); err == nil {
		t.Fatal("1 CPU accepted")
	}
}
