package main

// The caps on what anyone can hold: the connections (max_connections)
// and a tenant's requests in flight (max_concurrent_requests).

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
)

// TestMaxConnections: with max_connections busy connections open (streams
// in flight) a new connection is answered 503 too_many_connections
// (OpenAI's shape, Retry-After, Connection: close) and logged, but for a
// liveness probe (200), and no
// stream is cut; once one closes, a new one is served. Before, there was
// no cap; idle connections give way instead
// (TestIdleConnectionsGiveWay).
func TestMaxConnections(t *testing.T) {
	if raceEnabled {
		t.Skip("connection timing under the race detector: see raceEnabled")
	}
	t.Parallel()
	const max = 6
	g := startGateway(t, options{extra: fmt.Sprintf("max_connections: %d\n", max)})
	tok := g.token("contoso")
	var held []*http.Response
	for range max {
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(streamBody))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-Stub-Interval", "100ms")
		req.Header.Set("X-Stub-Tokens", "20")
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stream within the cap: %v %v", err, resp)
		}
		held = append(held, resp) // busy
	}
	overCap := func(request string) *http.Response {
		over := g.rawConn(t)
		_, _ = io.WriteString(over, request)
		_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(over), nil)
		if err != nil {
			t.Fatalf("over the cap: no answer to %q: %v", request, err)
		}
		return resp
	}
	// A liveness probe is answered over the cap too: the replica serves.
	if resp := overCap("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"); resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz over the cap: %s, want 200", resp.Status)
	}
	resp := overCap("GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n")
	if resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Errorf("over the cap: Retry-After %q, close %t", resp.Header.Get("Retry-After"), resp.Close)
	}
	e := openAIError(t, resp, http.StatusServiceUnavailable, "too_many_connections")
	if !strings.Contains(e["message"].(string), "max_connections") {
		t.Errorf("message %q does not name max_connections", e["message"])
	}
	eventually(t, "the refusal's log line", func() bool {
		return strings.Contains(g.logs.String(), `"msg":"connection refused: max_connections reached"`)
	})
	for i, resp := range held {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if data := sseData(body); err != nil || len(data) == 0 || data[len(data)-1] != "[DONE]" {
			t.Errorf("stream %d cut at the cap: %v %q", i, err, data)
		}
	}
	// They left; a new connection is served.
	eventually(t, "a connection served after the streams ended", func() bool {
		resp, err := http.Get(g.URL + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestTenantConcurrencyCap: a tenant holding max_concurrent_requests
// requests gets 429 too_many_concurrent_requests (OpenAI's shape,
// Retry-After) for one more, while another tenant is served. Before,
// there was no cap.
func TestTenantConcurrencyCap(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{extra: "max_concurrent_requests: 2\n"})
	tok := g.token("contoso")
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := g.post("/v1/chat/completions", tok, streamBody, stub.TTFTHeader, "6s")
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	defer wg.Wait()
	eventually(t, "two streams held at the backend", func() bool { return g.Stubs[0].Stats().ActiveStreams == 2 })
	refused := g.post("/v1/chat/completions", tok, chatBody)
	if refused.Header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	e := openAIError(t, refused, http.StatusTooManyRequests, "too_many_concurrent_requests")
	if msg := e["message"].(string); !strings.Contains(msg, `"contoso"`) || !strings.Contains(msg, "limit 2") {
		t.Errorf("message %q does not name the tenant and its limit", msg)
	}
	// The neighbour is served meanwhile.
	resp := g.post("/v1/chat/completions", g.token("fabrikam"), chatBody)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the neighbour got %d", resp.StatusCode)
	}
}
