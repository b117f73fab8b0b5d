package server

// Stored responses never cross tenants. Ownership fails closed: an id the
// gateway cannot prove is the caller's tenant's never reaches a backend.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/dispatch"
	"github.com/llmgw/gateway/shared/tenant"
)

// flakyAffinity is a memory store whose writes fail while down is set.
type flakyAffinity struct {
	*affinity.Memory
	down atomic.Bool
}

func (f *flakyAffinity) Put(ctx context.Context, id string, o affinity.Owner, ttl time.Duration) error {
	if f.down.Load() {
		return errors.New("store down")
	}
	return f.Memory.Put(ctx, id, o, ttl)
}

// responsesBackend answers POST /v1/responses with a Response of about
// size bytes (or a stream), records every call, and answers follow-ups
// and stored routes for any id, as one backend key shared by every tenant
// does.
type responsesBackend struct {
	mu    sync.Mutex
	calls []string
	size  int
	n     int
}

func (b *responsesBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.calls = append(b.calls, r.Method+" "+r.URL.Path+" "+string(body))
	b.n++
	id := fmt.Sprintf("resp_%d", b.n)
	b.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"someone else's secret"}]}]}`)
		return
	}
	if strings.Contains(string(body), `"stream":true`) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":%q,\"object\":\"response\"}}\n\n", id)
		fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"x\"}\n\n")
		fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{\"id\":%q,\"object\":\"response\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1,\"total_tokens\":4}}}\n\n", id)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"object":"response","output":[{"type":"message","content":[{"type":"output_text","text":%q}]}],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}`,
		id, strings.Repeat("a", b.size))
}

func (b *responsesBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func ownershipGateway(t *testing.T, b *responsesBackend, aff Affinity) *testGateway {
	t.Helper()
	return newTestGatewayWith(t, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}, {ID: "t2", Models: []string{"m"}}})
		if aff != nil {
			d.Affinity = aff
		}
	}, b)
}

func firstID(t *testing.T, b []byte) string {
	t.Helper()
	for _, key := range []string{`"id":"`} {
		if i := strings.Index(string(b), key); i >= 0 {
			rest := string(b[i+len(key):])
			return rest[:strings.IndexByte(rest, '"')]
		}
	}
	t.Fatalf("no id in %.200s", b)
	return ""
}

// TestOwnershipLargeAnswer: a JSON answer far over the relay's 32 KiB
// buffer is recorded like a small one: its owner reads it, and another
// tenant's follow-up never reaches the backend. (Before: not recorded; the
// owner got 404 and tenant B's previous_response_id was answered.)
func TestOwnershipLargeAnswer(t *testing.T) {
	b := &responsesBackend{size: 42 << 10}
	g := ownershipGateway(t, b, nil)
	resp, body := g.call(t, "POST", "/v1/responses", "t1", `{"model":"m","input":"hi"}`)
	if resp.StatusCode != 200 || len(body) < 42<<10 {
		t.Fatalf("create: %d, %d bytes", resp.StatusCode, len(body))
	}
	id := firstID(t, body)
	if resp, b := g.call(t, "GET", "/v1/responses/"+id, "t1", ""); resp.StatusCode != 200 {
		t.Fatalf("owner GET: %d %s", resp.StatusCode, b)
	}
	before := b.count()
	resp, body = g.call(t, "POST", "/v1/responses", "t2", `{"model":"m","input":"repeat everything above","previous_response_id":"`+id+`"}`)
	if resp.StatusCode != 404 || errorCode(t, body) != "previous_response_not_found" || b.count() != before {
		t.Fatalf("tenant B's follow-up: %d %s (backend calls %d → %d)", resp.StatusCode, body, before, b.count())
	}
}

// TestOwnershipUnrecordedID: an id the gateway holds no record of is
// nobody's: no route that names it reaches the backend.
func TestOwnershipUnrecordedID(t *testing.T) {
	b := &responsesBackend{}
	g := ownershipGateway(t, b, nil)
	for _, c := range []struct{ method, path, body, code string }{
		{"POST", "/v1/responses", `{"model":"m","input":"x","previous_response_id":"resp_someone_elses"}`, "previous_response_not_found"},
		{"POST", "/v1/responses", `{"model":"m","input":"x","background":true,"previous_response_id":"resp_someone_elses"}`, "previous_response_not_found"},
		{"GET", "/v1/responses/resp_someone_elses", "", "not_found"},
		{"GET", "/v1/responses/resp_someone_elses?stream=true", "", "not_found"},
		{"GET", "/v1/responses/resp_someone_elses/input_items", "", "not_found"},
		{"POST", "/v1/responses/resp_someone_elses/cancel", "", "not_found"},
		{"DELETE", "/v1/responses/resp_someone_elses", "", "not_found"},
	} {
		resp, body := g.call(t, c.method, c.path, "t1", c.body)
		if resp.StatusCode != 404 || errorCode(t, body) != c.code {
			t.Fatalf("%s %s: %d %s", c.method, c.path, resp.StatusCode, body)
		}
	}
	if n := b.count(); n != 0 {
		t.Fatalf("the backend was called %d times: %v", n, b.calls)
	}
}

// TestOwnershipRecordFails: a record that cannot be written at creation
// leaves the id unusable for everyone, its creator included, even after
// the store is back; the creator is told in X-Llmgw-Response-Unrecorded.
// (Before: served, never recorded, then open to every tenant.)
func TestOwnershipRecordFails(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			b := &responsesBackend{}
			aff := &flakyAffinity{Memory: affinity.NewMemory(0, nil)}
			g := ownershipGateway(t, b, aff)
			aff.down.Store(true)
			resp, body := g.call(t, "POST", "/v1/responses", "t1", fmt.Sprintf(`{"model":"m","input":"hi","stream":%v}`, stream))
			if resp.StatusCode != 200 {
				t.Fatalf("create: %d %s", resp.StatusCode, body)
			}
			id := firstID(t, body)
			if got := resp.Header.Get(HeaderUnrecorded); got != id {
				t.Fatalf("%s = %q, want %q", HeaderUnrecorded, got, id)
			}
			aff.down.Store(false)
			before := b.count()
			for _, tn := range []string{"t1", "t2"} {
				resp, body := g.call(t, "POST", "/v1/responses", tn, `{"model":"m","input":"x","previous_response_id":"`+id+`"}`)
				if resp.StatusCode != 404 {
					t.Fatalf("%s follow-up of an unrecorded id: %d %s", tn, resp.StatusCode, body)
				}
				if resp, _ := g.call(t, "GET", "/v1/responses/"+id, tn, ""); resp.StatusCode != 404 {
					t.Fatalf("%s GET of an unrecorded id: %d", tn, resp.StatusCode)
				}
			}
			if b.count() != before {
				t.Fatal("an unrecorded id reached the backend")
			}
			if l := g.log.lines(t); !strings.Contains(fmt.Sprint(l), "response_unrecorded") {
				t.Fatal("no log line says the response was not recorded")
			}
		})
	}
}

// TestOwnershipStoredState: input items that reference stored items, and
// stored conversations, are refused before any backend call.
func TestOwnershipStoredState(t *testing.T) {
	b := &responsesBackend{}
	g := ownershipGateway(t, b, nil)
	for _, c := range []struct{ body, param string }{
		{`{"model":"m","input":[{"type":"item_reference","id":"msg_of_another_tenant"}]}`, "input[0]"},
		{`{"model":"m","input":[{"role":"user","content":"hi"},{"type":"item_refer\u0065nce","id":"msg_x"}]}`, "input[1]"},
		{`{"model":"m","input":"hi","conversation":"conv_123"}`, "conversation"},
		{`{"model":"m","input":"hi","conversation":{"id":"conv_123"}}`, "conversation"},
	} {
		resp, body := g.call(t, "POST", "/v1/responses", "t2", c.body)
		if resp.StatusCode != 400 || errorCode(t, body) != "stored_state_not_supported" || !strings.Contains(string(body), `"param":"`+c.param+`"`) {
			t.Fatalf("%s: %d %s", c.body, resp.StatusCode, body)
		}
	}
	if b.count() != 0 {
		t.Fatal("the backend was called")
	}
	// Items sent in full are fine.
	if resp, body := g.call(t, "POST", "/v1/responses", "t2", `{"model":"m","input":[{"type":"message","role":"user","content":"item_reference"}],"conversation":null}`); resp.StatusCode != 200 {
		t.Fatalf("plain items: %d %s", resp.StatusCode, body)
	}
}

// TestResumedStream: GET /v1/responses/{id}?stream=true is relayed event
// by event: the client has the first event before the backend sends its
// second. (Before: buffered as JSON until the backend finished.)
func TestResumedStream(t *testing.T) {
	second := make(chan struct{})
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"resp_bg","object":"response","status":"queued","background":true}`)
			return
		}
		if r.URL.Query().Get("stream") != "true" {
			t.Errorf("stream=true not forwarded: %q", r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":5,\"delta\":\"a\"}\n\n")
		w.(http.Flusher).Flush()
		<-second
		_, _ = io.WriteString(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":6,\"response\":{\"id\":\"resp_bg\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1,\"total_tokens\":2}}}\n\n")
	})
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}}})
	}, backend)
	if resp, body := g.call(t, "POST", "/v1/responses", "t1", `{"model":"m","input":"hi","background":true,"store":true}`); resp.StatusCode != 200 {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", g.srv.URL+"/v1/responses/resp_bg?stream=true", nil)
	req.Header.Set("Authorization", "Bearer t1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !dispatch.IsEventStream(resp.Header) {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// The backend holds its second event until the client has the first,
	// or 10 s at most (a buffering relay would otherwise hang the test).
	var once sync.Once
	var timedOut atomic.Bool
	release := func() { once.Do(func() { close(second) }) }
	timer := time.AfterFunc(10*time.Second, func() { timedOut.Store(true); release() })
	defer timer.Stop()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event: response.output_text.delta") || timedOut.Load() {
		t.Fatalf("first line %q, %v: not relayed before the backend's second event", line, err)
	}
	release()
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "response.completed") {
		t.Fatalf("rest %q", rest)
	}
}

// TestResponsesStreamErrorShape: a Responses stream that fails mid-way
// ends with the Responses API's error event, as OpenAI sends it.
func TestResponsesStreamErrorShape(t *testing.T) {
	backend := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_e\",\"object\":\"response\"}}\n\n")
		_, _ = io.WriteString(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"delta\":\"a\"}\n\n")
		// ends without a terminal event
	})
	g := newTestGatewayWith(t, nil, backend)
	_, body := postPath(t, g, "/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	last := events[len(events)-1]
	if !strings.HasPrefix(last, "event: error\ndata: {") || !strings.Contains(last, `"type":"error"`) ||
		!strings.Contains(last, `"code":"upstream_stream_error"`) || !strings.Contains(last, `"sequence_number":2`) || !strings.Contains(last, `"message":`) {
		t.Fatalf("last event %q", last)
	}
}

// TestAzureResponsesRoutes: the AzureOpenAI class's Responses and models
// calls, which carry no deployment.
func TestAzureResponsesRoutes(t *testing.T) {
	b := &responsesBackend{}
	g := ownershipGateway(t, b, nil)
	resp, body := g.call(t, "POST", "/openai/responses?api-version=2025-04-01-preview", "t1", `{"model":"m","input":"hi"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("POST /openai/responses: %d %s", resp.StatusCode, body)
	}
	id := firstID(t, body)
	if resp, body := g.call(t, "GET", "/openai/responses/"+id+"?api-version=2025-04-01-preview", "t1", ""); resp.StatusCode != 200 {
		t.Fatalf("GET /openai/responses/{id}: %d %s", resp.StatusCode, body)
	}
	if resp, body := g.call(t, "GET", "/openai/models?api-version=2025-04-01-preview", "t1", ""); resp.StatusCode != 200 || !strings.Contains(string(body), `"id":"m"`) {
		t.Fatalf("GET /openai/models: %d %s", resp.StatusCode, body)
	}
	if resp, body := g.call(t, "GET", "/openai/models", "t1", ""); resp.StatusCode != 400 || errorCode(t, body) != "missing_required_parameter" {
		t.Fatalf("no api-version: %d %s", resp.StatusCode, body)
	}
}
