package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/scripts/stub"
)

// The fixture backend answers with fixed bytes, so the two hosts' streams
// can be compared with what the backend sent byte for byte (the stub stamps
// every event with its clock).
const (
	fixtureModel = "fixture-model"
	fixtureJSON  = `{"id":"chatcmpl-fixed","object":"chat.completion","created":1700000000,"model":"fixture-model",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello world"},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`
	fixtureHead = `data: {"id":"chatcmpl-fixed","object":"chat.completion.chunk","created":1700000000,"model":"fixture-model",`
)

// fixtureEvents is the fixture's stream; the usage-only chunk is at index
// usageEvent and goes out only when the request asked for usage.
var fixtureEvents = []string{
	fixtureHead + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n",
	fixtureHead + `"choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n",
	fixtureHead + `"choices":[{"index":0,"delta":{"content":" world \u00e9\\n"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n",
	fixtureHead + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n",
	fixtureHead + `"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}` + "\n\n",
	"data: [DONE]\n\n",
}

const usageEvent = 4

// fixtureStream is what a client gets: every event, the usage chunk only
// when it asked for it.
func fixtureStream(withUsage bool) string {
	var b strings.Builder
	for i, ev := range fixtureEvents {
		if i != usageEvent || withUsage {
			b.WriteString(ev)
		}
	}
	return b.String()
}

// fixtureBackend is an OpenAI backend that answers with the fixture.
func fixtureBackend(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+backendKey {
			http.Error(w, "fixture: wrong path or key", http.StatusUnauthorized)
			return
		}
		var req struct {
			Stream        bool `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, fixtureJSON)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i, ev := range fixtureEvents {
			if i == usageEvent && !req.StreamOptions.IncludeUsage {
				continue
			}
			if _, err := io.WriteString(w, ev); err != nil || rc.Flush() != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// contractGateway starts the in-process gateway with the contract's
// tenants: contoso (large bucket), tiny (a bucket of tinyBucket), acme
// (the fixture model).
const tinyBucket = 2

func contractGateway(t *testing.T) *gw {
	t.Helper()
	fixture := fixtureBackend(t)
	return startGateway(t, options{
		tenants: fmt.Sprintf("  - {id: tiny, models: [llama], requests: %d, interval: 1h}\n", tinyBucket) +
			"  - {id: acme, models: [" + fixtureModel + "], requests: 1000, interval: 1h}\n",
		extra: "  - name: fixture\n    kind: openai\n    models: {" + fixtureModel + ": \"\"}\n    endpoints:\n" +
			fmt.Sprintf("      - {url: %q, api_key_env: BACKEND_KEY}\n", fixture),
	})
}

// newRequest builds a client request; the host fills in where it goes.
func newRequest(t *testing.T, method, path, token, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r, err := http.NewRequest(method, "http://gateway.invalid"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	r.Header.Set("User-Agent", "contract-test/1")
	return r
}

func mint(t *testing.T, g *gw, c devissuer.Claims) string {
	t.Helper()
	if c.Tenant == "" {
		c.Tenant = "contoso"
	}
	if c.Audience == nil {
		c.Audience = []string{testAudience}
	}
	if c.Subject == "" {
		c.Subject = "user-1"
	}
	tok, err := g.Issuer.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// contractCase is one end-to-end request and what any host must answer.
type contractCase struct {
	name   string
	req    func() *http.Request // a fresh request per send
	before int                  // identical requests sent first (to drain a bucket)
	check  func(t *testing.T, r reply)
}

func wantError(status int, code string) func(t *testing.T, r reply) {
	return func(t *testing.T, r reply) {
		t.Helper()
		if r.status != status {
			t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
		}
		if got := errorCode(t, r); got != code {
			t.Errorf("code %q, want %q", got, code)
		}
	}
}

func wantAuthError(t *testing.T, r reply) {
	t.Helper()
	wantError(http.StatusUnauthorized, "invalid_token")(t, r)
	if got := r.header.Get("WWW-Authenticate"); got != `Bearer error="invalid_token"` {
		t.Errorf("WWW-Authenticate %q", got)
	}
}

func wantRateHeaders(t *testing.T, r reply) {
	t.Helper()
	for _, h := range []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"} {
		if r.header.Get(h) == "" {
			t.Errorf("%d lacks %s", r.status, h)
		}
	}
}

func wantStream(want string) func(t *testing.T, r reply) {
	return func(t *testing.T, r reply) {
		t.Helper()
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		for h, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
			if got := r.header.Get(h); got != v {
				t.Errorf("%s = %q, want %q", h, got, v)
			}
		}
		if string(r.body) != want {
			t.Errorf("stream is not the backend's bytes:\ngot  %q\nwant %q", r.body, want)
		}
	}
}

func contractCases(t *testing.T, g *gw) []contractCase {
	post := func(token, body string) func() *http.Request {
		return func() *http.Request { return newRequest(t, "POST", "/v1/chat/completions", token, body) }
	}
	contoso, acme := mint(t, g, devissuer.Claims{}), mint(t, g, devissuer.Claims{Tenant: "acme"})
	fixtureBody := func(extra string) string {
		return `{"model":"` + fixtureModel + `"` + extra + `,"messages":[{"role":"user","content":"hi"}]}`
	}
	return []contractCase{
		{name: "healthz", req: func() *http.Request { return newRequest(t, "GET", "/healthz", "", "") },
			check: func(t *testing.T, r reply) {
				if r.status != 200 || string(r.body) != `{"status":"ok"}` {
					t.Fatalf("healthz %d %s", r.status, r.body)
				}
			}},
		{name: "no token", req: post("", chatBody), check: wantAuthError},
		{name: "expired token", req: post(mint(t, g, devissuer.Claims{ExpiresAt: time.Now().Add(-time.Hour)}), chatBody), check: wantAuthError},
		{name: "wrong audience", req: post(mint(t, g, devissuer.Claims{Audience: []string{"someone-else"}}), chatBody), check: wantAuthError},
		{name: "alg none", req: post(mint(t, g, devissuer.Claims{Alg: "none"}), chatBody), check: wantAuthError},
		{name: "unknown tenant", req: post(mint(t, g, devissuer.Claims{Tenant: "northwind"}), chatBody),
			check: wantError(http.StatusForbidden, "tenant_not_allowed")},
		{name: "forbidden model", req: post(mint(t, g, devissuer.Claims{Tenant: "fabrikam"}), `{"model":"gpt-4o","messages":[]}`),
			check: wantError(http.StatusNotFound, "model_not_found")},
		{name: "malformed json", req: post(contoso, `{"model":`), check: wantError(http.StatusBadRequest, "invalid_json")},
		{name: "unknown path", req: func() *http.Request { return newRequest(t, "POST", "/v1/nope", contoso, `{}`) },
			check: wantError(http.StatusNotFound, "unknown_url")},
		{name: "wrong method", req: func() *http.Request { return newRequest(t, "GET", "/v1/chat/completions", contoso, "") },
			check: func(t *testing.T, r reply) {
				wantError(http.StatusMethodNotAllowed, "method_not_allowed")(t, r)
				if r.header.Get("Allow") != "POST" {
					t.Errorf("Allow %q", r.header.Get("Allow"))
				}
			}},
		{name: "rate limited", req: post(mint(t, g, devissuer.Claims{Tenant: "tiny"}), chatBody), before: tinyBucket,
			check: func(t *testing.T, r reply) {
				wantError(http.StatusTooManyRequests, "rate_limit_exceeded")(t, r)
				wantRateHeaders(t, r)
				// 2 an hour: the next in 30 minutes, too far to wait.
				if r.header.Get("Retry-After") != "" || r.header.Get("X-Should-Retry") != "false" {
					t.Errorf("Retry-After %q, X-Should-Retry %q", r.header.Get("Retry-After"), r.header.Get("X-Should-Retry"))
				}
				if r.header.Get("X-Ratelimit-Remaining-Requests") != "0" || r.header.Get("X-Ratelimit-Limit-Requests") != strconv.Itoa(tinyBucket) {
					t.Errorf("x-ratelimit headers %v", r.header)
				}
			}},
		{name: "json answer", req: post(acme, fixtureBody("")),
			check: func(t *testing.T, r reply) {
				if r.status != 200 || string(r.body) != fixtureJSON || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
					t.Errorf("got %d %q %s, want the backend's JSON", r.status, r.header.Get("Content-Type"), r.body)
				}
				wantRateHeaders(t, r)
			}},
		{name: "stream, usage not asked: stripped", req: post(acme, fixtureBody(`,"stream":true`)), check: wantStream(fixtureStream(false))},
		{name: "stream, usage asked: kept", req: post(acme, fixtureBody(`,"stream":true,"stream_options":{"include_usage":true}`)),
			check: wantStream(fixtureStream(true))},
		{name: "stub stream", req: post(contoso, streamBody),
			check: func(t *testing.T, r reply) {
				data := sseData(r.body)
				if r.status != 200 || len(data) != 8+3 || data[len(data)-1] != "[DONE]" || bytes.Contains(r.body, []byte(`"choices":[]`)) {
					t.Errorf("stub stream through the gateway: %d %s", r.status, r.body)
				}
			}},
	}
}

// TestTwoHostContract sends every contract case to both hosts, the
// in-process HTTP server and the real binary under the AWS Lambda Runtime
// Interface Emulator, configured alike: each answer must pass the case's
// checks, and the two hosts' answers must be the same.
func TestTwoHostContract(t *testing.T) {
	t.Parallel()
	g := contractGateway(t)
	hosts := []host{httpHost{g}}
	if testing.Short() {
		t.Log("-short: the HTTP host only")
	} else {
		hosts = append(hosts, startLambdaHost(t, g))
	}
	for _, tc := range contractCases(t, g) {
		t.Run(tc.name, func(t *testing.T) {
			replies := make([]reply, len(hosts))
			for i, h := range hosts {
				for range tc.before {
					h.do(t, tc.req())
				}
				replies[i] = h.do(t, tc.req())
				t.Run(h.name(), func(t *testing.T) {
					tc.check(t, replies[i])
					if replies[i].header.Get("X-Request-Id") == "" {
						t.Errorf("no x-request-id")
					}
				})
			}
			for i := 1; i < len(replies); i++ {
				sameAnswer(t, replies[0], replies[i], hosts[0].name(), hosts[i].name())
			}
		})
	}
}

// startFunction runs the gateway binary as a Lambda function against a
// fresh in-process Runtime API, with g's config.
func startFunction(t *testing.T, g *gw) *lambdatest.RuntimeAPI {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds and runs the gateway binary")
	}
	rt := lambdatest.StartRuntimeAPI(t)
	lambdatest.StartFunction(t, gatewayBinary(t), functionEnv(g, rt.Env()))
	return rt
}

// invoke queues r as a Function URL event with the given deadline (zero:
// lambdatest.DefaultTimeout).
func invoke(t *testing.T, ctx context.Context, rt *lambdatest.RuntimeAPI, r *http.Request, deadline time.Time) *lambdatest.Invocation {
	t.Helper()
	r.Host = functionURLHost
	ev, err := lambdatest.URLEvent(r)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := rt.Invoke(ctx, payload, deadline)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// TestLambdaFlushPerEvent proves per-event delivery on the Lambda host by
// order, as TestFlushPerEvent does on the HTTP host: the stub cannot emit
// event k+1 until the test releases it, so the Runtime API can only hold
// event k if the gateway, the lambdaurl adapter and the Lambda runtime
// client each passed it on at once. A buffering link deadlocks here and
// fails at the generous bound.
func TestLambdaFlushPerEvent(t *testing.T) {
	t.Parallel()
	const tokens = 5
	step := make(chan struct{})
	g := startGateway(t, options{stubOpts: stub.Options{Step: step, Tokens: tokens}})
	rt := startFunction(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The client asks for usage so that every event the stub emits is one
	// the client gets (a stripped one would give the test nothing to wait for).
	body := `{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	inv := invoke(t, ctx, rt, newRequest(t, "POST", "/v1/chat/completions", g.token("contoso"), body), time.Time{})

	// Headers go out before any event: the stub sends its own at once.
	prelude, stream, err := lambdatest.ParseStreamingResponse(inv.Body(ctx))
	if err != nil {
		t.Fatalf("no prelude before the first event: %v", err)
	}
	if prelude.StatusCode != 200 || prelude.Headers["Content-Type"] != "text/event-stream" || prelude.Headers["X-Request-Id"] == "" {
		t.Fatalf("prelude %+v", prelude)
	}
	r := bufio.NewReader(stream)
	const want = 1 + tokens + 1 + 1 + 1 // role, tokens, finish, usage, [DONE]
	k := 0
	for done := false; !done; {
		k++
		ev := stepEvent(t, step, r, k, 30*time.Second)
		if strings.HasPrefix(ev, "error: ") {
			t.Fatalf("event %d: %s", k, ev)
		}
		// The stub counts an event after its flush returns, so the count may
		// still lag the event that already arrived; it may never lead.
		if emitted := g.Stubs[0].Emitted(); emitted > int64(k) {
			t.Fatalf("stub emitted %d events while the Runtime API holds %d", emitted, k)
		}
		done = strings.Contains(ev, "data: [DONE]")
	}
	if k != want {
		t.Fatalf("%d events, want %d", k, want)
	}
	res, err := inv.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Endpoint != "response" || res.ErrorType() != "" || res.ReadErr != nil {
		t.Fatalf("invocation ended %s, error type %q, read error %v", res.Endpoint, res.ErrorType(), res.ReadErr)
	}
	if ct := res.Header.Get("Content-Type"); ct != lambdatest.StreamingContentType || len(res.TransferEncoding) == 0 || res.TransferEncoding[0] != "chunked" {
		t.Fatalf("not a streamed Function URL response: Content-Type %q, transfer encoding %v", ct, res.TransferEncoding)
	}
	if len(res.Chunks) < want {
		t.Fatalf("%d chunks for %d events: events were coalesced", len(res.Chunks), want)
	}
}

// TestLambdaDeadline: a long stream on an invocation whose deadline is near
// ends, deadline_margin before the deadline, with one SSE error event
// (deadline_exceeded) and no [DONE], instead of being cut off by Lambda
// mid-event; and the function serves the next invocation.
func TestLambdaDeadline(t *testing.T) {
	t.Parallel()
	const margin = 2 * time.Second
	g := startGateway(t, options{
		stubOpts: stub.Options{Tokens: 100000, Interval: 5 * time.Millisecond},
		// min_remaining off: this invocation is short on purpose.
		extra: fmt.Sprintf("lambda: {deadline_margin: %s, min_remaining: 0s}\n", margin),
	})
	rt := startFunction(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Warm the function (process start, JWKS) on a short answer, so the
	// deadline below is spent streaming.
	short := func() *http.Request {
		r := newRequest(t, "POST", "/v1/chat/completions", g.token("contoso"), chatBody)
		r.Header.Set(stub.TokensHeader, "2")
		return r
	}
	warm := invoke(t, ctx, rt, short(), time.Time{})
	if res, err := warm.Wait(ctx); err != nil || res.ErrorType() != "" {
		t.Fatalf("warm-up: %v %+v", err, res)
	}

	deadline := time.Now().Add(margin + 2*time.Second)
	inv := invoke(t, ctx, rt, newRequest(t, "POST", "/v1/chat/completions", g.token("contoso"), streamBody), deadline)
	res, err := inv.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ErrorType() != "" || res.ReadErr != nil {
		t.Fatalf("the invocation failed (%q, %v) instead of ending its stream cleanly", res.ErrorType(), res.ReadErr)
	}
	if last := res.Chunks[len(res.Chunks)-1].At; !last.Before(deadline) {
		t.Fatalf("last byte %v after the deadline", last.Sub(deadline))
	}
	_, rest, err := lambdatest.ParseStreamingResponse(bytes.NewReader(res.Body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rest)
	data := sseData(b)
	if len(data) < 2 {
		t.Fatalf("want some events and an error event, got %q", b)
	}
	if bytes.Contains(b, []byte("[DONE]")) {
		t.Fatal("[DONE] after a stream cut by the deadline")
	}
	for _, d := range data[:len(data)-1] {
		if strings.Contains(d, `"error"`) {
			t.Fatalf("more than one error event: %s", d)
		}
	}
	var e struct {
		Error struct{ Code, Type, Message string }
	}
	if err := json.Unmarshal([]byte(data[len(data)-1]), &e); err != nil || e.Error.Code != "deadline_exceeded" {
		t.Fatalf("last event %s, want an error with code deadline_exceeded", data[len(data)-1])
	}
	if !bytes.HasSuffix(b, []byte("}\n\n")) {
		t.Fatalf("stream does not end at an event boundary: %q", b[max(0, len(b)-80):])
	}

	// The function is still alive and serves the next invocation.
	next := invoke(t, ctx, rt, short(), time.Time{})
	nres, err := next.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := lambdatest.ParseStreamingResponse(bytes.NewReader(nres.Body))
	if err != nil || p.StatusCode != 200 {
		t.Fatalf("next invocation: %v %+v", err, p)
	}
}

// TestLambdaKeepalive: on the Lambda host too, a slow first token is
// preceded by the prelude and keepalive comments through the response
// stream, and the stream then completes.
func TestLambdaKeepalive(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{TTFT: time.Second, Tokens: 3},
		upstreamCfg: "upstream: {max_attempts: 3, header_timeout: 5s, keepalive_interval: 40ms}\n"})
	rt := startFunction(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inv := invoke(t, ctx, rt, newRequest(t, "POST", "/v1/chat/completions", g.token("contoso"), streamBody), time.Time{})
	prelude, stream, err := lambdatest.ParseStreamingResponse(inv.Body(ctx))
	if err != nil || prelude.StatusCode != 200 || prelude.Headers["Content-Type"] != "text/event-stream" {
		t.Fatalf("prelude %+v, %v", prelude, err)
	}
	b, err := io.ReadAll(stream)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	ka, data := strings.Index(out, ": keepalive\n\n"), strings.Index(out, "data: ")
	if ka < 0 || data < 0 || ka > data || !strings.HasSuffix(out, "data: [DONE]\n\n") {
		t.Fatalf("want keepalives before the first event and a whole stream, got %q", out)
	}
	if res, err := inv.Wait(ctx); err != nil || res.Endpoint != "response" || res.ErrorType() != "" {
		t.Fatalf("invocation: %+v %v", res, err)
	}
}
