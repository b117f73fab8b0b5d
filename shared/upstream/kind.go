package upstream

import (
	"net/http"

	"github.com/llmgw/gateway/shared/request"
)

// kind is everything a backend kind decides about the requests the
// gateway sends it. A kind that differs a little from another embeds it
// and overrides only the difference (vllm embeds openAI), as
// envoyproxy/ai-gateway's translators do; openAI is the base of the
// OpenAI-compatible kinds. Usage and errors are read by the shape of the
// answer (shared/sse, the server's judge), the same for every kind today,
// so they are not here.
type kind interface {
	// url is the endpoint URL for op on a deployment or model (base has
	// no trailing slash).
	url(base string, op request.Operation, backendModel string) string
	// root is the API root the Responses API's stored routes live below
	// ({base}/v1); ok is false on a surface without them.
	root(base string) (root string, ok bool)
	// bodyModel is the model value to write into the body ("" = unchanged).
	bodyModel(backendModel string) string
	// keyHeader is the header an api key goes in ("Authorization" is sent
	// as a bearer token).
	keyHeader() string
	// supports reports whether the kind serves op: the gateway translates
	// no API into another.
	supports(op request.Operation) bool
	// capField is the output-cap field of op's body the kind reads.
	capField(op request.Operation) request.CapField
	// setHeaders adds the kind's own headers to a request for op (h), after
	// the allowed caller headers.
	setHeaders(h http.Header, op request.Operation)
}

// namedProvider is a kind whose gen_ai.provider.name is not its config
// name (Target.Provider).
type namedProvider interface{ provider() string }

// registration is a backend kind's config name and how it is built from
// an endpoint's spec.
type registration struct {
	name  string
	build func(TargetSpec) kind
}

// kinds are the backend kinds, in the order config errors list them. A
// new kind is its file and its row here.
var kinds = []registration{
	{"openai", func(TargetSpec) kind { return openAI{} }},
	{"azure-openai", newAzure},
	{"vllm", func(TargetSpec) kind { return vllm{} }},
	{"anthropic", func(TargetSpec) kind { return anthropic{} }},
}

// Kinds lists the backend kinds NewTarget builds; config validation takes
// it from here.
func Kinds() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return names
}

// maxTokensFirst is the cap field of a backend that reads max_tokens
// wherever an operation has it: vLLM (which ignores fields it does not
// know, and knows max_completion_tokens only since 0.6) and Azure
// api-versions before 2024-09-01.
func maxTokensFirst(op request.Operation) request.CapField {
	if op.HasCap(request.MaxTokens) {
		return request.MaxTokens
	}
	return op.CapField()
}
