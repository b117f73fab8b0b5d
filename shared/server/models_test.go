package server

import (
	"encoding/json"
	"errors"
	"fmt"
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
			resp, b := getWith(t, g.srv.URL+tt.path, tt.header)
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

// codexRequired mirrors what Codex's ModelsResponse (codex-rs protocol,
// openai_models.rs) requires as serde decodes it: a models array whose
// entries carry every field that is neither an Option nor defaulted.
// Unknown keys are ignored, as serde does by default.
var codexRequired = []string{"slug", "display_name", "supported_reasoning_levels", "shell_type", "visibility",
	"supported_in_api", "priority", "base_instructions", "supports_reasoning_summaries", "support_verbosity",
	"truncation_policy", "supports_parallel_tool_calls", "experimental_supported_tools"}

// decodeCodexModels decodes b as Codex does, or says why Codex would log
// "failed to decode models response".
func decodeCodexModels(b []byte) error {
	var resp struct {
		Models *[]map[string]json.RawMessage `json:"models"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return err
	}
	if resp.Models == nil {
		return errors.New("missing field `models`")
	}
	for i, m := range *resp.Models {
		for _, k := range codexRequired {
			if _, ok := m[k]; !ok {
				return fmt.Errorf("models[%d]: missing field `%s`", i, k)
			}
		}
	}
	return nil
}

// TestModelsCodexShape: GET /v1/models answers Codex's model discovery
// (it sends ?client_version=) in a shape Codex decodes, and every client
// OpenAI's list (object "list", data with the tenant's models) in the
// same body. Codex's list is empty: its own catalogue stays in force.
func TestModelsCodexShape(t *testing.T) {
	g := newTestGatewayWith(t, func(d *Deps) { d.Auth = bearerOnly{} }, http.HandlerFunc(sseBackend))
	if err := decodeCodexModels([]byte(`{"object":"list","data":[{"id":"m"}]}`)); err == nil {
		t.Fatal("the mirror of Codex's decoder accepts OpenAI's list alone, which Codex refuses")
	}
	for _, path := range []string{"/v1/models?client_version=0.171.0", "/v1/models"} {
		resp, b := getWith(t, g.srv.URL+path, map[string]string{"Authorization": "Bearer good"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		if err := decodeCodexModels(b); err != nil {
			t.Fatalf("%s: Codex would fail to decode %s: %v", path, b, err)
		}
		var list struct {
			Object string
			Data   []struct{ ID, Object string }
		}
		if err := json.Unmarshal(b, &list); err != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "m" || list.Data[0].Object != "model" {
			t.Fatalf("%s: not OpenAI's list: %s (%v)", path, b, err)
		}
	}
}

// getWith GETs url with header and returns the response and its body.
func getWith(t *testing.T, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}
