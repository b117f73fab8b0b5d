package upstream

import (
	"net/http"

	"github.com/llmgw/gateway/shared/request"
)

// openAI is the OpenAI API: {base}/v1/chat/completions, bearer key, the
// model named in the body; every OpenAI operation, the Responses API
// included, and max_completion_tokens as chat's cap (OpenAI's reasoning
// models refuse max_tokens). It is the base the OpenAI-compatible kinds
// embed.
type openAI struct{}

func (openAI) url(base string, op request.Operation, _ string) string {
	return base + "/v1" + op.Suffix()
}

func (openAI) root(base string) string { return base + "/v1" }

func (openAI) bodyModel(backend string) string { return backend }

func (openAI) keyHeader() string { return "Authorization" }

func (openAI) supports(op request.Operation) bool { return !op.Anthropic() }

func (openAI) capField(op request.Operation) request.CapField { return op.CapField() }

func (openAI) setHeaders(http.Header, request.Operation) {}
