package upstream

import (
	"context"
	"errors"
	"net/http"
	"net/url"
)

// ErrNoResponsesAPI: the endpoint's surface has no Responses API (Azure
// OpenAI's deployments surface; its v1 surface has one).
var ErrNoResponsesAPI = errors.New("this endpoint's API surface has no Responses API (use azure_api: v1)")

// apiRoot is a wire format whose API has a root below which the Responses
// API's routes live ({base}/v1, {endpoint}/openai/v1).
type apiRoot interface{ root(base *url.URL) string }

func (openAI) root(base *url.URL) string  { return base.String() + "/v1" }
func (vllm) root(base *url.URL) string    { return base.String() + "/v1" }
func (azureV1) root(base *url.URL) string { return base.String() + "/openai/v1" }

// SupportsResponses reports whether the endpoint serves the Responses API.
func (t *Target) SupportsResponses() bool {
	_, ok := t.wire.(apiRoot)
	return ok
}

// NewStoredRequest builds a request about a stored response: path is below
// the API root ("/responses/{id}", "/responses/{id}/cancel",
// "/responses/{id}/input_items"), query the client's raw query (paging).
func (t *Target) NewStoredRequest(ctx context.Context, method, path, query string, in http.Header) (*http.Request, error) {
	r, ok := t.wire.(apiRoot)
	if !ok {
		return nil, ErrNoResponsesAPI
	}
	u := r.root(t.Base) + path
	if query != "" {
		u += "?" + query
	}
	var body []byte
	if method == http.MethodPost {
		body = []byte{}
	}
	return t.newRequest(ctx, method, u, body, in)
}
