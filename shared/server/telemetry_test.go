package server

import "testing"

// TestRouteOf: http.route takes only bounded values, whatever the path.
func TestRouteOf(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/v1/chat/completions":                                  "/v1/chat/completions",
		"/v1/responses/resp_123":                                "/v1/responses/{response_id}",
		"/v1/models/gpt-4o":                                     "/v1/models/{model}",
		"/openai/deployments/prod-4o/chat/completions":          "/openai/deployments/{deployment}/chat/completions",
		"/openai/deployments/prod-4o/anything/the/caller/wants": "other",
		"/openai/v1/chat/completions":                           "/openai/v1/chat/completions",
		"/v1/secret-path-123":                                   "other",
		"/healthz":                                              "/healthz",
		"/v1/messages":                                          "/v1/messages",
		"/v1/messages/count_tokens":                             "/v1/messages/count_tokens",
		"/openai/responses":                                     "/openai/v1/responses",
		"/openai/responses/resp_1/cancel":                       "/openai/v1/responses/{response_id}",
		"/openai/models":                                        "/openai/v1/models",
	} {
		if got := routeOf(path); got != want {
			t.Errorf("routeOf(%q) = %q, want %q", path, got, want)
		}
	}
}
