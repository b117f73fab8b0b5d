package upstream

import (
	"net/http"

	"github.com/llmgw/gateway/shared/problem"
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
	// ({base}/v1). It is asked only of a kind that supports
	// request.Responses: supports alone says whether a kind serves the
	// Responses API.
	root(base string) string
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

// cacheSalted is a kind whose prefix cache is shared between requests of
// one cache_salt (Target.SaltsCache).
type cacheSalted interface{ saltsCache() }

// runningUsage is a kind that reports a stream's usage on every chunk
// when asked (Target.RunningUsage).
type runningUsage interface{ runningUsage() }

// namedProvider is a kind whose gen_ai.provider.name is not its config
// name (Target.Provider).
type namedProvider interface{ provider() string }

// registration is a backend kind's config name, how it is built from an
// endpoint's spec, and the config rules that are the kind's own (the
// config check runs them through TargetSpec.Check and WithDefaults).
type registration struct {
	name  string
	build func(TargetSpec) kind
	// entra: the kind's service takes Entra ID tokens (auth: entra).
	entra bool
	// account: the kind's service reads OpenAI-Organization and
	// OpenAI-Project (organization, project).
	account bool
	// check reports problems with the kind's own settings; nil = none.
	check func(at problem.At, s TargetSpec)
	// defaults fills the kind's own zero settings; nil = none.
	defaults func(s TargetSpec) TargetSpec
}

// kinds are the backend kinds, in the order config errors list them. A
// new kind is its file and its row here.
var kinds = []registration{
	{name: "openai", build: func(TargetSpec) kind { return openAI{} }, account: true},
	{name: "azure-openai", build: newAzure, entra: true, check: checkAzure, defaults: azureDefaults},
	{name: "vllm", build: func(TargetSpec) kind { return vllm{} }},
	// Claude in Microsoft Foundry takes Entra ID too.
	{name: "anthropic", build: func(TargetSpec) kind { return anthropic{} }, entra: true},
}

// registered is the row of the kind named name; nil when there is none.
func registered(name string) *registration {
	for i := range kinds {
		if kinds[i].name == name {
			return &kinds[i]
		}
	}
	return nil
}

// kindsWhere lists the kinds whose row has has set, in the table's order.
func kindsWhere(has func(registration) bool) []string {
	var names []string
	for _, k := range kinds {
		if has(k) {
			names = append(names, k.name)
		}
	}
	return names
}

// Kinds lists the backend kinds NewTarget builds; the config check
// (CheckPool) names them from here.
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
