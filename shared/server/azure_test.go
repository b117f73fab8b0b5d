package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/llmgw/gateway/shared/auth"
)

// bearerOnly accepts exactly "Bearer good".
type bearerOnly struct{}

func (bearerOnly) Verify(_ context.Context, authorization string) (auth.Principal, error) {
	if authorization != "Bearer good" {
		return auth.Principal{}, errors.New("bad token")
	}
	return auth.Principal{Tenant: "t1", Subject: "s"}, nil
}

// modelRecorder answers JSON and remembers the model each body carried.
type modelRecorder struct {
	mu     sync.Mutex
	models []string
	paths  []string
}

func (m *modelRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b struct{ Model string }
	raw, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(raw, &b)
	m.mu.Lock()
	m.models, m.paths = append(m.models, b.Model), append(m.paths, r.URL.Path)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}

func (m *modelRecorder) last() (string, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.models) == 0 {
		return "", ""
	}
	return m.models[len(m.models)-1], m.paths[len(m.paths)-1]
}

// TestAzureFrontDoor: the routes Azure OpenAI clients call, with the JWT in
// api-key or Authorization, and the deployment as the model.
func TestAzureFrontDoor(t *testing.T) {
	backend := &modelRecorder{}
	g := newTestGatewayWith(t, func(d *Deps) { d.Auth = bearerOnly{} }, backend)
	tests := []struct {
		name, method, path, body string
		header                   [2]string
		status                   int
		code                     string
		model                    string // what the backend must read
	}{
		{"deployment route, api-key, body without model", "POST", "/openai/deployments/m/chat/completions?api-version=2024-10-21",
			`{"messages":[{"role":"user","content":"hi"}]}`, [2]string{"Api-Key", "good"}, 200, "", "m"},
		{"deployment overrides the body's model", "POST", "/openai/deployments/m/chat/completions?api-version=2025-01-01-preview",
			`{"model":"other","messages":[]}`, [2]string{"Authorization", "Bearer good"}, 200, "", "m"},
		{"embeddings", "POST", "/openai/deployments/m/embeddings?api-version=2024-10-21",
			`{"input":"x"}`, [2]string{"Api-Key", "good"}, 200, "", "m"},
		{"a deployment the tenant may not use", "POST", "/openai/deployments/gpt-x/chat/completions?api-version=2024-10-21",
			`{"messages":[]}`, [2]string{"Api-Key", "good"}, 404, "model_not_found", ""},
		{"bad api-version", "POST", "/openai/deployments/m/chat/completions?api-version=latest",
			`{"messages":[]}`, [2]string{"Api-Key", "good"}, 400, "invalid_api_version", ""},
		{"missing api-version", "POST", "/openai/deployments/m/chat/completions",
			`{"messages":[]}`, [2]string{"Api-Key", "good"}, 400, "missing_required_parameter", ""},
		{"wrong key", "POST", "/openai/deployments/m/chat/completions?api-version=2024-10-21",
			`{"messages":[]}`, [2]string{"Api-Key", "bad"}, 401, "invalid_token", ""},
		{"v1 surface", "POST", "/openai/v1/chat/completions",
			`{"model":"m","messages":[]}`, [2]string{"Api-Key", "good"}, 200, "", "m"},
		{"v1 models", "GET", "/openai/v1/models", "", [2]string{"Api-Key", "good"}, 200, "", ""},
		{"unknown operation", "POST", "/openai/deployments/m/images?api-version=2024-10-21", `{}`, [2]string{"Api-Key", "good"}, 404, "unknown_url", ""},
		{"wrong method", "GET", "/openai/deployments/m/chat/completions?api-version=2024-10-21", "", [2]string{"Api-Key", "good"}, 405, "method_not_allowed", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, g.srv.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set(tt.header[0], tt.header[1])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if tt.code != "" {
				if got := errorCode(t, b); got != tt.code {
					t.Fatalf("code %q, want %q", got, tt.code)
				}
			}
			if tt.model != "" {
				if got, path := backend.last(); got != tt.model || path != "/v1"+strings.TrimPrefix(path, "/v1") {
					t.Fatalf("backend read model %q at %s, want %q", got, path, tt.model)
				}
			}
			id := resp.Header.Get("X-Request-Id")
			found := false
			for _, l := range g.log.lines(t) {
				if l["request_id"] == id && l["status"] == float64(tt.status) {
					found = true
				}
			}
			if !found {
				t.Fatalf("no access-log line for %s with status %d", id, tt.status)
			}
		})
	}
}

// TestEveryAnswerLogged: 404 and 405 answers have their access-log line;
// stream is what is known: null when the body was never read (a caller
// without a valid token has nothing read), the body's value otherwise.
func TestEveryAnswerLogged(t *testing.T) {
	g := newTestGatewayWith(t, func(d *Deps) { d.Auth = bearerOnly{} }, http.HandlerFunc(sseBackend))
	for _, c := range []struct {
		method, path, body, token string
		status                    int
		stream                    any
	}{
		{"GET", "/v1/nope", "", "", 404, nil},
		{"GET", "/v1/chat/completions", "", "", 405, nil},
		{"POST", "/v1/chat/completions", streamBody, "", 401, nil},
		{"POST", "/v1/chat/completions", `{"model":"nope","stream":true,"messages":[]}`, "Bearer good", 404, true},
	} {
		req, _ := http.NewRequest(c.method, g.srv.URL+c.path, strings.NewReader(c.body))
		if c.token != "" {
			req.Header.Set("Authorization", c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		l := g.lastLog(t)
		if resp.StatusCode != c.status || l["request_id"] != resp.Header.Get("X-Request-Id") || l["status"] != float64(c.status) || l["stream"] != c.stream {
			t.Fatalf("%s %s: status %d, log %v", c.method, c.path, resp.StatusCode, l)
		}
	}
}

// TestHeadersTooLarge: a header block over MaxHeaderBytes is answered 431
// by the gateway, with its access-log line and the connection closed.
func TestHeadersTooLarge(t *testing.T) {
	g := newTestGatewayWith(t, func(d *Deps) { d.MaxHeaderBytes = 2048 }, http.HandlerFunc(sseBackend))
	req, _ := http.NewRequest("GET", g.srv.URL+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 3000))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	l := g.lastLog(t)
	if resp.StatusCode != 431 || !resp.Close || l["status"] != float64(431) || l["outcome"] != "request_header_fields_too_large" {
		t.Fatalf("status %d close %v log %v", resp.StatusCode, resp.Close, l)
	}
	req, _ = http.NewRequest("GET", g.srv.URL+"/healthz", nil)
	req.Header.Set("X-Small", strings.Repeat("a", 500))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("ordinary headers: %v %v", resp, err)
	}
}
