package upstream

import "net/url"

// vllm is vLLM's OpenAI-compatible server: the same paths as OpenAI, with the
// public model name mapped to the served model name.
type vllm struct{}

func (vllm) url(base *url.URL, op Operation, _ string) string {
	return base.String() + "/v1" + op.suffix()
}

func (vllm) bodyModel(backend string) string { return backend }

func (vllm) keyHeader() string { return "Authorization" }
