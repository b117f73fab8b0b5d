package upstream

import (
	"context"
	"errors"
	"net/http"

	"github.com/llmgw/gateway/shared/request"
)

// ErrNoResponsesAPI: the endpoint's surface has no Responses API (Azure
// OpenAI's deployments surface; its v1 surface has one).
var ErrNoResponsesAPI = errors.New("this endpoint's API surface has no Responses API (use azure_api: v1)")

// SupportsResponses reports whether the endpoint serves the Responses API
// and its stored routes.
func (t *Target) SupportsResponses() bool { return t.kind.supports(request.Responses) }

// NewStoredRequest builds a request about a stored response: path is below
// the API root ("/responses/{id}", "/responses/{id}/cancel",
// "/responses/{id}/input_items"), query the client's raw query (paging).
func (t *Target) NewStoredRequest(ctx context.Context, method, path, query string, in http.Header) (*http.Request, error) {
	if !t.SupportsResponses() {
		return nil, ErrNoResponsesAPI
	}
	u := t.kind.root(t.base) + path
	if query != "" {
		u += "?" + query
	}
	var body []byte
	if method == http.MethodPost {
		body = []byte{}
	}
	return t.newRequest(ctx, method, u, body, in)
}
