package request

import (
	"bytes"
	"fmt"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// The field table: the top-level members of each operation's body that
// the gateway forwards. A vendor adds fields every month, and a field the
// gateway never heard of may act on the one account every tenant shares
// (retrieve as the operator's identity, read another tenant's state by
// id, reorder a shared server's queue); so what the table does not name
// is not forwarded: dropped and named to the caller (the server's
// X-Llmgw-Dropped-Fields), or refused where the operator chose so. A
// backend kind adds the members only it reads (upstream: a kind's
// fields), an operator adds named members per pool.
//
// Each list is taken from the vendor's API reference and checked
// against the official SDK's request type (fields_test.go), so a new
// SDK field fails a test until its row says forward, drop or feature.
// A member that reaches account or shared-backend state is in no list
// unless a per-tenant feature gates it (features.go): the feature check
// refuses it for a tenant without the feature.

// openAIStream is the member every streaming OpenAI operation has that
// the SDKs set by the method called, not by a field.
const openAIStream = "stream"

var (
	// chatFields: Chat Completions. Dropped: store (stored completions
	// are account state no tenant can be proven to own). Feature-gated:
	// data_sources (Azure's "On your data", the azure-openai kind adds
	// it).
	chatFields = []string{"messages", "model", openAIStream, "frequency_penalty", "logprobs", "max_completion_tokens",
		"max_tokens", "n", "presence_penalty", "prompt_cache_key", "safety_identifier", "seed", "temperature",
		"top_logprobs", "top_p", "parallel_tool_calls", "user", "audio", "logit_bias", "metadata", "modalities",
		"moderation", "prompt_cache_retention", "reasoning_effort", "service_tier", "stop", "stream_options",
		"verbosity", "function_call", "functions", "prediction", "prompt_cache_options", "response_format",
		"tool_choice", "tools", "web_search_options"}
	completionsFields = []string{"prompt", "model", openAIStream, "best_of", "echo", "frequency_penalty", "logprobs",
		"max_tokens", "n", "presence_penalty", "seed", "suffix", "temperature", "top_p", "user", "logit_bias",
		"stop", "stream_options"}
	embeddingsFields = []string{"input", "model", "dimensions", "user", "encoding_format"}
	// responsesFields: the Responses API. Dropped: access_programs
	// (entitlements of the account, not of a request). conversation and
	// prompt are known, and checked as stored state.
	responsesFields = []string{"background", "instructions", "max_output_tokens", "max_tool_calls",
		"parallel_tool_calls", "previous_response_id", "prompt_cache_key", "safety_identifier", "store",
		"temperature", "top_logprobs", "top_p", "user", "context_management", "conversation", "include",
		"metadata", "moderation", "prompt", "prompt_cache_retention", "service_tier", "stream_options",
		"truncation", "image", "input", "model", "prompt_cache_options", "reasoning", "text", "tool_choice",
		"tools", openAIStream}
	compactFields     = []string{"model", "instructions", "previous_response_id", "prompt_cache_key", "input", "prompt_cache_options", "prompt_cache_retention", "service_tier", "image"}
	inputTokensFields = []string{"instructions", "model", "parallel_tool_calls", "previous_response_id",
		"conversation", "input", "text", "tool_choice", "tools", "personality", "reasoning", "truncation"}
	// messagesFields: Anthropic's Messages API, with the beta members
	// that create no account state (context_management, compaction,
	// output_format) and the sampling members the reference still takes
	// (temperature, top_k, top_p); speed and safeguards pass as the
	// betas that gate them decide (betas.go: fast mode is the tenant's,
	// auto mode's safeguards everyone's). Feature-gated: container,
	// mcp_servers. Dropped: inference_geo (priced above the model's rate),
	// diagnostics (reads another request's cache by its id), thread
	// (server-held conversation state), fallbacks and
	// fallback_credit_token (models the tenant was not given),
	// billing_policy (bills someone else).
	messagesFields = []string{"max_tokens", "messages", "model", "container", "cache_control", "metadata",
		"output_config", "service_tier", "stop_sequences", "system", "thinking", "tool_choice", "tools", "stream",
		"compaction", "context_management", "mcp_servers", "output_format", "temperature", "top_k", "top_p",
		"speed", "safeguards"}
	countTokensFields = []string{"messages", "model", "cache_control", "output_config", "system", "thinking",
		"tool_choice", "tools", "compaction", "context_management", "mcp_servers", "output_format", "speed"}
)

// withheld are the members of each operation's reference (and its SDK's
// request type) that no table forwards, each for the reason its list
// says (fields_test.go checks every SDK member is forwarded or here).
var withheld = map[Operation][]string{
	ChatCompletions: {"store"},
	Responses:       {"access_programs"},
	Messages:        {"inference_geo", "diagnostics", "thread", "fallbacks", "fallback_credit_token", "billing_policy"},
	CountTokens:     {"billing_policy"},
}

// Withheld lists the members of op's API that the gateway does not
// forward by default (dropped, or refused where the operator says so).
func (o Operation) Withheld() []string { return withheld[o] }

// fieldSets is each operation's list as a set, built once from the
// table's rows (Register adds one per registered operation).
var fieldSets = func() []map[string]struct{} {
	sets := make([]map[string]struct{}, len(operations))
	for op := range operations {
		sets[op] = setOf(operations[op].fields)
	}
	return sets
}()

func setOf(names []string) map[string]struct{} {
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

// Fields lists the top-level members op forwards to every backend kind:
// the table's row, shared, never written.
func (o Operation) Fields() []string { return operations[o].fields }

// featureFields are the top-level members that are per-tenant features
// on every operation, whatever its API documents (featDeclared): known
// everywhere, so that the feature check refuses them by name for a
// tenant without the grant rather than the table dropping them quietly.
var featureFields = setOf([]string{"data_sources", "priority", "kv_transfer_params"})

// Forwards reports whether op's table names the member name (a key as a
// decoder reads it: unescaped, case and spelling exact), or it is a
// feature every operation gates (featureFields).
func (o Operation) Forwards(name []byte) bool {
	if _, ok := fieldSets[o][string(name)]; ok { // no allocation: map lookup of a converted []byte
		return true
	}
	_, ok := featureFields[string(name)]
	return ok
}

// Unknown is what an allow-list does not name in a body: how many
// top-level members, and the first's key as sent.
type Unknown struct {
	N     int
	First []byte
}

// UnknownFields scans the top-level members of b (a valid JSON object)
// and counts those known does not accept, given each key unescaped
// (jsonscan.Key: a key that does not unescape, or is longer than any
// field, is unknown). It allocates nothing.
func UnknownFields(b []byte, known func(name []byte) bool) Unknown {
	var u Unknown
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return u
	}
	jsonscan.Members(b, i, func(raw []byte, _, _ int) {
		if k := keyOf(raw); k != nil && known(k) {
			return
		}
		if u.N == 0 {
			u.First = raw
		}
		u.N++
	})
	return u
}

// keyOf is the key raw (between its quotes) as a decoder reads it
// (jsonscan.Key): raw itself unless it has escapes, which alone cost an
// allocation.
func keyOf(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	var kb [32]byte
	return jsonscan.Key(raw, &kb)
}

// DropFields appends to dst the body b without its top-level members
// known does not accept, and returns it with those members' keys as sent
// (b must be a valid JSON object; the rest is copied as it is, in
// order).
func DropFields(dst, b []byte, known func(name []byte) bool) ([]byte, [][]byte) {
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return append(dst, b...), nil
	}
	var dropped [][]byte
	dst = append(dst, b[:i+1]...)
	first := true
	jsonscan.Members(b, i, func(raw []byte, v, end int) {
		if k := keyOf(raw); k == nil || !known(k) {
			dropped = append(dropped, raw)
			return
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		// raw is b[at+1:…] (jsonscan.Members): the member starts at its
		// key's opening quote.
		at := cap(b) - cap(raw) - 1
		dst = append(dst, b[at:end]...)
	})
	return append(dst, '}'), dropped
}

// Server tools' members: inside a tool the backend runs on the shared
// account, a member the tool's row does not name is refused, never
// dropped: a tool's members mostly restrict it (allowed_domains,
// allowed_tools, max_num_results), so forwarding the tool without one
// would widen what it does. The rows are the SDKs' tool types (checked
// by fields_test.go); the caller's own tools (function, custom, the
// client-run shells) pass as sent.
var (
	responsesWebSearch  = []string{"type", "filters", "user_location", "search_context_size", "external_web_access"}
	responsesWebPreview = []string{"type", "user_location", "search_context_size", "search_content_types"}
	// responsesToolMembers is each Responses API server tool's row, by type;
	// mcp's tunnel_id (a tunnel into a network the account reaches) is
	// left out.
	responsesToolMembers = map[string][]string{
		"web_search": responsesWebSearch, "web_search_preview": responsesWebPreview,
		"web_search_2025_08_26": responsesWebSearch, "web_search_preview_2025_03_11": responsesWebPreview,
		"file_search":      {"type", "vector_store_ids", "max_num_results", "filters", "ranking_options"},
		"code_interpreter": {"type", "container", "allowed_callers"},
		"mcp": {"type", "server_label", "server_url", "connector_id", "authorization", "headers", "allowed_tools",
			"require_approval", "server_description", "defer_loading", "allowed_callers"},
		"image_generation": {"type", "frame_count", "frame_duration_ms", "output_compression", "partial_images",
			"input_fidelity", "action", "background", "complexity", "input_image_mask", "model", "moderation",
			"output_format", "quality", "size", "svg"},
		"computer_use_preview": {"type", "display_height", "display_width", "environment"},
		"computer":             {"type"},
	}
	// messagesToolMembers is each Anthropic server tool family's row
	// (every dated version's members).
	messagesToolMembers = map[string][]string{
		"web_search": {"type", "name", "cache_control", "defer_loading", "strict", "allowed_callers", "max_uses",
			"allowed_domains", "blocked_domains", "user_location", "response_inclusion"},
		"web_fetch": {"type", "name", "cache_control", "defer_loading", "strict", "allowed_callers", "max_uses",
			"allowed_domains", "blocked_domains", "max_content_tokens", "citations", "url_sources", "use_cache", "response_inclusion"},
		"code_execution": {"type", "name", "cache_control", "defer_loading", "strict", "allowed_callers"},
		"computer": {"type", "name", "cache_control", "defer_loading", "strict", "allowed_callers", "input_examples",
			"display_height_px", "display_width_px", "display_number", "enable_zoom"},
	}
	responsesToolSets = setsOf(responsesToolMembers)
	messagesToolSets  = setsOf(messagesToolMembers)
)

func setsOf(rows map[string][]string) map[string]map[string]struct{} {
	out := make(map[string]map[string]struct{}, len(rows))
	for k, names := range rows {
		out[k] = setOf(names)
	}
	return out
}

// MemberError refuses a member of a server tool that the tool's row does
// not name.
type MemberError struct{ Param string }

func (e *MemberError) Error() string {
	return fmt.Sprintf("'%s' is not a parameter of this server tool that the gateway forwards: a server tool runs on the backend account every tenant shares, so it passes only with the members the gateway knows. Remove it.", e.Param)
}

// Code is the error code of OpenAI's error JSON for e.
func (e *MemberError) Code() string { return "unsupported_parameter" }

// serverToolMembers refuses the first member of the server tool at b[i]
// (tools[n], of type typ) that its row does not name.
func serverToolMembers(b []byte, i, n int, rule featureRule, typ []byte, prefix string) error {
	var set map[string]struct{}
	if rule&featMessagesTools != 0 {
		set = messagesToolSets[string(messagesFamily(typ))]
	} else {
		set = responsesToolSets[string(typ)]
	}
	if set == nil {
		return nil // no row: the tool table decides (a caller's own tool)
	}
	var bad []byte
	jsonscan.Members(b, i, func(raw []byte, _, _ int) {
		if bad != nil {
			return
		}
		if k := keyOf(raw); k == nil {
			bad = raw
		} else if _, ok := set[string(k)]; !ok {
			bad = raw
		}
	})
	if bad == nil {
		return nil
	}
	return &MemberError{Param: fmt.Sprintf("%stools[%d].%s", prefix, n, clipKey(bad))}
}

// clipKey is a key as sent, at most 64 bytes: a caller chooses it.
func clipKey(raw []byte) string {
	if len(raw) > 64 {
		return string(raw[:64]) + "…"
	}
	return string(raw)
}
