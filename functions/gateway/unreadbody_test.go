package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestUnreadBodyGivesWay: connections that announce a body (Content-Length:
// 1000), send no token and no body, read their 401 at once and then hold
// nothing: at max_connections the next authenticated request is served
// within seconds. Before, net/http read the announced body after the early
// answer under the 10 s body_read_timeout, the connection busy all along,
// and every other client got 503 too_many_connections meanwhile. The
// control: the anonymous clients still read their answer whole.
func TestUnreadBodyGivesWay(t *testing.T) {
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	t.Parallel()
	const max = 8
	g := startGateway(t, options{extra: fmt.Sprintf("max_connections: %d\n", max)})
	for i := range max {
		c := g.rawConn(t) // held open until the test ends (rawConn's cleanup)
		if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(slack))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: no early answer: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusUnauthorized || len(body) == 0 {
			t.Fatalf("connection %d: %d %q %v, want the whole 401", i, resp.StatusCode, body, err)
		}
	}
	servedWithin(t, g, slack)
}
