package upstream

import (
	"net/http"

	"github.com/llmgw/gateway/shared/request"
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
// name). It serves only the Messages API (no translation to or from Chat
// Completions).
type anthropic struct{}

func (anthropic) url(base string, op request.Operation, _ string) string {
	return base + "/v1" + op.Suffix()
}

func (anthropic) root(string) string { return "" }

func (anthropic) bodyModel(backend string) string { return backend }

func (anthropic) keyHeader() string { return "X-Api-Key" }

func (anthropic) supports(op request.Operation) bool { return op.Anthropic() }

func (anthropic) capField(op request.Operation) request.CapField { return op.CapField() }

// setHeaders adds the default Anthropic-Version when the caller sent none.
func (anthropic) setHeaders(h http.Header, op request.Operation) {
	if op.Anthropic() && len(h["Anthropic-Version"]) == 0 {
		h["Anthropic-Version"] = []string{DefaultAnthropicVersion}
	}
}
