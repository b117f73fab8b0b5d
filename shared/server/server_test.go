package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/ratelimit"
)

func TestAPIErrorShape(t *testing.T) {
	tests := []struct {
		name string
		err  *apiError
		want string
	}{
		{"nulls for absent param and code", serverError(502, "", "boom"), `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`},
		{"param and code", invalidRequest(400, "missing_required_parameter", "model", "you must provide a model parameter"),
			`{"error":{"message":"you must provide a model parameter","type":"invalid_request_error","param":"model","code":"missing_required_parameter"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(tt.err.JSON()); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	t.Run("write sets status and headers", func(t *testing.T) {
		rec := httptest.NewRecorder()
		(&apiError{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "slow down", RetryAfter: 1500 * time.Millisecond}).write(rec)
		if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("status %d headers %v", rec.Code, rec.Header())
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("body %q", rec.Body)
		}
	})
}

func TestRoutingErrors(t *testing.T) {
	s := New(Deps{})
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/nope", 404, ""},
		{"POST", "/v1/chat/completion", 404, ""},
		{"GET", "/v1/chat/completions", 405, "POST"},
		{"DELETE", "/v1/models", 405, "GET"},
		{"GET", "/healthz", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			if rec.Code != tt.status || rec.Header().Get("Allow") != tt.allow || rec.Header().Get("X-Request-Id") == "" {
				t.Fatalf("status %d allow %q id %q", rec.Code, rec.Header().Get("Allow"), rec.Header().Get("X-Request-Id"))
			}
			if tt.status != 200 {
				var e errorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" {
					t.Fatalf("not OpenAI error JSON: %s", rec.Body)
				}
			}
		})
	}
}

func TestRateHeaders(t *testing.T) {
	now := time.Unix(1000, 0)
	h := http.Header{}
	setRateHeaders(h, ratelimit.Decision{Allowed: true, Limit: 60, Remaining: 59, Reset: now.Add(1500 * time.Millisecond)}, now)
	for k, want := range map[string]string{"X-Ratelimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "59", "X-Ratelimit-Reset-Requests": "1.5s"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

func BenchmarkRequestID(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = newRequestID()
	}
}
