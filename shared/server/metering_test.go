package server

// Metering a hostile tenant cannot bend. Each test sends what an attacker
// sent on the earlier main, through backend doubles that behave as real
// backends do: one that echoes the request's tools before its usage, one
// that obeys only the cap field its kind documents, one that reports usage
// that cannot be true.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/prompt"
)

// echoingResponses answers /v1/responses like OpenAI: the Response object
// echoes the request's tools (and text.format) before its real usage, as a
// JSON answer of about size bytes or as a stream ending in
// response.completed.
func echoingResponses(input, output int64, size int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req map[string]json.RawMessage
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		tools := req["tools"]
		if tools == nil {
			tools = json.RawMessage("[]")
		}
		text := strings.Repeat("x", max(size-600, 1))
		obj := fmt.Sprintf(`{"id":"resp_%d","object":"response","status":"completed","tools":%s,"output":[{"type":"message","content":[{"type":"output_text","text":%q}]}],"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}}`,
			len(b), tools, text, input, output, input+output)
		if string(req["stream"]) == "true" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_%d\",\"object\":\"response\",\"tools\":%s}}\n\n", len(b), tools)
			fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n")
			fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":%s}\n\n", obj)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, obj)
	}
}

func postPath(t *testing.T, g *testGateway, path, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(g.srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// lastSettle is the amount of the spy's last settle.
func lastSettle(t *testing.T, spy *budgetSpy) int64 {
	t.Helper()
	calls := spy.settled(t)
	n, err := strconv.ParseInt(strings.TrimPrefix(calls[len(calls)-1], "settle "), 10, 64)
	if err != nil {
		t.Fatalf("last call %q is not a settle", calls[len(calls)-1])
	}
	return n
}

const usageSchemaTool = `[{"type":"function","name":"f","parameters":{"type":"object","properties":{},"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0}}}]`

// TestMeteringEchoedUsage: a tenant that puts a zero usage object in its
// tool schema (which the Responses object echoes before the real usage)
// is charged the real usage, in both modes, streamed or not, and for a
// JSON answer far larger than the relay's buffer.
func TestMeteringEchoedUsage(t *testing.T) {
	for _, mode := range []string{budget.ModeStrict, budget.ModeEstimate} {
		for _, tc := range []struct {
			name   string
			stream bool
			size   int
		}{{"json", false, 1000}, {"json over 32 KiB", false, 100 << 10}, {"stream", true, 1000}} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				spy := newBudgetSpy(t, budget.Config{Mode: mode}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 1_000_000}})
				g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, echoingResponses(3000, 17, tc.size))
				body := fmt.Sprintf(`{"model":"m","stream":%v,"input":"hi","tools":%s}`, tc.stream, usageSchemaTool)
				resp, b := postPath(t, g, "/v1/responses", body)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %.300s", resp.StatusCode, b)
				}
				if got := lastSettle(t, spy); got != 3017 {
					t.Fatalf("charged %d, want the real usage 3017 (the echoed schema says 0)", got)
				}
				if l := g.lastLog(t); l["prompt_tokens"] != float64(3000) || l["completion_tokens"] != float64(17) {
					t.Fatalf("log usage %v/%v", l["prompt_tokens"], l["completion_tokens"])
				}
			})
		}
	}
}

// TestMeteringChatEchoedUsage: a chat answer whose tool call arguments or
// message hold a usage-shaped object is charged its top-level usage.
func TestMeteringChatEchoedUsage(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{Mode: budget.ModeEstimate}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 1_000_000}})
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[{"message":{"role":"assistant","content":null,"metadata":{"usage":{"prompt_tokens":0,"completion_tokens":0}}}}],"usage":{"prompt_tokens":500,"completion_tokens":40,"total_tokens":540}}`)
	}))
	if resp, b := g.post(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if got := lastSettle(t, spy); got != 540 {
		t.Fatalf("charged %d, want 540", got)
	}
}

// TestMeteringImpossibleUsage: usage that cannot be true (negative,
// overflowing, or fewer output tokens than the events relayed) is not
// trusted: the charge is the larger of the reservation and what the
// gateway counted, never 0.
func TestMeteringImpossibleUsage(t *testing.T) {
	chunk := "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"
	for _, tc := range []struct{ name, usage string }{
		{"overflowing prompt tokens", `{"prompt_tokens":9223372036854775807,"completion_tokens":1,"total_tokens":0}`},
		{"beyond int64", `{"prompt_tokens":99999999999999999999,"completion_tokens":1,"total_tokens":1}`},
		{"negative", `{"prompt_tokens":-5000,"completion_tokens":30,"total_tokens":-4970}`},
		{"below the events relayed", `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`},
	} {
		for _, mode := range []string{budget.ModeStrict, budget.ModeEstimate} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				spy := newBudgetSpy(t, budget.Config{Mode: mode}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 1_000_000}})
				g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, strings.Repeat(chunk, 30)+"data: {\"choices\":[],\"usage\":"+tc.usage+"}\n\ndata: [DONE]\n\n")
				}))
				resp, b := g.post(t, `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				d := spy.decision()
				// What the gateway counted: the prompt bound and 30 token events.
				if got := lastSettle(t, spy); got < max(d.Granted, 30) {
					t.Fatalf("charged %d; want at least the reservation %d and the 30 events relayed", got, d.Granted)
				}
			})
		}
	}
}

// TestMeteringCapField: a backend that reads only the cap field its kind
// documents (vLLM's chat reads max_tokens) gets the cap there, whichever
// field the client used; a cap field the operation does not have is
// refused before any backend call.
func TestMeteringCapField(t *testing.T) {
	t.Run("max_output_tokens on chat is refused", func(t *testing.T) {
		spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 20000}})
		rb := &recordingBackend{}
		g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, rb)
		resp, b := g.post(t, `{"model":"m","max_output_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 400 || errorCode(t, b) != "unsupported_parameter" || !strings.Contains(string(b), `"param":"max_output_tokens"`) {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if rb.calls() != 0 {
			t.Fatal("the backend was called")
		}
	})
	for _, tc := range []struct {
		name, path, body string
	}{
		{"max_tokens on responses", "/v1/responses", `{"model":"m","input":"hi","max_tokens":5}`},
		{"max_completion_tokens on completions", "/v1/completions", `{"model":"m","prompt":"hi","max_completion_tokens":5}`},
		{"max_tokens on embeddings", "/v1/embeddings", `{"model":"m","input":"hi","max_tokens":5}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newTestGateway(t, &recordingBackend{})
			resp, b := postPath(t, g, tc.path, tc.body)
			if resp.StatusCode != 400 || errorCode(t, b) != "unsupported_parameter" {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
		})
	}
	t.Run("vllm gets the cap in max_tokens", func(t *testing.T) {
		spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 20000}})
		var got map[string]any
		backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &got)
			// vLLM obeys max_tokens only; without it, it generates 16,000.
			n := 16000
			if v, ok := got["max_tokens"].(float64); ok {
				n = int(v)
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`, n, n+10)
		}))
		t.Cleanup(backend.Close)
		g := gatewayOnKind(t, "vllm", func(d *Deps) { d.Budgets = spy }, backend.URL)
		resp, b := g.post(t, `{"model":"m","max_completion_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if got["max_tokens"] != float64(1) {
			t.Fatalf("vLLM got max_tokens %v, want 1: %v", got["max_tokens"], got)
		}
		if n := lastSettle(t, spy); n > spy.decision().Granted {
			t.Fatalf("charged %d over the reservation %d", n, spy.decision().Granted)
		}
	})
}

// TestMeteringPromptArrays: every prompt of a legacy completions batch,
// times n, is reserved.
func TestMeteringPromptArrays(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 1_000_000}})
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, &recordingBackend{h: func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":5000,"total_tokens":5050}}`)
	}})
	prompts := strings.TrimSuffix(strings.Repeat(`"p",`, 50), ",")
	resp, b := postPath(t, g, "/v1/completions", `{"model":"m","prompt":[`+prompts+`],"max_tokens":100}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if d := spy.decision(); d.Granted < 50*100 {
		t.Fatalf("reserved %d for 50 prompts of 100 tokens", d.Granted)
	}
	if got := lastSettle(t, spy); got != 5050 {
		t.Fatalf("charged %d", got)
	}
}

// TestMeteringEscapedImageType: a content part whose type is spelled with
// escapes is bounded as the part every backend reads.
func TestMeteringEscapedImageType(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 1_000_000}})
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, echoingResponses(10, 1, 100))
	resp, b := postPath(t, g, "/v1/responses", `{"model":"m","max_output_tokens":16,"input":[{"role":"user","content":[{"type":"input_im\u0061ge","image_url":"https://example.com/cat.png"}]}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if d := spy.decision(); d.Granted < prompt.DefaultImageTokens {
		t.Fatalf("reserved %d for an image part", d.Granted)
	}
}

// TestMeteringContinuedResponse: a follow-up reserves the stored
// response's recorded total on top of its own input.
func TestMeteringContinuedResponse(t *testing.T) {
	spy := newBudgetSpy(t, budget.Config{}, nil, budget.TenantBudget{Tenant: "t1", Limits: budget.Limits{TokensPerMinute: 1_000_000}})
	g := newTestGatewayWith(t, func(d *Deps) { d.Budgets = spy }, echoingResponses(100000, 32, 100))
	resp, b := postPath(t, g, "/v1/responses", `{"model":"m","input":"hi","max_output_tokens":16}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var first struct{ ID string }
	_ = json.Unmarshal(b, &first)
	lastSettle(t, spy)
	resp, b = postPath(t, g, "/v1/responses", `{"model":"m","input":"more","max_output_tokens":16,"previous_response_id":"`+first.ID+`"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if d := spy.decision(); d.Granted < 100032 {
		t.Fatalf("follow-up reserved %d; the stored context alone is 100,032", d.Granted)
	}
}
