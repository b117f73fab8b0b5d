package upstream

import (
	"net/http"
	"net/url"
)

// DefaultAnthropicVersion is the anthropic-version an anthropic endpoint
// is sent when the caller names none: the Messages API's only stable
// version.
const DefaultAnthropicVersion = "2023-06-01"

// anthropic is a Messages API endpoint: Anthropic's own
// ({base}/v1/messages with x-api-key), Claude in Microsoft Foundry (the
// base is https://{resource}.services.ai.azure.com/anthropic; an api key
// in x-api-key, or an Entra ID bearer token), or any service with
// Anthropic's shape. The model is named in the body (a Foundry deployment
// name).
type anthropic struct{}

func (anthropic) url(base *url.URL, op Operation, _ string) string {
	return base.String() + "/v1" + op.suffix()
}

func (anthropic) bodyModel(backend string) string { return backend }

func (anthropic) keyHeader() string { return "X-Api-Key" }

// Supports reports whether the endpoint serves op: an anthropic endpoint
// only the Messages API (no translation to or from Chat Completions); vLLM
// its OpenAI routes and its Messages-compatible /v1/messages (not
// count_tokens); OpenAI and Azure OpenAI their OpenAI routes, the
// Responses API only where the surface has it (not Azure's deployments).
func (t *Target) Supports(op Operation) bool {
	switch t.wire.(type) {
	case anthropic:
		return op.Anthropic()
	case vllm:
		return op != CountTokens
	}
	if op.Anthropic() {
		return false
	}
	return op != Responses || t.SupportsResponses()
}

// anthropicHeaders adds to a Messages API request (h) the caller's
// Anthropic-Version and Anthropic-Beta (in), by allow-list, and an
// anthropic endpoint's default version when the caller sent none.
func anthropicHeaders(h, in http.Header, w wire) {
	for _, k := range [...]string{"Anthropic-Version", "Anthropic-Beta"} {
		if v := in[k]; len(v) > 0 {
			h[k] = v
		}
	}
	if _, ok := w.(anthropic); ok && len(h["Anthropic-Version"]) == 0 {
		h["Anthropic-Version"] = []string{DefaultAnthropicVersion}
	}
}
