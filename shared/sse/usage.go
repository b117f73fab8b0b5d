package sse

import "bytes"

// Usage holds an OpenAI usage object's token counts: Chat Completions'
// prompt/completion tokens or the Responses API's input/output tokens, with
// their cached and reasoning details.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int64
	CachedTokens, ReasoningTokens               int64
}

var (
	keyUsage   = []byte(`"usage"`)
	keyChoices = []byte(`"choices"`)
	tailNull   = []byte(`"usage":null}`)
)

// ParseUsage finds the usage object in one SSE event without decoding the
// chunk: it byte-scans for the key "usage" whose value is an object and
// reads only the three token counts from it. "usage":null, the value on
// every ordinary chunk, costs one substring search.
//
// ok is false when the event has no usage object or its token counts are
// not integers. usageOnlyChunk is true when ok and the chunk's "choices" is
// an empty array: the chunk that stream_options.include_usage adds at the
// end of a stream. Azure's prompt_filter_results chunk also has empty
// choices but no usage, so it is never a usage-only chunk.
//
// The key is not checked to be at the top level of the JSON object; the
// first "usage" key whose value is an object wins. A quoted "usage" inside
// a string value is escaped (\"usage\") and so never matches.
func ParseUsage(event []byte) (u Usage, usageOnlyChunk bool, ok bool) {
	// OpenAI ends every ordinary chunk with a top-level "usage":null.
	if bytes.HasSuffix(trimRightWS(event), tailNull) {
		return Usage{}, false, false
	}
	v := valueOf(event, keyUsage, '{')
	if v < 0 {
		return Usage{}, false, false
	}
	u, ok = parseUsageObject(event[v:])
	if !ok {
		return Usage{}, false, false
	}
	if c := valueOf(event, keyChoices, '['); c >= 0 {
		i := skipWS(event, c+1)
		usageOnlyChunk = i < len(event) && event[i] == ']'
	}
	return u, usageOnlyChunk, true
}

// valueOf returns the index of the value of the first occurrence of key (a
// quoted JSON string) that is followed by a colon and a value starting with
// open, or -1.
func valueOf(b, key []byte, open byte) int {
	// Search without the opening quote: a letter is much rarer than '"' in
	// JSON, so the byte search underneath skips ahead further.
	tail := key[1:]
	off := 0
	for {
		i := bytes.Index(b[off:], tail)
		if i < 0 {
			return -1
		}
		i += off
		off = i + 1
		if i == 0 || b[i-1] != '"' {
			continue
		}
		j := skipWS(b, i+len(tail))
		if j >= len(b) || b[j] != ':' {
			continue
		}
		j = skipWS(b, j+1)
		if j < len(b) && b[j] == open {
			return j
		}
	}
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

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// parseUsageObject reads prompt_tokens, completion_tokens and total_tokens
// from the JSON object at the start of b, skipping any other member (such as
// prompt_tokens_details). A key that appears twice takes its last value, as
// encoding/json does.
func parseUsageObject(b []byte) (u Usage, ok bool) {
	i := 1 // past '{'
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return Usage{}, false
		}
		switch b[i] {
		case '}':
			return u, true
		case ',':
			i++
			continue
		case '"':
		default:
			return Usage{}, false
		}
		ks := i + 1
		ke, ok := skipString(b, i)
		if !ok {
			return Usage{}, false
		}
		key := b[ks : ke-1]
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return Usage{}, false
		}
		i = skipWS(b, i+1)
		var dst *int64
		switch string(key) {
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
		case "prompt_tokens_details", "input_tokens_details", "completion_tokens_details", "output_tokens_details":
			if i < len(b) && b[i] == '{' {
				d, ok := parseUsageObject(b[i:])
				if !ok {
					return Usage{}, false
				}
				u.CachedTokens = max(u.CachedTokens, d.CachedTokens)
				u.ReasoningTokens = max(u.ReasoningTokens, d.ReasoningTokens)
			}
		}
		if dst != nil {
			n, next, ok := parseInt(b, i)
			if !ok {
				return Usage{}, false
			}
			*dst, i = n, next
			continue
		}
		if i, ok = skipValue(b, i); !ok {
			return Usage{}, false
		}
	}
}

// parseInt reads a JSON integer at b[i:]; a fraction or exponent, or a value
// that overflows int64, is not ok.
func parseInt(b []byte, i int) (n int64, next int, ok bool) {
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		d := int64(b[i] - '0')
		if n > (1<<63-1-d)/10 {
			return 0, 0, false
		}
		n = n*10 + d
	}
	if i == start {
		return 0, 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, 0, false
	}
	if neg {
		n = -n
	}
	return n, i, true
}

// skipString returns the index just past the JSON string that starts at
// b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index just past the JSON value that starts at b[i]
// (or of the ',' or '}' that ends a scalar). It tracks nesting and strings
// but does not validate.
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			j, ok := skipString(b, i)
			if !ok {
				return 0, false
			}
			if i = j; depth == 0 {
				return i, true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, true
			}
			if depth--; depth == 0 {
				return i + 1, true
			}
		case ',':
			if depth == 0 {
				return i, true
			}
		}
		i++
	}
	return 0, false
}
