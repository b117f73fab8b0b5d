package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// pathRecorder answers each operation below /v1/responses/ as OpenAI
// does and records the paths it was asked.
type pathRecorder struct {
	mu    sync.Mutex
	paths []string
}

func (p *pathRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	p.mu.Lock()
	p.paths = append(p.paths, r.Method+" "+r.URL.Path)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/responses/compact":
		_, _ = io.WriteString(w, `{"id":"cmp_1","object":"response.compaction","created_at":1,"output":[{"type":"compaction","id":"cmp_item_1","encrypted_content":"x"}],"usage":{"input_tokens":30,"output_tokens":5,"total_tokens":35}}`)
	case "/v1/responses/input_tokens":
		_, _ = io.WriteString(w, `{"object":"response.input_tokens","input_tokens":30}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"message":"no such path"}}`)
	}
}

func (p *pathRecorder) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.paths...)
}

// TestResponsesCompactAndInputTokens: POST /v1/responses/compact and
// /v1/responses/input_tokens are operations (the gateway once read
// "compact" as a response id and answered 405). They reach a kind that
// serves them at their own path, with the usage of compact counted; vLLM's
// kind refuses them with 400 unsupported_api; neither streams; a
// previous_response_id the tenant does not own is refused before any
// backend sees it.
func TestResponsesCompactAndInputTokens(t *testing.T) {
	tests := []struct {
		name, kind, path, body string
		status                 int
		code                   string
		backend                string // the path the backend must have got ("" none)
		prompt, completion     float64
	}{
		{"compact", "openai", "/v1/responses/compact", `{"model":"m","input":"a long conversation"}`, 200, "", "POST /v1/responses/compact", 30, 5},
		{"input_tokens", "openai", "/v1/responses/input_tokens", `{"model":"m","input":"count me"}`, 200, "", "POST /v1/responses/input_tokens", 0, 0},
		{"compact on vllm", "vllm", "/v1/responses/compact", `{"model":"m","input":"x"}`, 400, "unsupported_api", "", 0, 0},
		{"input_tokens on vllm", "vllm", "/v1/responses/input_tokens", `{"model":"m","input":"x"}`, 400, "unsupported_api", "", 0, 0},
		{"compact does not stream", "openai", "/v1/responses/compact", `{"model":"m","input":"x","stream":true}`, 400, "", "", 0, 0},
		{"compact of another's response", "openai", "/v1/responses/compact", `{"model":"m","previous_response_id":"resp_someone_elses"}`, 404, "previous_response_not_found", "", 0, 0},
		{"input_tokens of another's response", "openai", "/v1/responses/input_tokens", `{"model":"m","previous_response_id":"resp_someone_elses"}`, 404, "previous_response_not_found", "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &pathRecorder{}
			b := httptest.NewServer(rec)
			t.Cleanup(b.Close)
			g := gatewayOnKind(t, tt.kind, func(d *Deps) { d.Auth = tokenIsTenant{} }, b.URL)
			resp, body := g.call(t, http.MethodPost, tt.path, "t1", tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if tt.code != "" && errorCode(t, body) != tt.code {
				t.Fatalf("code %q, want %q: %s", errorCode(t, body), tt.code, body)
			}
			got := rec.got()
			switch {
			case tt.backend == "" && len(got) > 0:
				t.Fatalf("the backend was asked %q", got)
			case tt.backend != "" && (len(got) != 1 || got[0] != tt.backend):
				t.Fatalf("the backend was asked %q, want %q", got, tt.backend)
			}
			l := g.lastLog(t)
			if l["path"] != tt.path || l["prompt_tokens"] != tt.prompt || l["completion_tokens"] != tt.completion {
				t.Errorf("access log path %v tokens %v+%v, want %v+%v", l["path"], l["prompt_tokens"], l["completion_tokens"], tt.prompt, tt.completion)
			}
		})
	}
	t.Run("other methods", func(t *testing.T) {
		g := gatewayOnKind(t, "openai", func(d *Deps) { d.Auth = tokenIsTenant{} }, "http://127.0.0.1:1")
		resp, body := g.call(t, http.MethodGet, "/v1/responses/compact", "t1", "")
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || !strings.Contains(string(body), "POST") {
			t.Fatalf("GET /v1/responses/compact: %d Allow %q %s", resp.StatusCode, resp.Header.Get("Allow"), body)
		}
	})
}
