package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestModelsCredentials: the models routes take the JWT wherever the routes
// beside them do: x-api-key (anthropic-sdk-go's Models.List sends only
// that; it got 401 before), Azure's api-key, Authorization (which wins when
// both are sent).
func TestModelsCredentials(t *testing.T) {
	g := newTestGatewayWith(t, func(d *Deps) { d.Auth = bearerOnly{} }, http.HandlerFunc(sseBackend))
	tests := []struct {
		name, path string
		header     map[string]string
		status     int
	}{
		{"list with x-api-key", "/v1/models", map[string]string{"X-Api-Key": "good", "Anthropic-Version": "2023-06-01"}, 200},
		{"one model with x-api-key", "/v1/models/m", map[string]string{"X-Api-Key": "good"}, 200},
		{"list with Authorization", "/v1/models", map[string]string{"Authorization": "Bearer good"}, 200},
		{"Azure list with api-key", "/openai/models?api-version=2024-10-21", map[string]string{"Api-Key": "good"}, 200},
		{"Azure v1 list with x-api-key", "/openai/v1/models", map[string]string{"X-Api-Key": "good"}, 200},
		{"wrong x-api-key", "/v1/models", map[string]string{"X-Api-Key": "bad"}, 401},
		{"Authorization wins over x-api-key", "/v1/models", map[string]string{"Authorization": "Bearer bad", "X-Api-Key": "good"}, 401},
		{"none", "/v1/models", nil, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, g.srv.URL+tt.path, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if tt.status == 200 && !strings.Contains(string(b), `"id":"m"`) {
				t.Fatalf("answer lacks the tenant's model: %s", b)
			}
			if tt.status == 401 && errorCode(t, b) == "" {
				t.Fatalf("401 without a code: %s", b)
			}
		})
	}
}
