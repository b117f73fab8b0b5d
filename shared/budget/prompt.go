package budget

import (
	"bytes"
	"unicode/utf8"

	"github.com/llmgw/gateway/shared/jsonscan"
	"github.com/llmgw/gateway/shared/price"
)

// Format is the API a request body is written for.
type Format uint8

// Request formats.
const (
	FormatChat        Format = iota // /v1/chat/completions
	FormatCompletions               // /v1/completions
	FormatEmbeddings                // /v1/embeddings: no output tokens
	FormatResponses                 // /v1/responses
	// FormatMessages is Anthropic's /v1/messages (and count_tokens): the
	// prompt is system, messages and tools; a tool without a "type" is
	// the caller's own (client) tool; an image's or document's "source"
	// object is media, not text; mcp_servers and container bring content
	// the body does not hold.
	FormatMessages
)

// Ask is what one request asks of a budget: its prompt bound, read from
// its body by Scanner, and its choices and output cap, which the caller
// takes from its body decoder (the reading the backend gets).
type Ask struct {
	// PromptBound is a bound provably at least the prompt tokens the
	// backend will count (see Scanner.Ask for the proof and its premises).
	PromptBound int64
	// Choices is the number of completions generated (n, or best_of for
	// /v1/completions, whichever is larger); 0 means 1. Every choice may
	// produce the output cap.
	Choices int64
	// ClientCap is the client's output cap per choice, the largest of
	// max_completion_tokens, max_tokens and max_output_tokens present; 0
	// when none is.
	ClientCap int64
	// MinOutput is the least output cap per choice the backend accepts
	// (OpenAI's Responses API refuses a max_output_tokens below 16); 0 is
	// Config.MinOutputTokens. A request with less left is refused rather
	// than forwarded with a cap its backend rejects. Set by the caller.
	MinOutput int64
	// Prompts is the number of prompts a legacy completions request
	// batches (a "prompt" array of strings or of token arrays): the
	// backend generates Choices completions for each, so the output a
	// reservation covers is Prompts × Choices × the cap (issue 20). 1 for
	// every other request.
	Prompts int64
	// NoOutput marks a request without output tokens (embeddings).
	NoOutput bool
	// Hold reserves and caps the request as strict mode does, in either
	// mode: a background response goes on generating after its creating
	// request ends, so that request is charged its reservation rather
	// than what its answer showed (issue 30: in estimate mode it was
	// charged its JSON bytes, with no cap). Set by the caller.
	Hold bool
	// Unbounded marks a prompt that includes content the body does not
	// hold: a file, an earlier response or conversation, a hosted tool's
	// results. PromptBound covers only the body; the rest is charged when
	// the request settles, so such a request can overshoot a strict budget
	// by its hidden prompt.
	Unbounded bool
	// Spend prices the request for the tenant's spend limits (issue 35);
	// its zero value prices the tokens at nothing.
	Spend Spend
}

// Spend is how a request is priced for the spend limits: its model's
// prices at the tiers it may be served at, plus money outside the tokens
// (server features' uses, as reserved).
type Spend struct {
	Model *price.Model
	// Tiers are the tiers the request may be served at: the one it asks,
	// or every tier its tenant may use for "auto" or none given.
	Tiers price.Tiers
	// Fixed is money the request costs besides its tokens, in
	// micro-units.
	Fixed int64
}

// Worst is the most input prompt tokens and output tokens may cost, in
// micro-units, saturating at MaxTokens.
func (s Spend) Worst(input, output int64) int64 {
	w := int64(0)
	if s.Model != nil {
		w = s.Model.Worst(s.Tiers, input, output)
	}
	return satAdd(w, max(s.Fixed, 0))
}

// affordable is the largest output per choice in [lo, hi] whose worst
// case for choices choices fits money (lo when none does): the output cap
// a spend grant leaves. Worst is monotone in the output, so a binary
// search finds it.
func (s Spend) affordable(money, bound, choices, lo, hi int64) int64 {
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if s.Worst(bound, satMul(choices, mid)) <= money {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func (a Ask) choices() int64 { return max(a.Choices, 1) }

// DefaultImageTokens bounds one image part when Scanner.ImageTokens is
// zero: the largest per-image charge OpenAI publishes for its vision
// models (gpt-4o-mini at high detail: 2,833 + 5,667 for each of at most 8
// 512-pixel tiles = 48,169). Deployments whose vision models charge less
// (gpt-4o, gpt-4.1: at most 85 + 8*170 = 1,445) set ImageTokens to keep
// strict reservations for images small.
const DefaultImageTokens = 48169

// DefaultMediaTokens bounds one audio, video, file or precomputed-embedding
// part (vLLM's video_url, audio_url, input_audio and image_embeds parts,
// OpenAI's file and input_audio parts) when Scanner.MediaTokens is zero:
// 32,768 tokens, the context of most models that take such parts. A part
// whose media encodes to more is outside the bound; deployments set
// MediaTokens to their models' context length to close that.
const DefaultMediaTokens = 32768

// The template allowances of the bound (see Scanner.Ask).
const (
	requestAllowance = 32 // once per request
	objectAllowance  = 4  // per JSON object in the counted members
	stringAllowance  = 1  // per string value
)

// Scanner reads request bodies for budgets. Its zero value is ready.
type Scanner struct {
	// ImageTokens bounds the prompt tokens of one image part. Default
	// DefaultImageTokens.
	ImageTokens int64
	// MediaTokens bounds the prompt tokens of one audio, video, file or
	// embeddings part. Default DefaultMediaTokens.
	MediaTokens int64
}

// Ask reads body (a JSON object, already validated) in one byte scan,
// without decoding or allocating, and returns its prompt bound, the number
// of prompts it batches and whether it is Unbounded; Choices and ClientCap
// are left to the caller.
//
// The bound. It holds for every tokenizer whose tokens each cover at least
// one byte of the text they encode: OpenAI's byte-level BPEs (r50k, p50k,
// cl100k, o200k), and the BPE and SentencePiece-with-byte-fallback
// tokenizers of the models vLLM serves. For those, a text of L UTF-8 bytes
// is at most L tokens, however it is split or concatenated; what a chat
// template adds beyond the request's own text is special tokens and a few
// separator bytes per message. So the prompt the backend renders has at
// most
//
//	Σ UTF-8 bytes of the counted text          (tokens cover ≥ 1 byte)
//	+ 1 per string value                       (a BOS or SentencePiece
//	                                            dummy-prefix token per
//	                                            separately encoded text)
//	+ 4 per JSON object in the counted members (the special tokens and
//	                                            separators around a message,
//	                                            content part, tool call or
//	                                            tool definition: OpenAI
//	                                            counts 3 per message + 1
//	                                            per name)
//	+ 32 per request                           (BOS, the reply priming of
//	                                            3, a tools preamble)
//	+ ImageTokens per image part
//
// tokens. The counted text is: every string value of every top-level
// member except those that never reach the prompt (model, stream, n,
// temperature, max_tokens, user, metadata, stop, logit_bias, ...); the
// keys too outside messages, prompt, input and instructions (in tools and
// response_format the keys are schema property names the template
// renders); and the literal bytes of numbers, true, false and null. String
// lengths are after JSON unescaping ("\u00e9" is 2 bytes, not 6), with
// invalid UTF-8 counted as the 3-byte U+FFFD a decoder substitutes. An
// image's URL or base64 data is not text and is replaced by ImageTokens.
//
// Premises the proof rests on, beyond the tokenizer property: the
// backend's template adds at most the allowances above (true of OpenAI's
// published counting and of ChatML, Llama 3 and Harmony templates), and
// the prompt holds nothing the body does not (Ask.Unbounded marks bodies
// that reference files, stored responses or hosted tools).
//
// Tightness: English prose averages about 4 bytes per token, so the bound
// is about 4x the true count for long text and more for short messages,
// where the allowances dominate; see the package tests for measured ratios.
func (sc Scanner) Ask(body []byte, f Format) Ask {
	s := scan{b: body, f: f}
	a := Ask{NoOutput: f == FormatEmbeddings, Prompts: 1}
	img := sc.ImageTokens
	if img <= 0 {
		img = DefaultImageTokens
	}
	media := sc.MediaTokens
	if media <= 0 {
		media = DefaultMediaTokens
	}
	i := jsonscan.SkipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		// Not an object: the server refuses it before any budget; count
		// every byte so that the bound still holds.
		a.PromptBound = int64(len(body))*(objectAllowance+stringAllowance) + requestAllowance
		return a
	}
	i++
	var kb [32]byte
	for {
		i = jsonscan.SkipWS(body, i)
		if i >= len(body) || body[i] == '}' {
			break
		}
		if body[i] == ',' {
			i++
			continue
		}
		if body[i] != '"' {
			s.malformed = true
			break
		}
		ks := i
		ke := jsonscan.SkipString(body, i)
		i = jsonscan.SkipWS(body, ke)
		if i >= len(body) || body[i] != ':' {
			s.malformed = true
			break
		}
		i = jsonscan.SkipWS(body, i+1)
		if i >= len(body) {
			s.malformed = true
			break
		}
		switch key := keyName(body[ks:ke], &kb); classify(key, f) {
		case memberSkip:
			i = jsonscan.SkipValue(body, i)
		case memberPrompt:
			if f == FormatCompletions && body[i] == '[' && string(keyName(body[ks:ke], &kb)) == "prompt" {
				a.Prompts = max(a.Prompts, promptCount(body, i))
			}
			i, _ = s.value(i, false, 0)
		case memberUnbounded:
			if !isNull(body, i) {
				s.unbounded = true
			}
			i, _ = s.value(i, true, 0)
		case memberResponsesPrompt:
			// /v1/responses "prompt" is a reference to a stored template.
			s.unbounded = true
			i, _ = s.value(i, true, 0)
		case memberTools:
			i = s.tools(i)
		default:
			s.n += keyLen(body, ks, ke)
			i, _ = s.value(i, true, 0)
		}
	}
	if s.malformed {
		s.n += int64(len(body)) * (objectAllowance + stringAllowance)
	}
	a.PromptBound = satAdd(satAdd(satAdd(s.n, requestAllowance), satMul(s.images, img)), satMul(s.media, media))
	a.Unbounded = s.unbounded
	return a
}

// scan accumulates the bound over one body.
type scan struct {
	b         []byte
	f         Format
	n         int64 // tokens counted
	images    int64
	media     int64 // audio, video, file and embeddings parts
	unbounded bool
	malformed bool
}

// maxDepth bounds the recursion; encoding/json (whose Valid the server
// runs first) refuses deeper nesting anyway.
const maxDepth = 10000

// value counts the JSON value at s.b[i] and returns the index after it and,
// for an object, whether its "type" is a function tool's ("function" or
// "custom").
func (s *scan) value(i int, keys bool, depth int) (end int, fn bool) {
	b := s.b
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		n, e := strLen(b, i)
		s.n += n + stringAllowance
		return e, false
	case '{':
		return s.object(i, keys, depth+1)
	case '[':
		if depth >= maxDepth {
			s.malformed = true
			return jsonscan.SkipValue(b, i), false
		}
		i++
		for {
			i = jsonscan.SkipWS(b, i)
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case ']':
				return i + 1, false
			case ',':
				i++
				continue
			}
			next, _ := s.value(i, keys, depth+1)
			if next <= i {
				s.malformed = true
				return jsonscan.SkipValue(b, i), false
			}
			i = next
		}
	default:
		e := jsonscan.SkipValue(b, i)
		s.n += int64(e - i)
		return e, false
	}
}

// object counts the object at s.b[i]=='{'. Inside the prompt members
// (keys false) it recognizes image parts (their URL or data replaced by
// one image's tokens) and file parts (unbounded; their data not counted).
func (s *scan) object(i int, keys bool, depth int) (end int, fn bool) {
	b := s.b
	if depth >= maxDepth {
		s.malformed = true
		return jsonscan.SkipValue(b, i), false
	}
	var kb, tb [32]byte
	// doc: a document part, which is media unless its source is text
	// the body holds (textSource).
	image, media, sourced, doc, textSource := false, false, false, false, false
	i++
	for {
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) {
			return i, fn
		}
		switch b[i] {
		case '}':
			s.n += objectAllowance
			if doc && !textSource {
				// A PDF, a URL or a file id: content the body does not
				// hold as text.
				media, s.unbounded = true, true
			}
			if sourced && !image && !media {
				// A source object on a part of another type: not text the
				// body holds.
				media, s.unbounded = true, true
			}
			switch {
			case image:
				s.images++
			case media:
				s.media++
			}
			return i + 1, fn
		case ',':
			i++
			continue
		case '"':
		default:
			s.malformed = true
			return jsonscan.SkipValue(b, i), fn
		}
		ks := i
		ke := jsonscan.SkipString(b, i)
		i = jsonscan.SkipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			s.malformed = true
			return i, fn
		}
		i = jsonscan.SkipWS(b, i+1)
		if i >= len(b) {
			return i, fn
		}
		key := keyName(b[ks:ke], &kb)
		if keys {
			s.n += keyLen(b, ks, ke)
		} else {
			switch string(key) {
			case "image_url":
				image = true
				i = jsonscan.SkipValue(b, i)
				continue
			case "video_url", "audio_url", "input_audio", "image_embeds":
				// Media: what the backend encodes, not text.
				media = true
				i = jsonscan.SkipValue(b, i)
				continue
			case "source":
				if s.f == FormatMessages && b[i] == '{' {
					if !mediaSource(b, i) {
						// A document's text or content source: text the
						// model reads, counted as text (issue 30: 900 KB
						// of it once reserved as one media part).
						textSource = true
						break
					}
					// A Messages image's or document's data (base64, a URL,
					// a file id): media, not text.
					sourced = true
					i = jsonscan.SkipValue(b, i)
					continue
				}
			case "file", "file_data":
				// A file's content is not in the body (file_id) or not text
				// (file_data): counted as one media part, and the request
				// marked as holding content the body does not.
				media, s.unbounded = true, true
				i = jsonscan.SkipValue(b, i)
				continue
			}
		}
		vs := i
		i, _ = s.value(i, keys, depth)
		if string(key) == "type" && b[vs] == '"' {
			// Compared after unescaping, as keys are and as every backend
			// reads it ("input_im\u0061ge" is an image; issue 20).
			typ := keyName(b[vs:i], &tb)
			fn = string(typ) == "function" || string(typ) == "custom"
			if !keys {
				switch string(typ) {
				case "image_url", "input_image", "image":
					image = true
				case "video_url", "audio_url", "input_audio", "image_embeds", "video", "audio":
					media = true
				case "document":
					doc = s.f == FormatMessages
					if !doc {
						media, s.unbounded = true, true
					}
				case "file", "input_file", "container_upload":
					media, s.unbounded = true, true
				}
			}
		}
	}
}

// tools counts the tools member, keys included, and marks the request
// unbounded for a hosted tool (web or file search, code interpreter...),
// whose results the backend adds to the prompt.
func (s *scan) tools(i int) int {
	b := s.b
	s.n += int64(len(`"tools"`) - 2)
	if b[i] != '[' {
		end, _ := s.value(i, true, 0)
		return end
	}
	i++
	for {
		i = jsonscan.SkipWS(b, i)
		if i >= len(b) {
			return i
		}
		switch b[i] {
		case ']':
			return i + 1
		case ',':
			i++
			continue
		}
		next, fn := s.value(i, true, 1)
		if s.f == FormatMessages && b[i] == '{' && !hasMember(b, i, "type") {
			fn = true // a Messages tool without a type is the caller's own
		}
		if b[i] == '{' && !fn {
			s.unbounded = true
		}
		if next <= i {
			s.malformed = true
			return jsonscan.SkipValue(b, i)
		}
		i = next
	}
}

// Top-level member classes.
const (
	memberCounted = iota
	memberSkip
	memberPrompt
	memberUnbounded
	memberResponsesPrompt
	memberTools
)

// classify names what a top-level key means for the budget. Keys compare
// case-insensitively (some backends decode so), which only ever skips or
// recognizes a member that no backend reads as prompt text.
func classify(key []byte, f Format) int {
	if len(key) == 0 || len(key) > len("max_completion_tokens") {
		return memberCounted
	}
	var lb [24]byte
	lk := lb[:len(key)]
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lk[i] = c
	}
	switch string(lk) {
	case "n", "best_of", "max_tokens", "max_completion_tokens", "max_output_tokens":
		// The caller reads these from its body decoder (Ask.Choices,
		// Ask.ClientCap); they are no prompt text.
		return memberSkip
	case "messages", "input", "instructions", "suffix":
		return memberPrompt
	case "prompt":
		if f == FormatResponses {
			return memberResponsesPrompt
		}
		return memberPrompt
	case "tools":
		return memberTools
	case "previous_response_id", "conversation", "web_search_options":
		return memberUnbounded
	case "mcp_servers", "container":
		if f == FormatMessages {
			return memberUnbounded
		}
	case "system":
		if f == FormatMessages {
			return memberPrompt
		}
	case "thinking", "stop_sequences", "tool_choice":
		if f == FormatMessages {
			return memberSkip
		}
	case "model", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p",
		"presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias",
		"logprobs", "top_logprobs", "user", "seed", "metadata", "store", "service_tier",
		"parallel_tool_calls", "reasoning_effort", "stop", "encoding_format",
		"dimensions", "echo", "safety_identifier", "prompt_cache_key", "truncation",
		"include", "background", "verbosity", "max_tool_calls":
		return memberSkip
	}
	return memberCounted
}

// keyName returns the key of the quoted JSON string q, unescaped into kb
// (jsonscan.Key).
func keyName(q []byte, kb *[32]byte) []byte {
	if len(q) < 2 {
		return nil
	}
	return jsonscan.Key(q[1:len(q)-1], kb)
}

// keyLen is the unescaped length of the key quoted at b[ks:ke].
func keyLen(b []byte, ks, ke int) int64 {
	n, _ := strLen(b[:ke], ks)
	return n
}

// strLen returns the UTF-8 length of the JSON string starting at b[i]=='"'
// after unescaping, and the index after its closing quote. It runs in
// linear time whatever the escapes.
func strLen(b []byte, i int) (n int64, end int) {
	i++
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return n + textLen(b[i:]), len(b)
		}
		q += i
		for i < q {
			bs := bytes.IndexByte(b[i:q], '\\')
			if bs < 0 {
				n += textLen(b[i:q])
				i = q
				break
			}
			n += textLen(b[i : i+bs])
			i += bs
			adv, add := escapeLen(b, i)
			n += add
			i += adv
		}
		if i == q {
			return n, q + 1
		}
		// The quote at q was escaped (\"): the string goes on.
	}
}

// escapeLen reads the escape at b[i]=='\\' and returns its length in the
// JSON text and in UTF-8 once decoded. A surrogate pair is one 4-byte code
// point; a lone surrogate decodes to U+FFFD (3 bytes).
func escapeLen(b []byte, i int) (adv int, n int64) {
	if i+1 >= len(b) {
		return 1, 1
	}
	if b[i+1] != 'u' {
		return 2, 1
	}
	if i+6 > len(b) {
		return len(b) - i, int64(len(b) - i)
	}
	cp, ok := jsonscan.Hex4(b[i+2 : i+6])
	switch {
	case !ok:
		return 2, 1
	case cp < 0x80:
		return 6, 1
	case cp < 0x800:
		return 6, 2
	case 0xD800 <= cp && cp < 0xDC00:
		if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if lo, ok := jsonscan.Hex4(b[i+8 : i+12]); ok && 0xDC00 <= lo && lo < 0xE000 {
				return 12, 4
			}
		}
		return 6, 3
	default: // the rest of the BMP, lone low surrogates included (U+FFFD)
		return 6, 3
	}
}

// textLen is the UTF-8 length of raw string bytes once decoded: each
// invalid byte becomes U+FFFD (3 bytes), as encoding/json and Python's
// errors="replace" decode it.
func textLen(t []byte) int64 {
	if utf8.Valid(t) {
		return int64(len(t))
	}
	var n int64
	for len(t) > 0 {
		r, size := utf8.DecodeRune(t)
		if r == utf8.RuneError && size == 1 {
			n += 3
		} else {
			n += int64(size)
		}
		t = t[size:]
	}
	return n
}

// promptCount is the number of prompts in the legacy completions "prompt"
// array at b[i]=='[': one per element when the elements are strings or
// token arrays, one in all for a single token array (numbers) or an empty
// array. OpenAI accepts up to 2,048 prompts per request.
func promptCount(b []byte, i int) int64 {
	first := jsonscan.SkipWS(b, i+1)
	if first >= len(b) || (b[first] != '"' && b[first] != '[') {
		return 1
	}
	n := int64(0)
	for j := first; j < len(b) && b[j] != ']'; {
		n++
		j = jsonscan.SkipWS(b, jsonscan.SkipValue(b, j))
		if j < len(b) && b[j] == ',' {
			j = jsonscan.SkipWS(b, j+1)
		} else {
			break
		}
	}
	return max(n, 1)
}

// mediaSource reports whether the Messages source object at b[i]=='{' is
// media: its type (compared after unescaping) is base64, url or file.
// Any other source (text, content, a type this code does not know) is
// counted as text: the bound is deny-by-default.
func mediaSource(b []byte, i int) bool {
	var kb, tb [32]byte
	media := false
	jsonscan.Members(b, i, func(raw []byte, v, end int) {
		if string(jsonscan.Key(raw, &kb)) != "type" {
			return
		}
		media = false
		if b[v] == '"' {
			switch string(keyName(b[v:end], &tb)) {
			case "base64", "url", "file":
				media = true
			}
		}
	})
	return media
}

// hasMember reports whether the object at b[i]=='{' has a member named
// want (compared after unescaping).
func hasMember(b []byte, i int, want string) bool {
	var kb [32]byte
	found := false
	jsonscan.Members(b, i, func(raw []byte, _, _ int) {
		found = found || string(jsonscan.Key(raw, &kb)) == want
	})
	return found
}

func isNull(b []byte, i int) bool { return bytes.HasPrefix(b[i:], []byte("null")) }
