package upstream

import (
	"fmt"
	"strings"

	"github.com/llmgw/gateway/shared/request"
)

// ownFields is a kind that reads top-level body members beyond the
// operation's table (request.Operation.Fields): vLLM's sampling and
// decoding extensions, Azure's data_sources.
type ownFields interface {
	fields(op request.Operation) []string
}

// vllmSampling are the sampling and decoding members vLLM's
// OpenAI-compatible server adds to chat and completions (its reference's
// "extra parameters"). Left out, and so dropped: chat_template (a
// template the server renders), logits_processors and vllm_xargs (code
// and arguments the server loads by name), prompt_embeds (raw tensors),
// request_id (an id in the server's namespace that every tenant shares).
// priority and kv_transfer_params are per-tenant features; cache_salt is
// written by the gateway, never taken from the client.
var vllmSampling = []string{"use_beam_search", "top_k", "min_p", "repetition_penalty", "length_penalty",
	"stop_token_ids", "include_stop_str_in_output", "ignore_eos", "min_tokens", "skip_special_tokens",
	"spaces_between_special_tokens", "truncate_prompt_tokens", "prompt_logprobs", "allowed_token_ids", "bad_words",
	"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structural_tag", "guided_decoding_backend",
	"guided_whitespace_pattern", "structured_outputs", "return_tokens_as_token_ids", "return_token_ids",
	"add_special_tokens", "response_format", "cache_salt", "priority", "kv_transfer_params"}

// vllmChat are the members vLLM adds to chat beyond its sampling ones.
var vllmChat = append([]string{"echo", "add_generation_prompt", "continue_final_message", "documents",
	"chat_template_kwargs", "mm_processor_kwargs"}, vllmSampling...)

func (vllm) fields(op request.Operation) []string {
	switch op {
	case request.ChatCompletions:
		return vllmChat
	case request.Completions:
		return vllmSampling
	case request.Embeddings:
		return []string{"truncate_prompt_tokens", "add_special_tokens", "normalize", "cache_salt", "priority"}
	}
	return nil
}

// azureChat: Azure's "On your data", a per-tenant feature
// (request.DataSources): the resource retrieves as its own identity.
var azureChat = []string{"data_sources"}

func (azureV1) fields(op request.Operation) []string          { return azureFields(op) }
func (azureDeployments) fields(op request.Operation) []string { return azureFields(op) }

func azureFields(op request.Operation) []string {
	if op == request.ChatCompletions {
		return azureChat
	}
	return nil
}

// fieldSet is what an endpoint forwards of each operation's body beyond
// its table: the kind's own members and the operator's.
type fieldSet map[request.Operation]map[string]struct{}

func newFieldSet(k kind, operator []string) fieldSet {
	fs := fieldSet{}
	for _, op := range request.Operations() {
		var names []string
		if own, ok := k.(ownFields); ok {
			names = own.fields(op)
		}
		names = append(names[:len(names):len(names)], operator...)
		if len(names) == 0 {
			continue
		}
		set := make(map[string]struct{}, len(names))
		for _, n := range names {
			set[n] = struct{}{}
		}
		fs[op] = set
	}
	return fs
}

// RefusesUnknown reports whether a body member the endpoint does not
// forward is refused (pools[].unknown_fields: refuse) rather than
// dropped.
func (t *Target) RefusesUnknown() bool { return t.refuseUnknown }

// Forwards reports whether the endpoint forwards op's top-level body
// member name (unescaped): the operation's table, the kind's own members,
// or one the operator named (pools[].fields).
func (t *Target) Forwards(op request.Operation, name []byte) bool {
	if op.Forwards(name) {
		return true
	}
	_, ok := t.fields[op][string(name)]
	return ok
}

// neverFields are members an operator may not add to a pool: those the
// gateway writes itself or gates per tenant, whose meaning a pool-wide
// allowance would bypass.
var neverFields = []string{"cache_salt", "priority", "kv_transfer_params", "data_sources", "container",
	"mcp_servers", "conversation", "thread", "fallbacks", "billing_policy"}

// CheckField says why an operator may not add name to a pool's forwarded
// members (nil: it may). Config validation and NewTarget share it.
func CheckField(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a field name is empty")
	case len(name) > 32:
		return fmt.Errorf("field %q is longer than 32 bytes", name)
	case strings.ContainsAny(name, "\"\\ \t\r\n"):
		return fmt.Errorf("field %q holds a quote, a backslash or a space", name)
	}
	for _, n := range neverFields {
		if n == name {
			return fmt.Errorf("field %q is written by the gateway or gated per tenant (features), never allowed per pool", name)
		}
	}
	return nil
}
