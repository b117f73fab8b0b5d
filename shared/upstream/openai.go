package upstream

import "net/url"

// openAI is the OpenAI API: {base}/v1/chat/completions, bearer key, the model
// named in the body.
type openAI struct{}

func (openAI) url(base *url.URL, op Operation, _ string) string {
	return base.String() + "/v1" + op.suffix()
}

func (openAI) bodyModel(backend string) string { return backend }

func (openAI) keyHeader() string { return "Authorization" }
