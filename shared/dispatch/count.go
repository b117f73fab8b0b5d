package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmgw/gateway/shared/jsonscan"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
)

// maxCountAnswer bounds a count endpoint's answer: {"input_tokens":N}.
const maxCountAnswer = 4 << 10

// maxCount is the largest count believed: past 2^53 a JSON number is no
// longer an exact integer in most decoders (the budget store's bound too).
const maxCount = 1 << 53

// Count asks the count endpoint of op's Counter, at pool's first endpoint
// in order, for the exact input tokens of raw (the client's body, model
// named as the client did), with the client's headers h and the request's
// id. It is the gateway's own call, bounded by ctx: the caller makes it
// where an upper bound of the prompt would refuse the request and the
// prompt itself may fit. ok is false when op has no counter, the endpoint
// cannot count, or the count failed or cannot be true; the caller then
// keeps its bound.
func (d *Dispatcher) Count(ctx context.Context, id string, pool *route.Pool, op request.Operation, model string, raw []byte, h http.Header) (int64, bool) {
	counter, ok := op.Counter()
	if !ok || pool == nil {
		return 0, false
	}
	var scratch [8]*route.Endpoint
	order, _ := d.Router.Order(pool, scratch[:0], 1, 0)
	if len(order) == 0 {
		return 0, false
	}
	target := d.Targets[order[0]]
	if !target.Supports(counter) {
		return 0, false
	}
	cb, err := CountBody(raw, counter, target.BodyModel(model))
	if err != nil {
		return 0, false
	}
	req, err := target.NewRequest(ctx, counter, model, cb, h)
	if err != nil {
		return 0, false
	}
	req.Header.Set("X-Request-Id", id)
	resp, err := d.Client.Do(req)
	if err != nil {
		d.Log.Info("input-token count failed: the prompt bound stands", "request_id", id, "pool", pool.Name, "err", err)
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		d.Log.Info("input-token count refused: the prompt bound stands", "request_id", id, "pool", pool.Name, "status", resp.StatusCode)
		return 0, false
	}
	var v struct {
		InputTokens *int64 `json:"input_tokens"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxCountAnswer)).Decode(&v); err != nil ||
		v.InputTokens == nil || *v.InputTokens < 1 || *v.InputTokens > maxCount {
		d.Log.Warn("input-token count answer cannot be true: the prompt bound stands", "request_id", id, "pool", pool.Name)
		return 0, false
	}
	return *v.InputTokens, true
}

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
