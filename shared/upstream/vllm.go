package upstream

import "github.com/llmgw/gateway/shared/request"

// vllm is vLLM's OpenAI-compatible server: OpenAI's paths, with the public
// model name mapped to the served model name. It differs from OpenAI in
// reading max_tokens as chat's cap, and in serving Anthropic's
// /v1/messages too (not count_tokens), and not the Responses API's
// compact and input_tokens (request.Operation.Hosted).
type vllm struct{ openAI }

// saltsCache: vLLM shares its prefix cache between requests of one
// cache_salt, so a salt per tenant keeps one tenant from timing
// another's cached prompts.
func (vllm) saltsCache() {}

// runningUsage: vLLM reports the usage so far on every chunk of a
// stream that asks stream_options.continuous_usage_stats (beside
// include_usage), so a stream stopped mid-answer is billed its prompt and
// output as the backend counted them.
func (vllm) runningUsage() {}

func (vllm) capField(op request.Operation) request.CapField { return maxTokensFirst(op) }

func (v vllm) supports(op request.Operation) bool {
	return v.openAI.supports(op) && !op.Hosted() || op == request.Messages
}
