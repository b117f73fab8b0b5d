package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// openIdle opens n connections that each send one anonymous GET /healthz,
// read the answer and then stay open, idle, as a keep-alive client would.
func openIdle(t *testing.T, g *gw, n int) []net.Conn {
	t.Helper()
	var held []net.Conn
	for range n {
		c := g.rawConn(t)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection within the cap: %v %v", err, resp)
		}
		resp.Body.Close()
		held = append(held, c)
	}
	return held
}

// settleIdle waits for the server to record a round of connections as
// idle. A client reads its answer before the server's goroutine for that
// connection marks it idle (net/http sets StateIdle after the flush), so
// on a loaded machine the next round can begin first and the listener's
// "oldest idle" order, which is the server's, differs from the order the
// test opened them in: the last of one round then outlives the first of
// the next. The wait is for scheduling, not for a timer of the gateway.
func settleIdle() { time.Sleep(300 * time.Millisecond) }

// closedByServer reports whether the server closed c: a read gets EOF or a
// reset within d instead of timing out.
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && ended(err)
}

// servedWithin sends an authenticated chat request on a new connection and
// fails unless it is answered 200 within d.
func servedWithin(t *testing.T, g *gw, d time.Duration) {
	t.Helper()
	start := time.Now()
	status, body, err := serveOne(g)
	if err != nil {
		t.Fatalf("authenticated request at the cap: %v", err)
	}
	if status != http.StatusOK {
		t.Fatalf("authenticated request at the cap: %d %s", status, body)
	}
	if took := time.Since(start); took > d {
		t.Fatalf("authenticated request at the cap took %s, want under %s", took, d)
	}
}

// serveOne sends one authenticated chat request on a new connection.
func serveOne(g *gw) (status int, body []byte, err error) {
	req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+g.token("contoso"))
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, body, nil
}

// TestIdleConnectionsGiveWay: 64 anonymous keep-alive connections idle at
// max_connections: 64 do not lock anyone out: a new authenticated request
// is served at once (idle_timeout is a minute) and one of the least
// recently used idle connections is the one closed. Before idle
// connections gave way the new connection got 503 too_many_connections
// until idle_timeout.
func TestIdleConnectionsGiveWay(t *testing.T) {
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	t.Parallel()
	const max = 64
	g := startGateway(t, options{extra: fmt.Sprintf("max_connections: %d\n", max)})
	held := openIdle(t, g, max)
	servedWithin(t, g, slack)
	// One of the least recently used gave way (net/http marks a
	// connection idle just after its answer, so on a loaded host two
	// neighbours may swap places).
	var closed []int
	for i, c := range held[:8] {
		if closedByServer(c, 100*time.Millisecond) {
			closed = append(closed, i)
		}
	}
	if len(closed) != 1 {
		t.Errorf("the oldest idle connections closed: %v, want one of them", closed)
	}
	if closedByServer(held[max-1], 200*time.Millisecond) {
		t.Error("the most recently used idle connection was closed instead of the oldest")
	}
}

// TestPendingConnectionsGiveWay: 64 connections that each send half a
// request header and stall, at max_connections: 64, hold at most their
// share (a quarter of the cap): the oldest are closed, and a new
// authenticated request is served at once (read_header_timeout is 10s).
// Before they gave way they held every slot until read_header_timeout.
func TestPendingConnectionsGiveWay(t *testing.T) {
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	t.Parallel()
	const max = 64
	g := startGateway(t, options{extra: fmt.Sprintf("max_connections: %d\n", max)})
	var held []net.Conn
	for range max {
		c := g.rawConn(t)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: gw\r\n"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(1200 * time.Millisecond) // past the grace a burst of clients gets (server.pendingGrace)
	servedWithin(t, g, slack)
	closed := 0
	for _, c := range held[:max-max/4] {
		if closedByServer(c, slack) {
			closed++
		}
	}
	if closed != max-max/4 {
		t.Errorf("%d of the %d oldest half-sent connections closed, want all: the pending share is a quarter of the cap", closed, max-max/4)
	}
	if closedByServer(held[max-1], 200*time.Millisecond) {
		t.Error("the newest half-sent connection was closed: the oldest go first")
	}
}

// TestBusyConnectionsNeverClosed: at the cap with streams in flight and
// idle connections beside them, new connections take the idle ones'
// places, oldest first, and every stream ends whole (TestMaxConnections:
// with only busy connections, a new one is refused).
func TestBusyConnectionsNeverClosed(t *testing.T) {
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	t.Parallel()
	const max, busy = 8, 4
	g := startGateway(t, options{extra: fmt.Sprintf("max_connections: %d\n", max)})
	tok := g.token("contoso")
	var wg sync.WaitGroup
	errs := make(chan error, busy)
	started := make(chan struct{}, busy)
	for range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(streamBody))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("X-Stub-Interval", "200ms")
			req.Header.Set("X-Stub-Tokens", "50") // 10 s: the streams outlast the rounds on a loaded machine
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := client.Do(req)
			started <- struct{}{}
			if err != nil {
				errs <- err
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			data := sseData(body)
			if err != nil || resp.StatusCode != http.StatusOK || len(data) == 0 || data[len(data)-1] != "[DONE]" {
				errs <- fmt.Errorf("stream: status %d err %v, ended %q", resp.StatusCode, err, data)
			}
		}()
	}
	for range busy {
		<-started
	}
	idle := openIdle(t, g, max-busy)
	settleIdle()
	// Each new connection takes an idle one's place.
	fresh := openIdle(t, g, max-busy)
	settleIdle()
	for i, c := range idle {
		if !closedByServer(c, slack) {
			t.Errorf("idle connection %d still open after %d new ones", i, max-busy)
		}
	}
	// Again: the fresh ones give way in turn, never a stream.
	again := openIdle(t, g, max-busy)
	if !closedByServer(fresh[0], slack) || closedByServer(again[len(again)-1], 200*time.Millisecond) {
		t.Error("the second round did not take the first round's places, oldest first")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
