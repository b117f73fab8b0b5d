package route

import (
	"bytes"
	"math"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// PrefixBytes is how much of the conversation (messages, or the
// Responses API's input) the prompt-cache key reads when it has no
// prompt_cache_key and no cache_control breakpoint: enough to tell
// conversations apart by their first turns, which is what a backend's
// prefix cache matches on.
const PrefixBytes = 1024

// MinCachedBytes is the smallest body given a fingerprint key: OpenAI
// and Azure OpenAI cache prompts of 1,024 tokens or more (Anthropic's
// minimum is 1,024 or 2,048), about 4 KiB of JSON. A shorter prompt
// gains nothing from a cache, so it is left to the least busy choice.
// An explicit prompt_cache_key is always honoured.
const MinCachedBytes = 4 << 10

// FNV-1a, 64-bit: deterministic on every replica (maphash is seeded per
// process), and small keys hash in a few nanoseconds.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// CacheKey is raw's prompt-cache affinity key (0 = none): requests with
// the same key share a prompt prefix, so they should meet the same
// backend prompt cache. It is the body's prompt_cache_key where the API
// has one; else a fingerprint of the model, the tools, the system prompt
// (system, instructions) and the conversation's first message (messages
// or input) up to PrefixBytes, Anthropic's cache_control markers left
// out. Only the first message: every later turn of an agent loop starts
// with it, while the last cache_control breakpoint moves to the newest
// turn on each call (a key up to it would move the conversation every
// turn; the prefixes behind it are prefixes of it, so one endpoint's
// cache holds them all). raw is a JSON object the request package has
// already checked (no duplicate routing keys).
func CacheKey(raw []byte, model string) uint64 {
	i := jsonscan.SkipWS(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return 0
	}
	var pck, tools, system, instructions, conv []byte
	var kb [32]byte
	jsonscan.Members(raw, i, func(k []byte, v, end int) {
		switch string(jsonscan.Key(k, &kb)) {
		case "prompt_cache_key":
			if raw[v] == '"' {
				pck = raw[v:end]
			}
		case "tools":
			tools = raw[v:end]
		case "system":
			system = raw[v:end]
		case "instructions":
			instructions = raw[v:end]
		case "messages", "input":
			conv = raw[v:end]
		}
	})
	h := hashString(fnvOffset, model)
	h ^= 0xff
	h *= fnvPrime
	if len(pck) > 2 {
		h = hashBytes(hashString(h, "pck"), pck)
		return nonZero(h)
	}
	if conv == nil && system == nil && instructions == nil || len(raw) < MinCachedBytes {
		return 0 // nothing that a prefix cache would hold
	}
	conv = firstElement(conv)
	if len(conv) > PrefixBytes {
		conv = conv[:PrefixBytes]
	}
	for _, part := range [...][]byte{tools, system, instructions, conv} {
		h = hashUnmarked(h, part)
		h ^= 0xfe // a separator: parts cannot slide into each other
		h *= fnvPrime
	}
	return nonZero(h)
}

// cacheControl is the member name of an Anthropic cache breakpoint.
var cacheControl = []byte(`"cache_control"`)

// hashUnmarked hashes v without its "cache_control" members (a comma
// before one, or after one that opens its object, goes with it): moving a
// breakpoint from turn to turn does not change which prefix a message is.
func hashUnmarked(h uint64, v []byte) uint64 {
	for {
		i := bytes.Index(v, cacheControl)
		if i < 0 {
			return hashBytes(h, v)
		}
		head := bytes.TrimRight(v[:i], " \t\r\n")
		opens := len(head) > 0 && head[len(head)-1] == '{'
		head = bytes.TrimSuffix(head, []byte(","))
		h = hashBytes(h, head)
		j := jsonscan.SkipWS(v, i+len(cacheControl))
		if j < len(v) && v[j] == ':' {
			j = jsonscan.SkipValue(v, jsonscan.SkipWS(v, j+1))
		}
		j = jsonscan.SkipWS(v, min(j, len(v)))
		if opens && j < len(v) && v[j] == ',' {
			j++
		}
		v = v[min(j, len(v)):]
	}
}

// firstElement is the first element of the JSON array v, or v itself when
// it is not an array (the Responses API's input may be a string).
func firstElement(v []byte) []byte {
	if len(v) == 0 || v[0] != '[' {
		return v
	}
	i := jsonscan.SkipWS(v, 1)
	if i >= len(v) || v[i] == ']' {
		return nil
	}
	return v[i:jsonscan.SkipValue(v, i)]
}

func nonZero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// mix is SplitMix64's finalizer: FNV's low bits are poor, and rendezvous
// needs every bit of the pair's hash to be uniform.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// affine picks key's endpoint among one priority's healthy endpoints g:
// weighted rendezvous hashing (the highest weight / -ln(u) for u the
// key-endpoint hash), so every replica picks alike with no shared state,
// and an endpoint that leaves g moves only its own keys, each to its
// next choice. The choice yields to the next in its ranking while it is
// busier than LoadFactor times its weighted share of g's in-flight
// requests (consistent hashing with bounded loads, Mirrokni et al. 2018):
// no key, and no tenant choosing keys, can pin a hot spot. It returns an
// index into g.
func (r *Router) affine(g []*Endpoint, key uint64) int {
	var score [MaxEndpoints]float64
	var load, weight int64
	for i, e := range g {
		u := (float64(mix(key^e.hash)>>11) + 0.5) / (1 << 53) // in (0, 1)
		score[i] = float64(e.Weight) / -math.Log(u)
		load += e.inflight.Load()
		weight += int64(e.Weight)
	}
	var tried uint64
	for range g {
		best := -1
		for i := range g {
			if tried&(1<<i) == 0 && (best < 0 || score[i] > score[best]) {
				best = i
			}
		}
		tried |= 1 << best
		e := g[best]
		allowed := math.Ceil(r.o.LoadFactor * float64(load+1) * float64(e.Weight) / float64(weight))
		if float64(e.inflight.Load()+1) <= allowed {
			return best
		}
	}
	return 0 // unreachable with LoadFactor >= 1: someone is within its share
}
