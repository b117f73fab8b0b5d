package dispatch

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/llmgw/gateway/shared/jsonscan"
	"github.com/llmgw/gateway/shared/request"
)

// countKeys are, per counting operation, the members of a body it
// accepts: Anthropic's count_tokens refuses every other member of a
// Messages body (max_tokens, stream, sampling parameters), and OpenAI's
// input_tokens takes a Responses body's prompt members; none of the
// members left out is prompt text.
var countKeys = map[request.Operation][]string{
	request.CountTokens:          {"model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"},
	request.ResponsesInputTokens: {"model", "input", "instructions", "tools", "tool_choice", "previous_response_id", "conversation", "reasoning", "text", "parallel_tool_calls", "truncation"},
}

// CountBody is raw shaped for counter's count endpoint: only the members
// it reads, the model renamed as the backend knows it ("" keeps the
// client's). It fails for a body that sends one of those members twice.
func CountBody(raw []byte, counter request.Operation, model string) ([]byte, error) {
	return countBody(raw, countKeys[counter], model)
}

// countBody is raw with only the members count_tokens reads, the model
// renamed as the backend knows it ("" keeps the client's).
func countBody(raw []byte, keys []string, model string) ([]byte, error) {
	if k := duplicateKey(raw, keys); k != "" {
		// The count decides the reservation: a member sent twice (or in
		// two cases) could be counted as one and generated as the other,
		// so nothing is counted and the refusal stands (fails closed).
		return nil, fmt.Errorf("count body: %q sent twice", k)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		return nil, err
	}
	keep := make(map[string]json.RawMessage, len(keys))
	for _, k := range keys {
		if v, ok := all[k]; ok {
			keep[k] = v
		}
	}
	if model != "" {
		m, err := json.Marshal(model)
		if err != nil {
			return nil, err
		}
		keep["model"] = m
	}
	return json.Marshal(keep)
}

// duplicateKey is the first of keys that raw's top-level object has more
// than once, its escapes read and its case folded ("" when none).
func duplicateKey(raw []byte, keys []string) string {
	var seen [16]bool
	dup := ""
	var kb [32]byte
	i := jsonscan.SkipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return ""
	}
	jsonscan.Members(raw, i, func(k []byte, _, _ int) {
		name := jsonscan.Key(k, &kb)
		for j, want := range keys {
			if j < len(seen) && strings.EqualFold(string(name), want) {
				if seen[j] && dup == "" {
					dup = want
				}
				seen[j] = true
			}
		}
	})
	return dup
}
