package main

// The access log's timings against a backend that is slow to its first
// token.

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
)

// TestAddedMsNeverNegative: with a backend that holds its first token for
// 30 ms after its headers, every stream's added_ms is at least 0 and at
// most its duration. Before, it was the client's headers minus
// the backend's first event: about -30 on each of these streams.
func TestAddedMsNeverNegative(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{TTFT: 30 * time.Millisecond}})
	tok := g.token("contoso")
	for i := range 4 {
		body := streamBody
		if i%2 == 1 {
			body = chatBody
		}
		resp := g.post("/v1/chat/completions", tok, body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		log := g.accessLog(resp.Header.Get("X-Request-Id"))
		added, _ := log["added_ms"].(float64)
		dur, _ := log["duration_ms"].(float64)
		if added < 0 || added > dur {
			t.Errorf("%s: added_ms %v, want 0 ≤ added_ms ≤ duration_ms %v", body, added, dur)
		}
	}
}
