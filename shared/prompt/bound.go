package prompt

import (
	"bytes"
	"unicode/utf8"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// Body is how one operation's request body reaches the model: the
// operations table's prompt column (request.Operation.Prompt), so a new
// operation declares what of its body is prompt instead of inheriting
// another API's reading. The bound is deny-by-default: every
// top-level member that no list names counts as text, its keys included.
// Member names compare case-insensitively after unescaping (some backends
// decode so), which only ever skips or recognizes a member no backend
// reads as prompt text.
type Body struct {
	// Never lists the top-level members that never reach the model: the
	// model, the stream switches, sampling parameters, output caps and n
	// (the caller reads those from its decoder), ids and metadata. They
	// are not counted.
	Never []string
	// Prompt lists the members that hold the prompt itself (messages,
	// input, instructions...): their keys are the API's own (not counted)
	// and media parts in them, at any depth and in every spelling, count
	// at their configured bound instead of their bytes.
	Prompt []string
	// Unbounded lists the members that bring content the body does not
	// hold (previous_response_id, a stored prompt template, mcp_servers):
	// counted as text, and a non-null one marks the bound Unbounded.
	Unbounded []string
	// Batches: the "prompt" member may batch prompts (legacy
	// completions), each generating its own completions (Bound.Prompts).
	Batches bool
	// Sources: image and document parts carry a "source" object (the
	// Messages API): a base64, URL or file source is media, any other a
	// text the body holds; a tool without a "type" is the caller's own.
	Sources bool
}

// Bound is what Scanner.Bound reads from one body.
type Bound struct {
	// Tokens is a bound provably at least the prompt tokens the backend
	// will count (see Scanner.Bound for the proof and its premises).
	Tokens int64
	// Prompts is the number of prompts a legacy completions request
	// batches (a "prompt" array of strings or of token arrays): the
	// backend generates its choices for each. 1 for every other body.
	Prompts int64
	// Unbounded marks a prompt that includes content the body does not
	// hold: a file, an earlier response or conversation, a hosted tool's
	// results. Tokens covers only the body.
	Unbounded bool
}

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

// The template allowances of the bound (see Scanner.Bound).
const (
	requestAllowance = 32 // once per request
	objectAllowance  = 4  // per JSON object in the counted members
	stringAllowance  = 1  // per string value
)

// Scanner reads request bodies for budgets. Its zero value is ready.
type Scanner struct {
	// ImageTokens bounds the prompt tokens of one image part. Default
	// DefaultImageTokens.
	ImageTokens int64 `yaml:"image_tokens" json:"image_tokens"`
	// MediaTokens bounds the prompt tokens of one audio, video, file or
	// embeddings part. Default DefaultMediaTokens.
	MediaTokens int64 `yaml:"media_tokens" json:"media_tokens"`
}

// Bound reads body (a JSON object, already validated) in one byte scan,
// without decoding or allocating, as its operation's row says (b), and
// returns its prompt bound, the number of prompts it batches and whether
// it is Unbounded.
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
// member except those the row says never reach the prompt (Body.Never:
// model, stream, n, temperature, max_tokens, user, metadata, stop,
// logit_bias, ...); the keys too outside the row's prompt members
// (Body.Prompt: in tools and response_format the keys are schema property
// names the template renders); and the literal bytes of numbers, true, false and null. String
// lengths are after JSON unescaping ("\u00e9" is 2 bytes, not 6), with
// invalid UTF-8 counted as the 3-byte U+FFFD a decoder substitutes. An
// image's URL or base64 data is not text and is replaced by ImageTokens.
//
// Premises the proof rests on, beyond the tokenizer property: the
// backend's template adds at most the allowances above (true of OpenAI's
// published counting and of ChatML, Llama 3 and Harmony templates), and
// the prompt holds nothing the body does not (Bound.Unbounded marks bodies
// that reference files, stored responses or hosted tools).
//
// Tightness: English prose averages about 4 bytes per token, so the bound
// is about 4x the true count for long text and more for short messages,
// where the allowances dominate; see the package tests for measured ratios.
func (sc Scanner) Bound(body []byte, b Body) Bound {
	s := scan{b: body, sources: b.Sources}
	a := Bound{Prompts: 1}
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
		a.Tokens = int64(len(body))*(objectAllowance+stringAllowance) + requestAllowance
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
		key := keyName(body[ks:ke], &kb)
		switch b.classify(key) {
		case memberSkip:
			i = jsonscan.SkipValue(body, i)
		case memberPrompt:
			if b.Batches && body[i] == '[' && equalFold(key, "prompt") {
				a.Prompts = max(a.Prompts, promptCount(body, i))
			}
			i, _ = s.value(i, false, 0)
		case memberUnbounded:
			if !isNull(body, i) {
				s.unbounded = true
			}
			s.n += keyLen(body, ks, ke)
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
	a.Tokens = addParts(addParts(min(s.n, maxBound-requestAllowance)+requestAllowance, s.images, img), s.media, media)
	a.Unbounded = s.unbounded
	return a
}

// maxBound caps a bound: above any amount a budget's store holds (2^53),
// and far enough below int64's end that a caller adds to it safely.
const maxBound = 1 << 62

// addParts adds count parts of each tokens to n (all non-negative),
// saturating at maxBound.
func addParts(n, count, each int64) int64 {
	if count > 0 && each > (maxBound-n)/count {
		return maxBound
	}
	return n + count*each
}

// scan accumulates the bound over one body.
type scan struct {
	b         []byte
	sources   bool  // Body.Sources
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
				if s.sources && b[i] == '{' {
					if !mediaSource(b, i) {
						// A document's text or content source: text the
						// model reads, counted as text (900 KB of it
						// once reserved as one media part).
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
			// reads it ("input_im\u0061ge" is an image).
			typ := keyName(b[vs:i], &tb)
			fn = string(typ) == "function" || string(typ) == "custom"
			if !keys {
				switch string(typ) {
				case "image_url", "input_image", "image":
					image = true
				case "video_url", "audio_url", "input_audio", "image_embeds", "video", "audio":
					media = true
				case "document":
					doc = s.sources
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
		if s.sources && b[i] == '{' && !hasMember(b, i, "type") {
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
	memberTools
)

// classify names what a top-level key means for the bound, by the row's
// lists; tools is every API's tool list.
func (b Body) classify(key []byte) int {
	switch {
	case equalFold(key, "tools"):
		return memberTools
	case oneOf(key, b.Never):
		return memberSkip
	case oneOf(key, b.Prompt):
		return memberPrompt
	case oneOf(key, b.Unbounded):
		return memberUnbounded
	}
	return memberCounted
}

// oneOf reports whether key is one of names (lower-case), compared
// case-insensitively.
func oneOf(key []byte, names []string) bool {
	for _, n := range names {
		if equalFold(key, n) {
			return true
		}
	}
	return false
}

// equalFold reports whether key, in any ASCII case, is name (lower-case).
func equalFold(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
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
