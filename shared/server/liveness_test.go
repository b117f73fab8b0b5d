package server

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// TestLivenessAtCap: beyond max_connections the listener answers a whole
// liveness probe (GET or HEAD /healthz) 200 as the handler would, and
// refuses everything else: another path, a readiness question, a head not
// read whole.
func TestLivenessAtCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		head string
		live bool
	}{
		{"GET /healthz", "GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.30\r\n\r\n", true},
		{"HEAD /healthz", "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"a query", "GET /healthz?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"no headers", "GET /healthz HTTP/1.0\r\n\r\n", true},
		{"another header named alike", "GET /healthz HTTP/1.1\r\nX-Llmgw-Probe-Note: readiness\r\n\r\n", true},
		{"the readiness question", "GET /healthz HTTP/1.1\r\nHost: x\r\nx-llmgw-probe: readiness\r\n\r\n", false},
		{"/readyz", "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"a request", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", false},
		{"a POST to /healthz", "POST /healthz HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"a longer path", "GET /healthzz HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"a head not read whole", "GET /healthz HTTP/1.1\r\nHost: x\r\n", false},
		{"nothing", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := LivenessAtCap([]byte(tt.head))
			if !tt.live {
				if got != nil {
					t.Fatalf("answered %q, want refused (nil)", got)
				}
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
			if err != nil {
				t.Fatalf("answer %q: %v", got, err)
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			if resp.StatusCode != http.StatusOK || !resp.Close || body.String() != `{"status":"ok"}` {
				t.Fatalf("answer %d close=%v %q, want 200, Connection: close and /healthz's body", resp.StatusCode, resp.Close, body.String())
			}
		})
	}
}
