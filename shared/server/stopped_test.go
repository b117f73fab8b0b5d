package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// TestStoppedStreamCharge: a client that leaves a stream after 100 token
// events (Esc in Claude Code, Ctrl-C in Codex) while the backend goes on
// is charged its prompt, the events relayed and at most the allowance
// for what was in flight (billing.StoppedAllowance), in strict mode out
// of a reservation of about 1,040. Before, each was charged its whole
// reservation: every stream that ended without the backend's bill was.
//   - Anthropic: the prompt is message_start's input counts (20 and
//     the cache's 30), not the bound.
//   - vLLM: the gateway asks continuous_usage_stats and the running
//     usage is the bill so far (20 prompt, 2 tokens a chunk: 200).
//   - OpenAI without a count: the prompt bound, the events relayed.
func TestStoppedStreamCharge(t *testing.T) {
	const events = 100
	body := `{"model":"m","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	bound := prompt.Scanner{}.Bound([]byte(body), request.ChatCompletions.Prompt()).Tokens
	for _, c := range []struct {
		kind string
		op   request.Operation
		// want is the charge, less the allowance.
		want int64
	}{
		{"anthropic", request.Messages, 50 + events},
		{"vllm", request.ChatCompletions, 20 + 2*events},
		{"openai", request.ChatCompletions, bound + events},
	} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			spy := newBudgetSpy(t, budget.Config{Mode: budget.ModeStrict}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 10_000_000}})
			asked := make(chan string, 1)
			g := gatewayOnKind(t, c.kind, func(d *Deps) { d.Budgets = spy }, startBackend(t, stoppingBackend(c.op, events, asked)))
			resp, err := http.Post(g.srv.URL+c.op.Path(), "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			sc, n := bufio.NewScanner(resp.Body), 0
			for n < events && sc.Scan() {
				if l := sc.Text(); l == "event: content_block_delta" || strings.HasPrefix(l, `data: {"id":"c"`) {
					n++
				}
			}
			resp.Body.Close() // the client leaves
			if n != events {
				t.Fatalf("read %d token events, want %d", n, events)
			}
			sent := <-asked
			if running := strings.Contains(sent, `"continuous_usage_stats":true`); running != (c.kind == "vllm") {
				t.Fatalf("%s asked continuous_usage_stats %v: %s", c.kind, running, sent)
			}
			charged, granted := lastSettle(t, spy), spy.decision().Granted
			t.Logf("%s: reserved %d, charged %d (prompt bound %d)", c.kind, granted, charged, bound)
			if charged < c.want || charged > c.want+billing.StoppedAllowance {
				t.Fatalf("charged %d of a reservation of %d: want %d and at most %d more", charged, granted, c.want, billing.StoppedAllowance)
			}
		})
	}
}

// stoppingBackend streams op's answer, events token events, then waits
// for the gateway's cancel, its bill unsent: Anthropic's message_start
// with its input counts, or chat chunks with vLLM's running usage when
// the request asked it. asked gets the body.
func stoppingBackend(op request.Operation, events int, asked chan<- string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		asked <- string(b)
		running := strings.Contains(string(b), `"continuous_usage_stats":true`)
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		if op == request.Messages {
			fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"+
				"\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":30,\"output_tokens\":1}}}\n\n")
			fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		}
		for k := 1; k <= events; k++ {
			switch {
			case op == request.Messages:
				fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n")
			case running:
				fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"xy\"}}],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", 2*k, 20+2*k)
			default:
				fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n")
			}
			fl.Flush()
		}
		<-r.Context().Done()
	}
}
