//go:build unix

package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
)

// TestFDLimitRaised: at start the soft open-file limit is the hard one,
// and the gateway logs it with max_connections (the limit bounds the connections, backend dials included).
func TestFDLimitRaised(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{extra: "max_connections: 1000\n"})
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	if l.Cur != l.Max {
		t.Errorf("soft open-file limit %d, hard %d: not raised", l.Cur, l.Max)
	}
	for _, line := range g.logs.Lines() {
		var m struct {
			Msg            string
			FDLimit        uint64 `json:"fd_limit"`
			MaxConnections int    `json:"max_connections"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "gateway listening" {
			if m.FDLimit != l.Cur || m.MaxConnections != 1000 {
				t.Fatalf("listening line: fd_limit %d max_connections %d; want %d and 1000: %s", m.FDLimit, m.MaxConnections, l.Cur, line)
			}
			return
		}
	}
	t.Fatal("no listening line")
}

// TestFDLimitClampsConnections: under ulimit -n 256 (soft and hard, so
// nothing can raise it) the gateway lowers max_connections from 4,096 to
// what the descriptors hold beside its store's pools, logs it, and 400
// concurrent streams are either served whole or refused 503
// too_many_connections, never 502 for want of a descriptor; /healthz
// answers within a second all through it. Before the clamp it only
// warned: accepted connections took every descriptor and 0 of 400
// streams were served. With the Redis store (the limiter and a token
// quota on it) the reserve also holds every connection its pools may
// open: before, it held 64 and the pools 80, and 18 to 32 of 400 streams
// got 502 too many open files. The gateway runs in a child process (this
// test binary, re-executed) so that the limit binds it alone.
func TestFDLimitClampsConnections(t *testing.T) {
	runAsChild()
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	t.Parallel()
	for _, tc := range []struct {
		name  string
		redis bool
	}{{"memory", false}, {"redis", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var g *gw // its config, issuer and stub serve the child
			reserve := 0
			if tc.redis {
				rs := redistest.Start(t)
				g = storeGateway(t, rs.URL(), "closed", "", nil)
				reserve = storeFDShare(256) // four pools of 16

			} else {
				g = startGateway(t, options{})
			}
			c := childGateway(t, "TestFDLimitClampsConnections", g, 256)
			want, err := connsWithin(4096, 256, reserve)
			if err != nil {
				t.Fatal(err)
			}
			if c.MaxConnections != want || c.FDLimit != 256 {
				t.Fatalf("listening with max_connections %d fd_limit %d, want %d and 256", c.MaxConnections, c.FDLimit, want)
			}
			if logs := c.Logs.String(); !strings.Contains(logs, "max_connections lowered to what the open-file limit allows") ||
				!strings.Contains(logs, fmt.Sprintf(`"store_connections":%d`, reserve)) {
				t.Errorf("no line for the lowered cap with %d store connections:\n%s", reserve, logs)
			}
			tok := g.token("contoso")
			if tc.redis {
				tok = g.token("budgeted")
			}
			healthz := probeHealthz(t, c.URL)
			got := fdBurst(c.URL, tok, 400)
			slowest, failed := healthz()
			if got["served"] == 0 || got["served"]+got["refused"] != 400 {
				t.Errorf("of 400 streams under ulimit -n 256: %v; want each served whole or refused 503", got)
			}
			t.Logf("under ulimit -n 256, max_connections %d: %v; slowest /healthz %s", want, got, slowest.Round(time.Millisecond))
			if failed != "" {
				t.Errorf("/healthz during the burst: %s", failed)
			}
		})
	}
}

// fdBurst sends n concurrent streams to the gateway at url and counts
// their outcomes: served (whole), refused (503 too_many_connections) or
// what else came.
func fdBurst(url, tok string, n int) map[string]int {
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			outcome := func() string {
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(streamBody))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("X-Stub-Interval", "50ms")
				req.Header.Set("X-Stub-Tokens", "20")
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 40 * time.Second}
				resp, err := client.Do(req)
				if err != nil {
					return "error: " + err.Error()
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				switch data := sseData(body); {
				case resp.StatusCode == http.StatusOK && err == nil && len(data) > 0 && data[len(data)-1] == "[DONE]":
					return "served"
				case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "too_many_connections"):
					return "refused"
				default:
					return fmt.Sprintf("%d %.80s", resp.StatusCode, body)
				}
			}()
			mu.Lock()
			got[outcome]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// healthzBound is how long a liveness probe waits for /healthz.
const healthzBound = time.Second

// probeHealthz asks url's /healthz every 100ms, each on a connection of
// its own (as a kubelet's probe does), until the function it returns is
// called; that reports the slowest answer and the first probe that failed
// or outlasted healthzBound ("" when none did).
func probeHealthz(t *testing.T, url string) func() (slowest time.Duration, failed string) {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	var slowest time.Duration
	var failed string
	go func() {
		defer close(done)
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * healthzBound}
		for {
			start := time.Now()
			resp, err := client.Get(url + "/healthz")
			took := time.Since(start)
			slowest = max(slowest, took)
			switch {
			case err != nil:
				failed = cmp.Or(failed, err.Error())
			case resp.StatusCode != http.StatusOK:
				failed = cmp.Or(failed, resp.Status)
			case took > healthzBound:
				failed = cmp.Or(failed, fmt.Sprintf("answered in %s, more than %s", took.Round(time.Millisecond), healthzBound))
			}
			if resp != nil {
				resp.Body.Close()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() (time.Duration, string) {
		close(stop)
		<-done
		return slowest, failed
	}
}
