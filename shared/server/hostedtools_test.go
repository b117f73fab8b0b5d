package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/tenant"
)

// TestHostedToolCallsBounded: a Responses request with a priced web
// search and no max_tool_calls is reserved at the grant's default uses
// (2); the backend is told the same bound (max_tool_calls: 2), so a
// backend that honours it runs no more than were reserved. Before,
// nothing was written: a backend ran 300 web_search_call items, billed as
// the 2 uses reserved. A bound the client sent is kept as sent.
func TestHostedToolCallsBounded(t *testing.T) {
	cat := linearPrices(t, "1", []price.FeatureSpec{{Name: "web_search", PerUse: "0.01"}})
	rb := &recordingBackend{h: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"web_search_call","id":"ws_1","status":"completed"},{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}`)
	}}
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{SpendPerDay: 1_000_000}})
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Budgets, d.Prices = spy, cat
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {DefaultUses: 2}}}})
	}, rb)
	for _, c := range []struct {
		name, bound string
		want        float64
	}{
		{"no bound: the reserved uses written", "", 2},
		{"a null bound: the reserved uses written", `"max_tool_calls":null,`, 2},
		{"the client's bound kept", `"max_tool_calls":5,`, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"m",%s"max_output_tokens":100,"input":"hi","tools":[{"type":"web_search"}]}`, c.bound)
			resp, out := postPath(t, g, "/v1/responses", body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			if got, _ := rb.last(t)["max_tool_calls"].(float64); got != c.want {
				t.Fatalf("the backend was sent max_tool_calls %v, want %v", rb.last(t)["max_tool_calls"], c.want)
			}
			if n := strings.Count(string(rb.body), "max_tool_calls"); n != 1 {
				t.Fatalf("max_tool_calls %d times in %s", n, rb.body)
			}
		})
	}
}

// TestHostedToolCallItemsCounted: a backend that ignores max_tool_calls
// runs 300 web searches, listed as web_search_call items in the answer's
// output (a JSON answer, and a stream's response.completed). The Responses
// API's usage reports no uses, so they were charged as reserved: 2 uses,
// 0.02 USD for a bill of 3.00. Each call item is now a use.
func TestHostedToolCallItemsCounted(t *testing.T) {
	items := strings.TrimSuffix(strings.Repeat(`{"type":"web_search_call","id":"ws","status":"completed"},`, 300), ",")
	answer := `{"id":"resp_1","object":"response","status":"completed","output":[` + items +
		`,{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}`
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream %v", stream), func(t *testing.T) {
			cat := linearPrices(t, "1", []price.FeatureSpec{{Name: "web_search", PerUse: "0.01"}})
			rb := &recordingBackend{h: func(w http.ResponseWriter, r *http.Request) {
				if !stream {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, answer)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n"+
					"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":"+answer+"}\n\n")
			}}
			spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{SpendPerDay: 10_000_000}})
			g := newTestGatewayWith(t, func(d *Deps) {
				d.Budgets, d.Prices = spy, cat
				d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {DefaultUses: 2}}}})
			}, rb)
			body := fmt.Sprintf(`{"model":"m","stream":%v,"max_output_tokens":100,"input":"hi","tools":[{"type":"web_search"}]}`, stream)
			resp, out := postPath(t, g, "/v1/responses", body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			spy.settled(t)
			spy.mu.Lock()
			money := spy.money[len(spy.money)-1]
			spy.mu.Unlock()
			if searches := int64(300 * 10_000); money < searches || money > searches+1_000 {
				t.Fatalf("charged %d µUSD, want the 300 searches' %d and the tokens'", money, searches)
			}
		})
	}
}
