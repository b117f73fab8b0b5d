package relayfloor

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
)

// BenchmarkFloorRequest is functions/gateway's BenchmarkGatewayRequest
// through the floor: the same client, the same stub answers (8 tokens 1 ms
// apart), the same bodies, and a bearer token of a JWT's size the floor
// passes on unread. Its B/op and allocs/op count the whole process
// (client, floor and stub), so they stand beside the gateway's: what
// the gateway allocates above them is its own work (docs/benchmarks.md).
//
//	go test -run '^$' -bench FloorRequest -benchmem -benchtime 2000x ./scripts/relayfloor
func BenchmarkFloorRequest(b *testing.B) {
	_, base := startFloor(b, stub.Options{TTFT: time.Millisecond, Interval: time.Millisecond, Tokens: 8})
	auth := "Bearer " + strings.Repeat("x", 700)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for _, c := range []struct{ name, body string }{
		{"chat_stream", `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"chat_json", `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			do := func() {
				req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(c.body))
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", auth)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, cerr := io.Copy(io.Discard, resp.Body)
				if cerr != nil {
					b.Fatal(cerr)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n == 0 {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
			do()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				do()
			}
		})
	}
}
