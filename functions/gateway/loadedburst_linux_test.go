//go:build linux

package main

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/gateway/internal/testing/redistest"
)

// spinEnv, when set, makes TestRedisLoadedBurst's binary a busy loop
// pinned to CPU 0 instead: the saturated core of the burst.
const spinEnv = "GATEWAY_SPIN_CPU0"

// burstEnv sets TestRedisLoadedBurst's number of concurrent first
// requests (scripts/storeburst runs it with 200).
const burstEnv = "GATEWAY_BURST_REQUESTS"

// burstTimeoutEnv, when set, is both stores' timeout in the burst
// instead of their defaults (scripts/storeburst compares them).
const burstTimeoutEnv = "GATEWAY_BURST_TIMEOUT"

// defaultBurst is the burst make test sends: large enough to queue
// behind both stores' pools (twenty connections each on two cores) and
// the busy core, small enough for make test's time.
const defaultBurst = 100

// TestRedisLoadedBurst: two fresh gateway processes (replicas) on one
// healthy redis-server,
// with the request limiter (failing closed) and a token quota on the
// store at their default timeouts, while another process keeps CPU 0
// busy, answer a burst of concurrent first requests without refusing
// one. A store timeout measures the store's answer, not the replica's
// own queue on a busy core: before the defaults were chosen from this
// burst, 200 requests here got about fifty 503s. The burst is
// defaultBurst requests ($GATEWAY_BURST_REQUESTS to change it).
func TestRedisLoadedBurst(t *testing.T) {
	runAsChild()
	if os.Getenv(spinEnv) != "" {
		spin()
	}
	if raceEnabled {
		t.Skip("the burst's timing under the race detector: see raceEnabled")
	}
	n := defaultBurst
	if s := os.Getenv(burstEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of requests", burstEnv, s)
		}
	}
	rs := redistest.Start(t)
	g := storeGateway(t, rs.URL(), "closed", os.Getenv(burstTimeoutEnv), nil) // its config, issuer and stub serve the replicas
	tok := g.token("budgeted")
	busyCPU0(t)
	children := []*child{childGateway(t, "TestRedisLoadedBurst", g, 0), childGateway(t, "TestRedisLoadedBurst", g, 0)}
	replicas := []*gw{{URL: children[0].URL}, {URL: children[1].URL}}

	outcomes := make([]storeOutcome, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		g := replicas[i%2]
		wg.Go(func() {
			<-start
			// A stream of a second, as a chat answer's: the replica
			// relays every open stream while the later takes wait.
			outcomes[i] = storeRequestBody(g, tok, budgetBody(10), "X-Stub-Interval", "50ms", "X-Stub-Tokens", "20")
		})
	}
	close(start)
	wg.Wait()
	refused := map[string]int{}
	took := make([]time.Duration, 0, n)
	for _, o := range outcomes {
		if o.status != http.StatusOK {
			refused[fmt.Sprintf("%d %s", o.status, o.code)]++
		}
		took = append(took, o.elapsed)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("%d concurrent first requests on two gateways, CPU 0 busy, store timeouts %s: refused %v; median %s, p99 %s, slowest %s",
		n, cmp.Or(os.Getenv(burstTimeoutEnv), "default"), refused, took[n/2].Round(time.Millisecond), took[n*99/100].Round(time.Millisecond), took[n-1].Round(time.Millisecond))
	if len(refused) > 0 {
		for _, c := range children {
			for _, l := range c.Logs.Lines() {
				if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
					t.Log(l)
				}
			}
		}
		t.Fatalf("a healthy store refused a loaded burst: %v", refused)
	}
}

// busyCPU0 starts this test binary as a busy loop pinned to CPU 0 until
// the test ends: one core saturated, as a neighbour or the replica's own
// work would.
func busyCPU0(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisLoadedBurst$")
	cmd.Env = append(os.Environ(), spinEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// spin pins its thread to CPU 0 and keeps it busy until the process is
// killed.
func spin() {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(0)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintln(os.Stderr, "sched_setaffinity:", err)
		os.Exit(3)
	}
	for x := 0; ; x++ {
		_ = x
	}
}
