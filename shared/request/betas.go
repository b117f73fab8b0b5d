package request

import (
	"slices"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// Beta is an anthropic-beta value the gateway knows, decided by what it
// does, as the body's server-side features are.
type Beta struct {
	Name string
	// Default: the beta creates no state in the account and bills nothing
	// beyond the tokens the gateway counts, so every tenant may send it.
	// Any other value passes only for a tenant whose anthropic_beta
	// lists it.
	Default bool
	// Fields are the top-level body fields the beta gates: a request that
	// carries one while its beta is dropped is refused (GatedField), so
	// the header and the body never disagree (a backend given the field
	// without the beta refuses it or ignores it, and either changes what
	// the client asked for).
	Fields []string
	// Why is the reason it is (or is not) a default, for docs/ownership.md.
	Why string
}

// AnthropicBetas are the betas the gateway decides by what they do:
// the defaults (Claude Code sends most of them on every request, and
// forwards the body fields they gate), and the non-defaults whose gated
// fields are known. A value on neither list is not a default.
// docs/ownership.md renders this table (TestBetaTableDocumented).
var AnthropicBetas = []Beta{
	{Name: "interleaved-thinking-2025-05-14", Default: true, Why: "thinking between tool calls: thinking tokens are output tokens, within `max_tokens`"},
	{Name: "fine-grained-tool-streaming-2025-05-14", Default: true, Why: "streams tool input without buffering: the same tokens"},
	{Name: "token-efficient-tools-2025-02-19", Default: true, Why: "fewer output tokens for tool calls"},
	{Name: "output-128k-2025-02-19", Default: true, Why: "a larger `max_tokens` ceiling: the gateway's output cap still binds"},
	{Name: "claude-code-20250219", Default: true, Why: "Claude Code's marker: no state, no price"},
	{Name: "prompt-caching-2024-07-31", Default: true, Why: "prompt caching is generally available and keyed by `cache_control` in the body; the header changes nothing"},
	{Name: "context-management-2025-06-27", Default: true, Fields: []string{"context_management"},
		Why: "the backend clears old thinking or tool results from the prompt it reads: fewer input tokens, nothing stored"},
	{Name: "effort-2025-11-24", Default: true,
		Why: "`output_config.effort` trades thinking for speed: output tokens, within `max_tokens`"},
	{Name: "advanced-tool-use-2025-11-20", Default: true,
		Why: "tool search and `tools[].defer_loading` (tools loaded when needed), tool `input_examples`: the same tokens; a server tool it may call (code execution) is still a feature"},
	{Name: "dangerous-tool-use-2026-09-03", Default: true, Fields: []string{"safeguards"},
		Why: "Claude Code's auto mode: the backend checks the request's tool calls against `safeguards` as it answers; nothing stored"},
	{Name: "thinking-token-count-2026-05-13", Default: true, Why: "reports thinking tokens apart in `usage`: no other price"},
	{Name: "thinking-display-updates-2026-08-18", Default: true, Why: "how thinking blocks are returned: the same tokens"},
	{Name: "fast-mode-2026-02-01", Fields: []string{"speed"}, Why: "`speed` asks for faster output at a higher price"},
	{Name: "context-1m-2025-08-07", Why: "a higher price beyond 200k prompt tokens"},
	{Name: "extended-cache-ttl-2025-04-11", Why: "an hour-long cache, whose writes cost twice a 5-minute one's"},
	{Name: "files-api-2025-04-14", Why: "files stored in the account"},
	{Name: "mcp-client-2025-04-04", Fields: []string{"mcp_servers"}, Why: "the account connects to MCP servers (also the feature `mcp_servers`)"},
	{Name: "mcp-servers-2025-12-04", Fields: []string{"mcp_servers"}, Why: "the account connects to MCP servers (also the feature `mcp_servers`)"},
	{Name: "code-execution-2025-08-25", Fields: []string{"container"}, Why: "containers in the account (also the features `code_execution`, `container`)"},
}

// DefaultBeta reports whether the anthropic-beta value name passes for
// every tenant.
func DefaultBeta(name string) bool {
	i := slices.IndexFunc(AnthropicBetas, func(b Beta) bool { return b.Name == name })
	return i >= 0 && AnthropicBetas[i].Default
}

// GatedField returns the first top-level field of the JSON object raw that
// one of the dropped betas gates and none of the kept ones does, and that
// beta; "" when none.
func GatedField(kept, dropped []string, raw []byte) (field, beta string) {
	i := jsonscan.SkipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return "", ""
	}
	var kb [32]byte
	jsonscan.Members(raw, i, func(key []byte, _, _ int) {
		if field != "" {
			return
		}
		k := string(jsonscan.Key(key, &kb))
		for _, b := range AnthropicBetas {
			if slices.Contains(b.Fields, k) && slices.Contains(dropped, b.Name) && !gatedBy(kept, k) {
				field, beta = k, b.Name
				return
			}
		}
	})
	return field, beta
}

// gatedBy reports whether one of betas gates field.
func gatedBy(betas []string, field string) bool {
	return slices.ContainsFunc(AnthropicBetas, func(b Beta) bool {
		return slices.Contains(b.Fields, field) && slices.Contains(betas, b.Name)
	})
}
