package sse

import (
	"bytes"
	"math"

	"github.com/llmgw/gateway/shared/jsonscan"
	"github.com/llmgw/gateway/shared/price"
)

// Usage holds a usage object's token counts: Chat Completions'
// prompt/completion tokens or the Responses API's input/output tokens, with
// their cached and reasoning details. An Anthropic usage object is read
// into the same shape: PromptTokens is every input token the request
// processed (input_tokens + cache_creation_input_tokens +
// cache_read_input_tokens, as OpenAI's prompt_tokens includes its cached
// tokens) and CachedTokens the cache reads.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int64
	CachedTokens, ReasoningTokens               int64
	// CacheWriteTokens is Anthropic's cache_creation_input_tokens (part
	// of PromptTokens), CacheWrite1hTokens its share written for an hour
	// (cache_creation.ephemeral_1h_input_tokens): priced apart.
	CacheWriteTokens, CacheWrite1hTokens int64
	// Tier is the service tier the answer says it was served at
	// (service_tier: top level in OpenAI's and Azure's answers, in the
	// response object of the Responses API's, in usage in Anthropic's);
	// TierReported is set when the answer had one.
	Tier         price.Tier
	TierReported bool
	// ServerTools is Anthropic's usage.server_tool_use, the server tools'
	// uses the backend ran (billed per use, outside the tokens).
	ServerTools ServerToolUse
	// Calls counts the Responses API's hosted tool call items in the
	// answer's output, beside its usage (billed per call, outside the
	// tokens, and reported in no usage object).
	Calls ToolCalls
}

// HostedTool is a Responses API hosted tool whose calls an answer lists
// as output items of their own type ("web_search_call", ...): each item
// is one call the backend ran and bills.
type HostedTool uint8

// The hosted tools counted.
const (
	WebSearchCall HostedTool = iota
	FileSearchCall
	CodeInterpreterCall
	MCPCall
	ImageGenerationCall
	ComputerCall
	NumHostedTools
)

var hostedCallTypes = [NumHostedTools]string{
	WebSearchCall: "web_search_call", FileSearchCall: "file_search_call", CodeInterpreterCall: "code_interpreter_call",
	MCPCall: "mcp_call", ImageGenerationCall: "image_generation_call", ComputerCall: "computer_call",
}

// ToolCalls counts an answer's hosted tool call items by tool. Counted
// is set when the answer's output was read: then a tool without items
// ran none.
type ToolCalls struct {
	N       [NumHostedTools]int64
	Counted bool
}

// add counts an output item of type typ (a raw JSON string's contents).
func (c *ToolCalls) add(typ []byte) {
	var kb [32]byte
	t := jsonscan.Key(typ, &kb)
	for i, name := range hostedCallTypes {
		if string(t) == name {
			c.N[i]++
			return
		}
	}
}

// countCalls counts the call items of the output array arr (arr[0] is
// '['); an item's last "type" is its type, as a decoder reads it.
func countCalls(arr []byte) ToolCalls {
	c := ToolCalls{Counted: true}
	for i := jsonscan.SkipWS(arr, 1); i < len(arr) && arr[i] != ']'; {
		if arr[i] == '{' {
			var typ []byte
			var kb [32]byte
			jsonscan.Members(arr, i, func(raw []byte, v, end int) {
				if string(jsonscan.Key(raw, &kb)) == "type" && arr[v] == '"' && end-v >= 2 {
					typ = arr[v+1 : end-1]
				}
			})
			if typ != nil {
				c.add(typ)
			}
		}
		next := jsonscan.SkipWS(arr, jsonscan.SkipValue(arr, i))
		if next <= i || next >= len(arr) {
			break
		}
		if arr[next] == ',' {
			next = jsonscan.SkipWS(arr, next+1)
		}
		i = next
	}
	return c
}

// ServerToolUse counts server tools' uses; Reported is set when the usage
// had a server_tool_use object.
type ServerToolUse struct {
	WebSearches, WebFetches int64
	Reported                bool
}

// maxCount is the largest token count believed: a count above it (or
// below zero) cannot be true, and sums of believed counts never overflow.
// 2^53 is also the largest integer a Lua store keeps exactly.
const maxCount = 1 << 53

// Billed is the tokens the usage bills: prompt plus completion, or the
// total when the backend reports a larger one. ok is false when a count
// cannot be true (negative, or above 2^53): the usage must not be
// trusted then (a prompt_tokens of 2^63-1 once settled as 0).
func (u Usage) Billed() (n int64, ok bool) {
	for _, c := range [...]int64{u.PromptTokens, u.CompletionTokens, u.TotalTokens, u.CachedTokens, u.ReasoningTokens, u.ServerTools.WebSearches, u.ServerTools.WebFetches, u.CacheWriteTokens, u.CacheWrite1hTokens} {
		if c < 0 || c > maxCount {
			return 0, false
		}
	}
	return max(u.PromptTokens+u.CompletionTokens, u.TotalTokens), true
}

var (
	keyUsage   = []byte("usage")
	escapeU    = []byte(`\u`)
	prefixData = []byte("data:")
	tailNull   = []byte(`"usage":null}`)
	litNull    = []byte("null")
)

// Where says where an answer's usage object is documented to sit.
type Where uint8

const (
	// TopLevel is the "usage" member of the answer itself: a chat,
	// completions or embeddings answer or chunk, and a Responses object.
	TopLevel Where = iota
	// InResponse is the "usage" member of the top-level "response" object:
	// the Responses API's terminal stream events (response.completed,
	// .incomplete, .failed).
	InResponse
	// InMessage is the "usage" member of the top-level "message" object:
	// the Messages API's message_start event (its input counts; the
	// output so far). Its message_delta events carry a top-level usage
	// (TopLevel) with the cumulative output.
	InMessage
)

// EventUsage reads the usage of one SSE event, at where in its data (see
// ReadUsage); it decodes nothing, and "usage":null, the value on every
// ordinary chunk, costs one suffix check. An event whose data spans
// several lines is not read (ok false): no backend sends one, and an
// unread usage is charged at least the reservation.
func EventUsage(event []byte, where Where) (u Usage, usageOnlyChunk bool, ok bool) {
	// OpenAI ends every ordinary chunk with a top-level "usage":null: in
	// valid JSON a final `"usage":null}` is the top-level object's last
	// member (a later duplicate wins, as in encoding/json), unless its
	// quote is an escaped one inside a key.
	if t := trimRightWS(event); bytes.HasSuffix(t, tailNull) && where == TopLevel {
		if i := len(t) - len(tailNull); i == 0 || t[i-1] != '\\' {
			return Usage{}, false, false
		}
	}
	// No "usage" spelled plainly, and no \u escape that could spell it:
	// nothing to read (an ordinary vLLM chunk, whose content may well hold
	// other escapes, costs two byte searches).
	if !bytes.Contains(event, escapeU) {
		if where == TopLevel && allUsageNull(event) || !bytes.Contains(event, keyUsage) {
			return Usage{}, false, false
		}
	}
	data, ok := dataOf(event)
	if !ok {
		return Usage{}, false, false
	}
	return ReadUsage(data, where)
}

// allUsageNull reports whether every "usage" key spelled plainly in event
// has the value null. In an event with no \u escape, a key that decodes to
// "usage" is spelled plainly (no other escape spells a letter), so the
// top-level usage is then null or absent and there is nothing to read:
// OpenAI's chunks carry "usage":null before other members (obfuscation),
// and this costs a byte search per occurrence instead of a scan of the
// whole object. Any other value, or a spelling it is unsure of, says
// false, and the full scan decides.
func allUsageNull(event []byte) bool {
	for b := event; ; {
		i := bytes.Index(b, keyUsage)
		if i < 0 {
			return true
		}
		quoted := i > 0 && b[i-1] == '"'
		b = b[i+len(keyUsage):]
		if !quoted || len(b) == 0 || b[0] != '"' {
			continue // part of a longer word or key
		}
		j := jsonscan.SkipWS(b, 1)
		if j >= len(b) || b[j] != ':' {
			// "usage" as a string value: not a key with a value to read.
			if j < len(b) && (b[j] == ',' || b[j] == '}' || b[j] == ']') {
				continue
			}
			return false
		}
		j = jsonscan.SkipWS(b, j+1)
		if !bytes.HasPrefix(b[j:], litNull) {
			return false
		}
		b = b[j+len(litNull):]
	}
}

// dataOf returns the value of the event's only data line.
func dataOf(event []byte) ([]byte, bool) {
	var data []byte
	found := false
	for len(event) > 0 {
		line := event
		if i := bytes.IndexAny(event, "\r\n"); i >= 0 {
			line, event = event[:i], event[i+1:]
		} else {
			event = nil
		}
		v, ok := bytes.CutPrefix(line, prefixData)
		if !ok {
			continue
		}
		if found {
			return nil, false
		}
		found = true
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
		data = v
	}
	return data, found
}

// ReadUsage reads the usage the backend bills by from one JSON answer
// (valid JSON, as backends send): the top-level "usage" object, or with
// InResponse the "usage" of the top-level "response" object. Only these
// places count: a usage-shaped object anywhere else (in an echoed tool
// schema, metadata, output text) is the caller's own JSON, and reading it
// would let a tenant name its own charge. A member that
// appears twice takes its last value, as encoding/json does.
//
// ok is false when the place holds no usage object (absent or null) or
// its counts are not integers. usageOnlyChunk is true when ok and the
// top-level "choices" is an empty array: the chunk that
// stream_options.include_usage adds at the end of a stream. Azure's
// prompt_filter_results chunk also has empty choices but no usage, so it
// is never a usage-only chunk.
//
// It tracks nesting with a byte scan and allocates nothing.
func ReadUsage(js []byte, where Where) (u Usage, usageOnlyChunk bool, ok bool) {
	i := jsonscan.SkipWS(js, 0)
	if i >= len(js) || js[i] != '{' {
		return Usage{}, false, false
	}
	usage, emptyChoices := -1, false
	var tier, output []byte
	var resp []byte
	var kb [32]byte
	container := "response"
	if where == InMessage {
		container = "message"
	}
	jsonscan.Members(js, i, func(raw []byte, v int, end int) {
		k := jsonscan.Key(raw, &kb)
		if where != TopLevel && string(k) == container {
			resp = nil
			if js[v] == '{' {
				resp = js[v:end]
			}
			return
		}
		switch string(k) {
		case "usage":
			usage = -1
			if js[v] == '{' {
				usage = v
			}
		case "choices":
			emptyChoices = js[v] == '[' && jsonscan.SkipWS(js, v+1) < len(js) && js[jsonscan.SkipWS(js, v+1)] == ']'
		case "service_tier":
			tier = js[v:end]
		case "output": // a Responses object's items
			output = nil
			if js[v] == '[' {
				output = js[v:end]
			}
		}
	})
	if where != TopLevel {
		if resp == nil {
			return Usage{}, false, false
		}
		u, _, ok = ReadUsage(resp, TopLevel)
		return u, false, ok
	}
	if usage < 0 {
		return Usage{}, false, false
	}
	if u, ok = parseUsageObject(js[usage:]); !ok {
		return Usage{}, false, false
	}
	if tier != nil {
		u.Tier, u.TierReported = readTier(tier)
	}
	if output != nil {
		u.Calls = countCalls(output)
	}
	return u, emptyChoices, true
}

// readTier reads a service_tier value: a JSON string naming a tier; any
// other value, or a name the gateway does not know, is price.TierUnknown
// (reported: billed at the tenant's dearest tier). null is not reported.
func readTier(v []byte) (price.Tier, bool) {
	if string(v) == "null" {
		return price.TierStandard, false
	}
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return price.TierUnknown, true
	}
	t, _ := price.ParseTier(v[1 : len(v)-1])
	return t, true
}

func trimRightWS(b []byte) []byte {
	for len(b) > 0 {
		switch b[len(b)-1] {
		case ' ', '\t', '\r', '\n':
			b = b[:len(b)-1]
		default:
			return b
		}
	}
	return b
}

// parseUsageObject reads the token counts from the JSON object at the
// start of b, skipping any other member. A key that appears twice takes its
// last value, as encoding/json does. Anthropic's cache counts
// (cache_creation_input_tokens, cache_read_input_tokens), which its
// input_tokens excludes, are added to PromptTokens, the reads also kept
// as CachedTokens; each must be a count that can be true.
func parseUsageObject(b []byte) (u Usage, ok bool) {
	ok = true
	var kb [32]byte
	var cacheWrite, cacheRead int64
	closed := jsonscan.Members(b, 0, func(raw []byte, v, end int) {
		if !ok {
			return
		}
		var dst *int64
		switch string(jsonscan.Key(raw, &kb)) {
		case "prompt_tokens", "input_tokens":
			dst = &u.PromptTokens
		case "completion_tokens", "output_tokens":
			dst = &u.CompletionTokens
		case "total_tokens":
			dst = &u.TotalTokens
		case "cached_tokens":
			dst = &u.CachedTokens
		case "reasoning_tokens":
			dst = &u.ReasoningTokens
		case "cache_creation_input_tokens":
			dst = &cacheWrite
		case "cache_read_input_tokens":
			dst = &cacheRead
		case "cache_creation":
			if b[v] == '{' {
				if u.CacheWrite1hTokens, ok = parseCacheCreation(b[v:end]); !ok {
					return
				}
			}
		case "service_tier":
			u.Tier, u.TierReported = readTier(b[v:end])
		case "server_tool_use":
			if b[v] == '{' {
				if u.ServerTools, ok = parseServerToolUse(b[v:end]); !ok {
					return
				}
			}
		case "prompt_tokens_details", "input_tokens_details", "completion_tokens_details", "output_tokens_details":
			if b[v] == '{' {
				d, dok := parseUsageObject(b[v:end])
				if !dok {
					ok = false
					return
				}
				u.CachedTokens = max(u.CachedTokens, d.CachedTokens)
				u.ReasoningTokens = max(u.ReasoningTokens, d.ReasoningTokens)
			}
		}
		if dst != nil {
			if b[v] == 'n' { // null: a count not reported
				*dst = 0
				return
			}
			n, iok := parseInt(b, v, end)
			if !iok {
				ok = false
				return
			}
			*dst = n
		}
	})
	if !ok || !closed {
		return Usage{}, false
	}
	if cacheWrite != 0 || cacheRead != 0 {
		if min(cacheWrite, cacheRead, u.PromptTokens) < 0 || max(cacheWrite, cacheRead, u.PromptTokens) > maxCount {
			return Usage{}, false
		}
		u.PromptTokens += cacheWrite + cacheRead
		u.CachedTokens = max(u.CachedTokens, cacheRead)
	}
	// The hour's writes are part of the writes: never more (a negative
	// count stays, for Billed to refuse).
	u.CacheWriteTokens = cacheWrite
	u.CacheWrite1hTokens = min(u.CacheWrite1hTokens, cacheWrite)
	return u, true
}

// parseCacheCreation reads Anthropic's usage.cache_creation object at the
// start of b: its ephemeral_1h_input_tokens (the 5-minute writes are the
// rest of cache_creation_input_tokens).
func parseCacheCreation(b []byte) (hour int64, ok bool) {
	ok = true
	var kb [32]byte
	closed := jsonscan.Members(b, 0, func(raw []byte, v, end int) {
		if !ok || string(jsonscan.Key(raw, &kb)) != "ephemeral_1h_input_tokens" || b[v] == 'n' {
			return
		}
		hour, ok = parseInt(b, v, end)
	})
	return hour, ok && closed
}

// parseInt reads the JSON integer b[i:end] (jsonscan.Int); a fraction or
// exponent is not ok, and a value beyond int64 reads as -1, which Billed
// refuses.
func parseInt(b []byte, i, end int) (n int64, ok bool) {
	mag, neg, next, ok := jsonscan.Int(b, i, math.MaxInt64)
	switch {
	case !ok || next != end:
		return 0, false
	case mag > math.MaxInt64:
		return -1, true
	case neg:
		return -int64(mag), true
	}
	return int64(mag), true
}

// parseServerToolUse reads Anthropic's usage.server_tool_use object at
// the start of b: web_search_requests and web_fetch_requests.
func parseServerToolUse(b []byte) (st ServerToolUse, ok bool) {
	ok, st.Reported = true, true
	var kb [32]byte
	closed := jsonscan.Members(b, 0, func(raw []byte, v, end int) {
		var dst *int64
		switch string(jsonscan.Key(raw, &kb)) {
		case "web_search_requests":
			dst = &st.WebSearches
		case "web_fetch_requests":
			dst = &st.WebFetches
		}
		if dst == nil || !ok || b[v] == 'n' {
			return
		}
		n, iok := parseInt(b, v, end)
		if !iok {
			ok = false
			return
		}
		*dst = n
	})
	return st, ok && closed
}
