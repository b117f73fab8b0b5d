package main

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
)

// TestShutdownEndsStreamsInBand: SIGTERM (run's context ends) with 20
// streams that would outlast the 5 s grace: each stream gets the error
// event with code "shutdown" before the grace ends (and no [DONE]), every
// request's access-log line is written with outcome "shutdown" and its
// budget charged, and run returns within the grace. Before, the streams were cut at the end of the grace without an event (unexpected
// EOF), lines went missing, the rest said client_gone.
func TestShutdownEndsStreamsInBand(t *testing.T) {
	t.Parallel()
	const streams = 20
	g := startGateway(t, options{tenants: budgetRow(1<<30, 1000)})
	tok := g.token("budgeted")
	type result struct {
		id, last string
		done     bool
		err      error
	}
	results := make(chan result, streams)
	firsts := make(chan struct{}, streams)
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(budgetBody(10)))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("X-Stub-Interval", "500ms")
			req.Header.Set("X-Stub-Tokens", "100") // 50 s: past the grace
			resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
			if err != nil {
				firsts <- struct{}{}
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			r := result{id: resp.Header.Get("X-Request-Id")}
			br := bufio.NewReader(resp.Body)
			first := true
			for {
				ev, err := readEvent(br)
				if first {
					firsts <- struct{}{}
					first = false
				}
				if ev != "" {
					r.last = ev
					r.done = r.done || strings.Contains(ev, "[DONE]")
				}
				if err != nil {
					break
				}
			}
			results <- r
		})
	}
	for range streams {
		<-firsts
	}
	took := stopTimed(t, g, wg.Wait)
	close(results)
	if took > 5*time.Second+slack {
		t.Errorf("run returned %s after SIGTERM; the grace is 5s", took)
	}
	for r := range results {
		if r.err != nil {
			t.Errorf("stream: %v", r.err)
			continue
		}
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		data, _ := strings.CutPrefix(strings.TrimSpace(r.last), "data: ")
		if r.done || json.Unmarshal([]byte(data), &e) != nil || e.Error.Code != "shutdown" {
			t.Errorf("stream %s ended with %q (done %t), want the shutdown error event", r.id, r.last, r.done)
		}
		l := g.accessLog(r.id)
		if l["outcome"] != "shutdown" {
			t.Errorf("stream %s logged outcome %v, want shutdown", r.id, l["outcome"])
		}
		if c, _ := l["budget_charged"].(float64); c <= 0 {
			t.Errorf("stream %s: budget_charged %v, want it settled", r.id, l["budget_charged"])
		}
	}
	if strings.Contains(g.logs.String(), "not settled") {
		t.Errorf("a budget was not settled:\n%s", g.logs.String())
	}
}

// stopTimed stops g as SIGTERM would, runs then (when not nil) while
// run stops, and says how long run took to return.
func stopTimed(t *testing.T, g *gw, then func()) time.Duration {
	t.Helper()
	stopped := time.Now()
	g.Stop()
	if then != nil {
		then()
	}
	select {
	case <-g.Exited:
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return")
	}
	return time.Since(stopped)
}

// blackhole accepts connections and never answers: a collector that
// stalls every export.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// TestShutdownFlushBoundedByFlushTimeout: with the collector blackholed
// and a 10 s grace, the SIGTERM flush of telemetry gives up at
// telemetry.flush_timeout (1 s), so run returns in about that. Before,
// the flush was given what was left of the grace instead, and
// exit took the whole grace and more.
func TestShutdownFlushBoundedByFlushTimeout(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + blackhole(t),
		"OTEL_METRIC_EXPORT_INTERVAL": "3600000",
		"GATEWAY_CONFIG_OVERLAY":      `{"shutdown_grace": "10s", "telemetry": {"flush_timeout": "1s"}}`,
	}
	g := startGateway(t, options{env: env})
	resp := g.post("/v1/chat/completions", g.token("contoso"), `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// 1 s of flush (the exporter's stop at close adds none: it stopped
	// already), and slack: far below the 10 s grace.
	if took := stopTimed(t, g, nil); took > time.Second+slack {
		t.Errorf("run returned %s after SIGTERM with flush_timeout 1s (grace 10s)", took)
	}
	if !strings.Contains(g.logs.String(), `"msg":"telemetry flush failed"`) {
		t.Errorf("no failed flush logged:\n%s", g.logs.String())
	}
}

// TestShutdownFlushBoundedByGrace: with the collector blackholed, a
// flush_timeout far past a 2 s grace and a stream that would outlast the
// grace, the SIGTERM flush gets only what the stream left of the grace,
// and run returns within the grace: neither the export in flight nor
// the exporter's stop holds the process past it.
func TestShutdownFlushBoundedByGrace(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + blackhole(t),
		"OTEL_METRIC_EXPORT_INTERVAL": "3600000",
		"GATEWAY_CONFIG_OVERLAY":      `{"shutdown_grace": "2s", "telemetry": {"flush_timeout": "1m"}}`,
	}
	g := startGateway(t, options{env: env})
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+g.token("contoso"))
	req.Header.Set("X-Stub-Interval", "500ms")
	req.Header.Set("X-Stub-Tokens", "100") // 50 s: past the grace
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
		t.Fatalf("first event: %v", err)
	}
	if took := stopTimed(t, g, nil); took > grace+slack {
		t.Errorf("run returned %s after SIGTERM with a %s grace (flush_timeout 1m)", took, grace)
	}
	var flush struct {
		Msg     string  `json:"msg"`
		FlushMS float64 `json:"flush_ms"`
	}
	for line := range strings.Lines(g.logs.String()) {
		if json.Unmarshal([]byte(line), &flush) == nil && flush.Msg == "telemetry flush failed" {
			break
		}
		flush.Msg = ""
	}
	if flush.Msg == "" {
		t.Fatalf("no failed flush logged:\n%s", g.logs.String())
	}
	if flush.FlushMS > float64(grace.Milliseconds()) {
		t.Errorf("the flush took %.0f ms, more than the %s grace", flush.FlushMS, grace)
	}
}

// TestShutdownDrainsKeptSettles: a stream ends while Redis does not
// answer, so its settle is kept for replay; the replica is then idle, so
// no later call replays it, and it is scaled in (SIGTERM). Before, the
// kept settle went with the process: its reservation stayed charged to
// its lease end. Now it is replayed within the grace when the store is
// back, and logged as a line to reconcile (tenant, request id, tokens)
// when it is not.
func TestShutdownDrainsKeptSettles(t *testing.T) {
	t.Parallel()
	for _, back := range []bool{true, false} {
		t.Run(map[bool]string{true: "store back", false: "store down"}[back], func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			p := redistest.NewProxy(t, rs.Addr(), 0)
			env := map[string]string{"REDIS_URL": p.URL(), "GATEWAY_CONFIG_OVERLAY": `{"shutdown_grace": "3s"}`}
			g := startGateway(t, options{tenants: budgetRow(1<<30, 1000), limiter: redisLimiter("open"), env: env, extra: "budget: {timeout: 2s}\n"})
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(budgetBody(10)))
			req.Header.Set("Authorization", "Bearer "+g.token("budgeted"))
			req.Header.Set("X-Stub-Interval", "50ms")
			req.Header.Set("X-Stub-Tokens", "10")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			id := resp.Header.Get("X-Request-Id")
			br := bufio.NewReader(resp.Body)
			if _, err := readEvent(br); err != nil {
				t.Fatal(err)
			}
			p.Blackhole(true) // the stream ends while the store does not answer
			for {
				if _, err := readEvent(br); err != nil {
					break
				}
			}
			resp.Body.Close()
			waitLog(t, g, "kept for replay")
			if back {
				p.Blackhole(false)
			}
			stopTimed(t, g, nil)
			logs := g.logs.String()
			line := `"request_id":"` + id + `"`
			switch {
			case back && !strings.Contains(logs, "was replayed"):
				t.Fatalf("the kept settle was not replayed at shutdown:\n%s", logs)
			case !back && !strings.Contains(logs, "reconcile it by hand"):
				t.Fatalf("the kept settle was not logged to reconcile:\n%s", logs)
			case !strings.Contains(logs, line):
				t.Fatalf("no line names the request %s:\n%s", id, logs)
			}
		})
	}
}

// waitLog waits, within a generous bound, until g logged msg.
func waitLog(t *testing.T, g *gw, msg string) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !strings.Contains(g.logs.String(), msg); {
		if time.Now().After(end) {
			t.Fatalf("never logged %q:\n%s", msg, g.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
