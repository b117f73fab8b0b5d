package dispatch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/keepalive"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/upstream"
)

// fakeRouter orders a pool's endpoints as configured and counts what it
// is told.
type fakeRouter struct {
	cooled, benched, healthy, done, failed int
}

func (f *fakeRouter) Sync(context.Context, *route.Pool) {}
func (f *fakeRouter) Order(p *route.Pool, dst []*route.Endpoint, _ int, _ uint64) ([]*route.Endpoint, time.Duration) {
	return append(dst, p.Endpoints...), 0
}
func (f *fakeRouter) Healthy(*route.Endpoint) { f.healthy++ }
func (f *fakeRouter) Cooldown(_ context.Context, _ *route.Endpoint, d time.Duration, _ bool) time.Duration {
	f.cooled++
	return d
}
func (f *fakeRouter) Failed(*route.Endpoint)                    { f.benched++ }
func (f *fakeRouter) StreamDone(*route.Endpoint)                { f.done++ }
func (f *fakeRouter) StreamFailed(*route.Endpoint)              { f.failed++ }
func (f *fakeRouter) Admit(*route.Endpoint, string, int64) bool { return true }

// doerFunc answers each backend request by the host it is sent to.
type doerFunc func(*http.Request) (*http.Response, error)

func (f doerFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// noHooks is a caller that records nothing.
type noHooks struct{ failed []*Error }

func (h *noHooks) AttemptBegins(context.Context, *http.Request, *upstream.Target, int) {}
func (h *noHooks) AttemptFailed(fail *Error, _, _ bool)                                { h.failed = append(h.failed, fail) }
func (h *noHooks) Created([]byte) string                                               { return "" }
func (h *noHooks) CreatedAnswer(*sse.AnswerScanner, http.Header)                       {}

func answer(r *http.Request, status int, ct, body string) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}
}

// testDispatcher is a dispatcher over endpoints a and b of pool p, both
// openai targets, answering through do.
func testDispatcher(t *testing.T, do doerFunc) (*Dispatcher, *route.Pool, *fakeRouter) {
	t.Helper()
	pool := &route.Pool{Name: "p"}
	targets := map[*route.Endpoint]*upstream.Target{}
	for i, host := range []string{"a.test", "b.test"} {
		e := &route.Endpoint{Index: i, Name: host, Pool: "p"}
		tg, err := upstream.NewTarget(upstream.TargetSpec{Kind: "openai", URL: "http://" + host})
		if err != nil {
			t.Fatal(err)
		}
		pool.Endpoints = append(pool.Endpoints, e)
		targets[e] = tg
	}
	fr := &fakeRouter{}
	return &Dispatcher{Router: fr, Health: fr, Targets: targets, Client: do, Buffers: &testBuffers{},
		Log: slog.New(slog.DiscardHandler), Now: time.Now, Relayer: &sse.Relayer{},
		Settings: Settings{MaxAttempts: 3, DefaultCooldown: time.Second, HeaderTimeout: time.Second,
			ResponseTimeout: time.Second, StreamIdleTimeout: time.Second}}, pool, fr
}

func testCall(t *testing.T, pool *route.Pool, raw string, w http.ResponseWriter, h Hooks) *Call {
	t.Helper()
	body, err := request.ParseBody([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := &Call{ID: "req1", Op: request.ChatCompletions, Pool: pool, Body: &body, Raw: []byte(raw), Header: http.Header{},
		Inject: body.Stream, W: w, Hooks: h}
	if body.Stream { // a stream's writes go through its keepalive writer
		c.Keepalive = keepalive.Start(w, 0, time.Now)
		t.Cleanup(func() { c.Keepalive.Stop() })
	}
	return c
}

// TestFailoverThenRelay: a 503 fails over to the next endpoint, whose
// JSON answer is relayed; the result says what happened, with no server.
func TestFailoverThenRelay(t *testing.T) {
	d, pool, fr := testDispatcher(t, func(r *http.Request) (*http.Response, error) {
		if r.URL.Host == "a.test" {
			return answer(r, 503, "application/json", `{"error":{}}`), nil
		}
		return answer(r, 200, "application/json", `{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`), nil
	})
	w := httptest.NewRecorder()
	h := &noHooks{}
	c := testCall(t, pool, `{"model":"m","messages":[]}`, w, h)
	var res Result
	if err := d.Send(context.Background(), c, &res); err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if err := d.Relay(context.Background(), c, &res, http.NewResponseController(w)); err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || res.Endpoint != "b.test" || res.Served != pool.Endpoints[1] || !res.MaySpend {
		t.Errorf("result = %+v", res)
	}
	if len(h.failed) != 1 || h.failed[0].Kind != Status || h.failed[0].Status != 503 || fr.cooled != 0 || fr.benched != 1 || fr.healthy != 1 {
		t.Errorf("failures %v, cooled %d, benched %d, healthy %d: a 503 without a pause counts toward an ejection, cooling nothing", h.failed, fr.cooled, fr.benched, fr.healthy)
	}
	if w.Code != 200 || res.Status != 200 || !res.HasUsage || !res.UsageFinal || res.Usage.CompletionTokens != 4 || res.AnswerBytes != int64(w.Body.Len()) {
		t.Errorf("relayed %d %q, result %+v", w.Code, w.Body, res)
	}
}

// TestStreamCutAtTokenEvents: a stream past the token-event bound the
// caller passed is cut, and the result says so (Cut), for the caller's
// billing to settle.
func TestStreamCutAtTokenEvents(t *testing.T) {
	var sb strings.Builder
	for range 20 {
		sb.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n")
	}
	d, pool, _ := testDispatcher(t, func(r *http.Request) (*http.Response, error) {
		return answer(r, 200, "text/event-stream", sb.String()), nil
	})
	w := httptest.NewRecorder()
	c := testCall(t, pool, `{"model":"m","stream":true,"messages":[]}`, w, &noHooks{})
	c.MaxTokenEvents = 5
	var res Result
	if err := d.Send(context.Background(), c, &res); err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	err := d.Relay(context.Background(), c, &res, http.NewResponseController(w))
	var de *Error
	if !errors.As(err, &de) || de.Kind != OverCap || !res.Cut || !res.WroteHeader || !c.Streamed() {
		t.Fatalf("relay = %v, result %+v", err, res)
	}
}

// TestAllBackendsFail: the last failure is returned, typed, after
// MaxAttempts.
func TestAllBackendsFail(t *testing.T) {
	d, pool, _ := testDispatcher(t, func(r *http.Request) (*http.Response, error) {
		return answer(r, 200, "text/html", "<html>"), nil
	})
	c := testCall(t, pool, `{"model":"m","stream":true,"messages":[]}`, httptest.NewRecorder(), &noHooks{})
	var res Result
	err := d.Send(context.Background(), c, &res)
	var de *Error
	if !errors.As(err, &de) || de.Kind != BadResponse || res.Attempts != 2 {
		t.Fatalf("send = %v, attempts %d", err, res.Attempts)
	}
}
