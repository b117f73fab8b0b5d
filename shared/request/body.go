// Package request owns what the gateway reads of a client's request: the
// operation it asks for (one row of a table each) and the few body fields
// the gateway decides on, read once by a byte scan and rewritten in place
// for a backend.
package request

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// Body is what the gateway reads of a request body: only the top-level
// fields routing and relaying need, found by a byte scan so the rest of the
// body (the prompt) is never decoded. Spans index into the body.
//
// One reading for every backend: keys are compared after JSON unescaping,
// and a key the gateway reads that appears twice (an escaped spelling or a
// case variant counts as the same key) or only as a case variant is refused
// (a *KeyError), because first-wins, last-wins and case-insensitive decoders
// would each read such a body differently from the gateway.
type Body struct {
	Model string
	// Stream: the body asks for an SSE stream, by its operation's
	// trigger (Operation.AsksStream; the server sets it so): "stream":
	// true, or "stream_format": "sse".
	Stream bool
	// StreamFormat is "stream_format" as sent (OpenAI's audio speech:
	// "sse" or "audio").
	StreamFormat string
	// IncludeUsage is stream_options.include_usage as the client sent it.
	IncludeUsage bool
	// PreviousResponseID is the Responses API's previous_response_id: the
	// stored response this one continues, which lives on one endpoint.
	PreviousResponseID string
	// Conversation: the body names a stored conversation (the Responses
	// API's "conversation", not null).
	Conversation bool
	// N and BestOf are the choices asked for (n; best_of of legacy
	// completions); 0 when absent or null.
	N, BestOf int64
	// Caps are the output caps the client sent, by CapField; 0 when absent
	// or null. Token budgets reserve for the largest and rewrite them all
	// (RewriteWith), so that every backend reads one cap whichever field
	// it honours.
	Caps [numCaps]int64
	// ThinkingBudget is the Messages API's thinking.budget_tokens (0 when
	// absent or null): extended thinking's share of max_tokens, which
	// must stay above it.
	ThinkingBudget int64
	// Background is the Responses API's background: true: the backend
	// goes on generating after the creating request has its answer, so
	// its usage is not known when that request ends.
	Background bool
	// ServiceTier is service_tier as the client sent it, unescaped (""
	// when absent or null): a tenant may use only the tiers its config
	// allows, and the spend limits reserve at the tier asked.
	ServiceTier string

	caps          [numCaps]span // the cap fields' values; end 0 = absent
	model         span          // the "model" value (with quotes)
	streamOptions span          // the "stream_options" value
	includeUsage  span          // the include_usage value inside stream_options
	input         span          // the "input" value
	// ids are the abuse-attribution ids' values, by idField: strings
	// (RewriteWith keys them per tenant) or absent (end 0).
	ids [numIDs]span
	// cacheSalt is the "cache_salt" value (end 0: absent).
	cacheSalt span
	// maxToolCalls is the "max_tool_calls" value (end 0: absent).
	maxToolCalls span
	// serviceTier is the "service_tier" value (end 0: absent).
	serviceTier span
	present     uint8
	// modelEscaped is set when the model value holds escapes or invalid
	// UTF-8: it is then always rewritten in its canonical spelling, so the
	// backend reads exactly the string the gateway authorized.
	modelEscaped bool
}

type span struct{ start, end int }

// CapField names an output-cap field of a request body.
type CapField uint8

// The output-cap fields: Chat Completions' max_completion_tokens (and its
// deprecated max_tokens, which legacy completions and some backends read),
// and the Responses API's max_output_tokens.
const (
	MaxTokens CapField = iota
	MaxCompletionTokens
	MaxOutputTokens
	numCaps
)

var capNames = [numCaps]string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

func (f CapField) String() string { return capNames[f] }

// Sent reports whether the body has the cap field f (null included).
func (b *Body) Sent(f CapField) bool { return b.caps[f].end > 0 }

// ClientCap is the largest output cap the client sent (0: none): what a
// backend may generate per choice, whichever cap field it reads.
func (b *Body) ClientCap() int64 { return max(b.Caps[0], b.Caps[1], b.Caps[2]) }

// Choices is the number of completions the request generates: the larger
// of n and best_of, at least 1.
func (b *Body) Choices() int64 { return max(b.N, b.BestOf, 1) }

// idField names an abuse-attribution id: a value the backend account's
// vendor reads as one end user of the account, whichever tenant sent it.
type idField uint8

const (
	idUser             idField = iota // OpenAI's user
	idSafetyIdentifier                // OpenAI's safety_identifier
	idMetadataUserID                  // Anthropic's metadata.user_id
	numIDs
)

// presence bits for the fields the server must check.
const (
	HasMessages uint8 = 1 << iota
	HasPrompt
	HasInput
	hasModel
	hasStreamOptions
)

// Has reports whether the body has a top-level field (HasMessages…).
func (b *Body) Has(f uint8) bool { return b.present&f != 0 }

// Errors returned by ParseBody; the server turns them into 400s.
var (
	ErrNotJSON      = errors.New("request body is not valid JSON")
	ErrNotObject    = errors.New("request body must be a JSON object")
	ErrModelType    = errors.New("'model' must be a string")
	ErrMissingModel = errors.New("you must provide a model parameter")
	ErrStreamType   = errors.New("'stream' must be a boolean")
	ErrOptionsType  = errors.New("'stream_options' must be an object")
	ErrPreviousType = errors.New("'previous_response_id' must be a string")
	ErrThinkingType = errors.New("'thinking' must be an object")
	ErrTierType     = errors.New("'service_tier' must be a string")
	ErrFormatType   = errors.New("'stream_format' must be a string")
)

// StringError refuses a field the gateway rewrites as a string (an
// abuse-attribution id, cache_salt) sent as another type: a backend
// that coerced it would read an id the gateway did not key.
type StringError struct{ Param string }

func (e *StringError) Error() string {
	return fmt.Sprintf("Invalid type for '%s': expected a string (or null).", e.Param)
}

// maxCount is the largest n, best_of or output cap read; larger values
// read as it (2^53: the largest integer every JSON decoder reads exactly).
const maxCount = 1 << 53

// IntError refuses a count (n, best_of, an output cap) that is not a
// positive JSON integer or null: decoders would read a string, a fraction
// or an exponent differently, and a cap the gateway cannot read it cannot
// enforce.
type IntError struct {
	Param string
	// BelowMin: an integer below 1; else not an integer at all.
	BelowMin bool
}

func (e *IntError) Error() string {
	if e.BelowMin {
		return fmt.Sprintf("Invalid '%s': integer below minimum value. Expected a value >= 1.", e.Param)
	}
	return fmt.Sprintf("Invalid type for '%s': expected an integer (or null).", e.Param)
}

// Code is the error code of OpenAI's error JSON for e.
func (e *IntError) Code() string {
	if e.BelowMin {
		return "integer_below_min_value"
	}
	return "invalid_type"
}

// KeyError refuses a body whose reading would depend on the JSON decoder:
// a key the gateway reads appears more than once, or in another spelling
// than its own.
type KeyError struct {
	Param     string // the key's canonical name, with its object: "stream_options.include_usage"
	Got       string // the spelling found (unescaped)
	Duplicate bool
}

func (e *KeyError) Error() string {
	if e.Duplicate {
		return fmt.Sprintf("'%s' appears more than once in the request body (escaped spellings and case variants count as the same key); send it once", e.Param)
	}
	return fmt.Sprintf("%q is not a valid parameter name; parameter names are case-sensitive: use '%s'", e.Got, e.Param)
}

// Code is the error code of OpenAI's error JSON for e.
func (e *KeyError) Code() string {
	if e.Duplicate {
		return "duplicate_parameter"
	}
	return "unknown_parameter"
}

// key identifies the keys the gateway reads in one object.
type key uint8

const (
	keyOther key = iota
	keyModel
	keyStream
	keyStreamOptions
	keyMessages
	keyPrompt
	keyInput
	keyIncludeUsage
	keyPreviousResponse
	keyN
	keyBestOf
	keyMaxTokens
	keyMaxCompletionTokens
	keyMaxOutputTokens
	keyConversation
	keyThinking
	keyBudgetTokens
	keyBackground
	keyServiceTier
	keyStreamFormat
	keyMaxToolCalls
	keyType
	keyMaxUses
	keyContainer
	keyTools
	keyUser
	keySafetyIdentifier
	keyMetadata
	keyUserID
	keyCacheSalt
)

// topKeys, optionKeys, thinkingKeys and toolKeys are the keys the gateway
// reads or rewrites, top level, inside stream_options and thinking, and in
// a tool object (FeaturesOf). guarded marks those whose duplicates and
// variants are refused: what the gateway decides on. (messages, prompt and
// input are only checked for presence; a variant of them alone is missing.)
var (
	topKeys = map[string]key{"model": keyModel, "stream": keyStream, "stream_options": keyStreamOptions,
		"messages": keyMessages, "prompt": keyPrompt, "input": keyInput, "previous_response_id": keyPreviousResponse,
		"n": keyN, "best_of": keyBestOf, "max_tokens": keyMaxTokens, "max_completion_tokens": keyMaxCompletionTokens,
		"max_output_tokens": keyMaxOutputTokens, "conversation": keyConversation, "thinking": keyThinking, "background": keyBackground,
		"service_tier": keyServiceTier, "stream_format": keyStreamFormat, "max_tool_calls": keyMaxToolCalls,
		"user": keyUser, "safety_identifier": keySafetyIdentifier, "metadata": keyMetadata, "cache_salt": keyCacheSalt}
	optionKeys   = map[string]key{"include_usage": keyIncludeUsage}
	metadataKeys = map[string]key{"user_id": keyUserID}
	thinkingKeys = map[string]key{"budget_tokens": keyBudgetTokens}
	toolKeys     = map[string]key{"type": keyType, "max_uses": keyMaxUses, "container": keyContainer, "tools": keyTools}
	guarded      = [...]bool{keyModel: true, keyStream: true, keyStreamOptions: true, keyIncludeUsage: true, keyPreviousResponse: true,
		keyN: true, keyBestOf: true, keyMaxTokens: true, keyMaxCompletionTokens: true, keyMaxOutputTokens: true, keyConversation: true,
		keyThinking: true, keyBudgetTokens: true, keyBackground: true, keyServiceTier: true, keyStreamFormat: true,
		keyMaxToolCalls: true, keyType: true, keyMaxUses: true, keyContainer: true, keyTools: true,
		keyUser: true, keySafetyIdentifier: true, keyMetadata: true, keyUserID: true, keyCacheSalt: true}
	keyNames = [...]string{keyModel: "model", keyStream: "stream", keyStreamOptions: "stream_options",
		keyMessages: "messages", keyPrompt: "prompt", keyInput: "input", keyIncludeUsage: "stream_options.include_usage", keyPreviousResponse: "previous_response_id",
		keyN: "n", keyBestOf: "best_of", keyMaxTokens: "max_tokens", keyMaxCompletionTokens: "max_completion_tokens", keyMaxOutputTokens: "max_output_tokens",
		keyConversation: "conversation", keyThinking: "thinking", keyBudgetTokens: "thinking.budget_tokens", keyBackground: "background",
		keyServiceTier: "service_tier", keyStreamFormat: "stream_format", keyMaxToolCalls: "max_tool_calls",
		keyType: "type", keyMaxUses: "max_uses", keyContainer: "container", keyTools: "tools",
		keyUser: "user", keySafetyIdentifier: "safety_identifier", keyMetadata: "metadata", keyUserID: "metadata.user_id",
		keyCacheSalt: "cache_salt"}
	topFolded      = foldedKeys(topKeys)
	optionFolded   = foldedKeys(optionKeys)
	metadataFolded = foldedKeys(metadataKeys)
	thinkingFolded = foldedKeys(thinkingKeys)
	toolFolded     = foldedKeys(toolKeys)
)

// optString reads the JSON value raw, a string or null, into dst; any
// other value is bad.
func optString(raw []byte, dst *string, bad error) error {
	if string(raw) == "null" {
		return nil
	}
	if raw[0] != '"' {
		return bad
	}
	s, _, err := unquote(raw)
	if err != nil {
		return bad
	}
	*dst = s
	return nil
}

// ParseBody validates b as JSON and extracts the routing fields.
func ParseBody(b []byte) (Body, error) {
	var out Body
	if !json.Valid(b) {
		return out, ErrNotJSON
	}
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return out, ErrNotObject
	}
	var seen [len(guarded)]bool
	err := eachMember(b, i, func(raw []byte, v span) error {
		k, err := classify(raw, topKeys, topFolded, &seen)
		if err != nil {
			return err
		}
		switch k {
		case keyModel:
			if b[v.start] != '"' {
				return ErrModelType
			}
			out.model, out.present = v, out.present|hasModel
			s, escaped, err := unquote(b[v.start:v.end])
			if err != nil {
				return ErrModelType
			}
			out.Model, out.modelEscaped = s, escaped
		case keyStream:
			switch string(b[v.start:v.end]) {
			case "true":
				out.Stream = true
			case "false", "null":
			default:
				return ErrStreamType
			}
		case keyStreamOptions:
			return out.parseStreamOptions(b, v)
		case keyPreviousResponse:
			return optString(b[v.start:v.end], &out.PreviousResponseID, ErrPreviousType)
		case keyN, keyBestOf, keyMaxTokens, keyMaxCompletionTokens, keyMaxOutputTokens:
			n, err := count(b[v.start:v.end], keyNames[k])
			if err != nil {
				return err
			}
			switch k {
			case keyN:
				out.N = n
			case keyBestOf:
				out.BestOf = n
			default:
				c := CapField(k - keyMaxTokens)
				out.Caps[c], out.caps[c] = n, v
			}
		case keyMessages:
			out.present |= HasMessages
		case keyPrompt:
			out.present |= HasPrompt
		case keyInput:
			out.present |= HasInput
			out.input = v
		case keyBackground:
			out.Background = string(b[v.start:v.end]) == "true"
		case keyStreamFormat:
			return optString(b[v.start:v.end], &out.StreamFormat, ErrFormatType)
		case keyMaxToolCalls:
			out.maxToolCalls = v
			_, err := toolCalls(b[v.start:v.end])
			return err
		case keyServiceTier:
			out.serviceTier = v
			return optString(b[v.start:v.end], &out.ServiceTier, ErrTierType)
		case keyConversation:
			out.Conversation = string(b[v.start:v.end]) != "null"
		case keyThinking:
			return out.parseThinking(b, v)
		case keyUser, keySafetyIdentifier:
			return idString(b, v, &out.ids[idField(k-keyUser)], keyNames[k])
		case keyCacheSalt:
			return idString(b, v, &out.cacheSalt, keyNames[k])
		case keyMetadata:
			return out.parseMetadata(b, v)
		}
		return nil
	})
	if err != nil {
		return out, err
	}
	if !out.Has(hasModel) || out.Model == "" {
		return out, ErrMissingModel
	}
	return out, nil
}

// count reads the value of a count field: a JSON integer of at least 1
// (no fraction, no exponent; saturating at maxCount) or null (0).
func count(v []byte, param string) (int64, error) {
	if string(v) == "null" {
		return 0, nil
	}
	n, neg, next, ok := jsonscan.Int(v, 0, maxCount)
	if !ok || next != len(v) {
		return 0, &IntError{Param: param}
	}
	if neg || n < 1 {
		return 0, &IntError{Param: param, BelowMin: true}
	}
	return int64(min(n, maxCount)), nil
}

// toolCalls reads the Responses API's max_tool_calls (FeaturesOf's bound
// on built-in tool calls): a count, or 0, which bounds them too.
func toolCalls(v []byte) (int64, error) {
	if string(v) == "0" {
		return 0, nil
	}
	return count(v, "max_tool_calls")
}

func (out *Body) parseStreamOptions(b []byte, v span) error {
	if string(b[v.start:v.end]) == "null" {
		out.streamOptions = v
		return nil
	}
	if b[v.start] != '{' {
		return ErrOptionsType
	}
	out.streamOptions, out.present = v, out.present|hasStreamOptions
	var seen [len(guarded)]bool
	return eachMember(b, v.start, func(raw []byte, iv span) error {
		k, err := classify(raw, optionKeys, optionFolded, &seen)
		if k == keyIncludeUsage {
			out.includeUsage = iv
			out.IncludeUsage = string(b[iv.start:iv.end]) == "true"
		}
		return err
	})
}

// parseThinking reads the Messages API's thinking object: its
// budget_tokens, a count read once like every cap ({"type":"disabled"}
// has none).
func (out *Body) parseThinking(b []byte, v span) error {
	if string(b[v.start:v.end]) == "null" {
		return nil
	}
	if b[v.start] != '{' {
		return ErrThinkingType
	}
	var seen [len(guarded)]bool
	return eachMember(b, v.start, func(raw []byte, iv span) error {
		k, err := classify(raw, thinkingKeys, thinkingFolded, &seen)
		if err != nil {
			return err
		}
		if k == keyBudgetTokens {
			n, err := count(b[iv.start:iv.end], keyNames[k])
			out.ThinkingBudget = n
			return err
		}
		return nil
	})
}

// idString records at dst the span of a string value the rewrite keys
// per tenant; null is left as sent; any other type is refused.
func idString(b []byte, v span, dst *span, param string) error {
	switch b[v.start] {
	case '"':
		*dst = v
	case 'n':
	default:
		return &StringError{Param: param}
	}
	return nil
}

// parseMetadata reads metadata's user_id (Anthropic's end-user id), read
// once; metadata of another type is the backend's to refuse.
func (out *Body) parseMetadata(b []byte, v span) error {
	if b[v.start] != '{' {
		return nil
	}
	var seen [len(guarded)]bool
	return eachMember(b, v.start, func(raw []byte, iv span) error {
		k, err := classify(raw, metadataKeys, metadataFolded, &seen)
		if err != nil {
			return err
		}
		if k == keyUserID {
			return idString(b, iv, &out.ids[idMetadataUserID], keyNames[k])
		}
		return nil
	})
}

// classify names the key spelled raw (the bytes between its quotes) and
// refuses a guarded key seen before or spelled other than exactly.
func classify(raw []byte, exact map[string]key, folded map[string]key, seen *[len(guarded)]bool) (key, error) {
	if k, ok := exact[string(raw)]; ok { // no allocation: map lookup of a converted []byte
		return k, mark(k, string(raw), seen)
	}
	if plainShort(raw) { // the common case: an unrelated ASCII key
		var buf [32]byte
		n := 0
		for _, c := range raw {
			if c == '_' || c == '-' {
				continue
			}
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[n] = c
			n++
		}
		k, ok := folded[string(buf[:n])]
		if !ok {
			return keyOther, nil
		}
		return variant(k, string(raw), seen)
	}
	s, _, err := unquote(append(append([]byte{'"'}, raw...), '"'))
	if err != nil {
		return keyOther, nil // json.Valid passed: cannot happen
	}
	if k, ok := exact[s]; ok { // an escaped spelling of the exact key
		return k, mark(k, s, seen)
	}
	k, ok := folded[fold(s)]
	if !ok {
		return keyOther, nil
	}
	return variant(k, s, seen)
}

func mark(k key, got string, seen *[len(guarded)]bool) error {
	if int(k) >= len(guarded) || !guarded[k] {
		return nil
	}
	if seen[k] {
		return &KeyError{Param: keyNames[k], Got: got, Duplicate: true}
	}
	seen[k] = true
	return nil
}

func variant(k key, got string, seen *[len(guarded)]bool) (key, error) {
	if int(k) >= len(guarded) || !guarded[k] {
		return keyOther, nil // a variant of a presence-only key is just another key
	}
	if err := mark(k, got, seen); err != nil {
		return k, err
	}
	return k, &KeyError{Param: keyNames[k], Got: got}
}

// plainShort reports whether raw is printable ASCII without escapes and
// short enough for the folding buffer.
func plainShort(raw []byte) bool {
	if len(raw) > 32 {
		return false
	}
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// fold maps s to a canonical form under which two keys are equal when any
// decoder might match them to one field: Unicode simple case folding (what
// encoding/json's case-insensitive match uses, so 'ſ' is 's' and 'K' is
// 'k') with '_' and '-' ignored (encoding/json/v2's case-insensitive mode).
func fold(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if r == '_' || r == '-' {
			continue
		}
		sb.WriteRune(foldRune(r))
	}
	return sb.String()
}

// foldRune is the smallest rune in r's simple case-folding orbit.
func foldRune(r rune) rune {
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < min {
			min = f
		}
	}
	if 'A' <= min && min <= 'Z' { // the ASCII fast path folds to lower case
		min += 'a' - 'A'
	}
	return min
}

func foldedKeys(m map[string]key) map[string]key {
	out := make(map[string]key, len(m))
	for s, k := range m {
		out[fold(s)] = k
	}
	return out
}

// Rewrite appends to dst the body the backend must receive: b unchanged but
// for the model value (when model is not empty and differs) and, when
// injectUsage is set, stream_options.include_usage forced to true. It never
// reorders or re-encodes anything else.
func (p *Body) Rewrite(dst, b []byte, model string, injectUsage bool) []byte {
	return p.RewriteWith(dst, b, Changes{Model: model, InjectUsage: injectUsage})
}

// Changes is what RewriteWith changes in a body.
type Changes struct {
	// Model, when not empty and different, replaces the model value.
	Model string
	// InjectUsage forces stream_options.include_usage to true;
	// RunningUsage, with it, adds continuous_usage_stats: true beside it
	// (vLLM's usage on every chunk, upstream.Target.RunningUsage), after
	// which a value the client sent for it still wins, being later.
	InjectUsage, RunningUsage bool
	// OutputCap, when positive, caps the output per choice: every cap
	// field present (max_tokens, max_completion_tokens, max_output_tokens)
	// that is null or larger is set to it, and CapField, when absent, is
	// added after the model. So every backend reads a cap of at most
	// OutputCap, whichever of the fields it honours.
	OutputCap int64
	// CapField is the field the backend's wire format reads
	// (upstream.Target.CapField): always present in a capped body.
	CapField CapField
	// Tenant, when not empty, keys the body per tenant: each
	// abuse-attribution id (user, safety_identifier, metadata.user_id)
	// sent as a string becomes "{Tenant}:{id}", so that one tenant
	// cannot speak as another's end user in the account's namespace; a
	// cache_salt sent is replaced by the tenant's own (CacheSalt).
	Tenant string
	// SaltCache adds the tenant's cache_salt when the body has none (a
	// backend that shares its prefix cache by salt: vLLM).
	SaltCache bool
	// MaxToolCalls, when positive, is the Responses API's max_tool_calls
	// to write when the body bounds no built-in tool calls (the member
	// absent or null): the uses its hosted tools were reserved for. A
	// count the client sent is kept: it is what was reserved.
	MaxToolCalls int64
	// ServiceTier, when not empty, is the service_tier to write when the
	// body leaves the tier to the backend (absent, null or "auto"): the
	// backend kind's standard tier, for a tenant that may use no other,
	// so it is never served a dearer one than was reserved. A tier the
	// client named is kept (billing.CheckTier held it to the tenant's).
	ServiceTier string
}

// usageOptions is the stream_options members RewriteWith injects:
// include_usage, and with running, continuous_usage_stats.
func usageOptions(running bool) string {
	if running {
		return `"include_usage":true,"continuous_usage_stats":true`
	}
	return `"include_usage":true`
}

// CacheSalt appends to dst the cache_salt the gateway writes for tenant:
// the hex SHA-256 of its id, the same on every replica. The client never
// chooses it, so it need not be secret: one tenant's requests share
// cached prefixes only with that tenant's.
func CacheSalt(dst []byte, tenant string) []byte {
	sum := sha256.Sum256([]byte("llmgw cache_salt\x00" + tenant))
	return hex.AppendEncode(dst, sum[:16])
}

// RewriteWith appends to dst the body b with c applied, in one pass over
// b: only the model value, include_usage and the output caps change;
// nothing else is reordered or re-encoded. (Its length is the edits' list,
// built and applied in position order in one place.)
func (p *Body) RewriteWith(dst, b []byte, c Changes) []byte {
	type edit struct {
		at, end int
		with    func([]byte) []byte
	}
	var edits [5 + int(numCaps) + int(numIDs)]edit
	n := 0
	model := c.Model
	if model == "" && p.modelEscaped {
		model = p.Model
	}
	if model != "" && (model != p.Model || p.modelEscaped) {
		edits[n] = edit{p.model.start, p.model.end, func(d []byte) []byte { return appendQuoted(d, model) }}
		n++
	}
	if c.InjectUsage && !p.IncludeUsage {
		usage := usageOptions(c.RunningUsage)
		switch {
		case p.includeUsage.end > 0: // present but false/null
			edits[n] = edit{p.includeUsage.start, p.includeUsage.end, func(d []byte) []byte { return append(d, usage[len(`"include_usage":`):]...) }}
		case p.streamOptions.end > 0 && !p.Has(hasStreamOptions): // "stream_options":null
			edits[n] = edit{p.streamOptions.start, p.streamOptions.end, func(d []byte) []byte { return append(append(append(d, '{'), usage...), '}') }}
		case p.Has(hasStreamOptions): // an object without include_usage
			open := p.streamOptions.start + 1
			empty := jsonscan.SkipWS(b, open) == p.streamOptions.end-1
			edits[n] = edit{open, open, func(d []byte) []byte {
				d = append(d, usage...)
				if !empty {
					d = append(d, ',')
				}
				return d
			}}
		default: // append a member before the closing brace
			end := lastBrace(b)
			empty := jsonscan.SkipWS(b, firstBrace(b)+1) == end
			edits[n] = edit{end, end, func(d []byte) []byte {
				if !empty {
					d = append(d, ',')
				}
				return append(append(append(d, `"stream_options":{`...), usage...), '}')
			}}
		}
		n++
	}
	if oc := c.OutputCap; oc > 0 {
		capValue := func(d []byte) []byte { return strconv.AppendInt(d, oc, 10) }
		for f, v := range p.caps {
			if v.end == 0 {
				continue
			}
			if p.Caps[f] == 0 || p.Caps[f] > oc { // null, or more than the cap
				edits[n] = edit{v.start, v.end, capValue}
				n++
			}
		}
		// The field the backend reads always carries the cap, whichever
		// others the client sent (a backend that reads only
		// max_tokens ignored a max_completion_tokens of 1).
		if p.caps[c.CapField].end == 0 && p.Has(hasModel) {
			// After the model, which every accepted body has: never the
			// first member, never beside the closing brace another edit
			// may append to.
			field := c.CapField
			edits[n] = edit{p.model.end, p.model.end, func(d []byte) []byte {
				d = append(append(append(d, `,"`...), capNames[field]...), `":`...)
				return capValue(d)
			}}
			n++
		}
	}
	if t := c.Tenant; t != "" {
		for _, v := range p.ids {
			if v.end == 0 {
				continue
			}
			edits[n] = edit{v.start, v.end, func(d []byte) []byte {
				id, _, err := unquote(b[v.start:v.end])
				if err != nil { // json.Valid passed: cannot happen
					id = ""
				}
				return appendQuoted(d, t+":"+id)
			}}
			n++
		}
		salt := func(d []byte) []byte { return append(CacheSalt(append(d, '"'), t), '"') }
		switch {
		case p.cacheSalt.end > 0:
			edits[n] = edit{p.cacheSalt.start, p.cacheSalt.end, salt}
			n++
		case c.SaltCache && p.Has(hasModel):
			edits[n] = edit{p.model.end, p.model.end, func(d []byte) []byte { return salt(append(d, `,"cache_salt":`...)) }}
			n++
		}
	}
	if mc := c.MaxToolCalls; mc > 0 && p.Has(hasModel) {
		value := func(d []byte) []byte { return strconv.AppendInt(d, mc, 10) }
		switch v := p.maxToolCalls; {
		case v.end == 0: // absent: after the model, as the cap field is
			edits[n] = edit{p.model.end, p.model.end, func(d []byte) []byte { return value(append(d, `,"max_tool_calls":`...)) }}
			n++
		case string(b[v.start:v.end]) == "null":
			edits[n] = edit{v.start, v.end, value}
			n++
		}
	}
	if st := c.ServiceTier; st != "" && p.Has(hasModel) {
		value := func(d []byte) []byte { return appendQuoted(d, st) }
		switch v := p.serviceTier; {
		case v.end == 0: // absent: after the model
			edits[n] = edit{p.model.end, p.model.end, func(d []byte) []byte { return value(append(d, `,"service_tier":`...)) }}
			n++
		case p.ServiceTier == "" || p.ServiceTier == "auto": // null or "auto"
			edits[n] = edit{v.start, v.end, value}
			n++
		}
	}
	// In order of position; no two edits overlap, and the insertions at
	// the model's end sort after the model's own edit.
	for i := 1; i < n; i++ {
		for j := i; j > 0 && edits[j].at < edits[j-1].at; j-- {
			edits[j], edits[j-1] = edits[j-1], edits[j]
		}
	}
	last := 0
	for _, e := range edits[:n] {
		dst = append(dst, b[last:e.at]...)
		dst = e.with(dst)
		last = e.end
	}
	return append(dst, b[last:]...)
}

// eachMember calls fn for each member of the object starting at b[i]=='{'
// (jsonscan.Members), until fn returns an error, which it returns. b must
// be valid JSON.
func eachMember(b []byte, i int, fn func(key []byte, v span) error) error {
	var err error
	jsonscan.Members(b, i, func(key []byte, v, end int) {
		if err == nil {
			err = fn(key, span{v, end})
		}
	})
	return err
}

func firstBrace(b []byte) int { return jsonscan.SkipWS(b, 0) }

func lastBrace(b []byte) int {
	i := len(b) - 1
	for i > 0 && b[i] != '}' {
		i--
	}
	return i
}

// unquote decodes the JSON string q (with its quotes) as encoding/json
// does; escaped reports that q is not the plain spelling of the result
// (escapes, or invalid UTF-8 that decoding replaces with U+FFFD).
func unquote(q []byte) (s string, escaped bool, err error) {
	inner := q[1 : len(q)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), false, nil
	}
	if err := json.Unmarshal(q, &s); err != nil {
		return "", true, fmt.Errorf("unquote: %w", err)
	}
	return s, true, nil
}

func appendQuoted(d []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(d, q...)
}

// WithModel appends to dst the body b with its top-level model set to
// model: the value replaced when there is one, a member inserted first when
// there is none. Azure's deployment routes name the model in the path; the
// body must then say the same, so the gateway and the backend cannot read
// two models. Errors are ParseBody's, but for a missing model.
func WithModel(dst, b []byte, model string) ([]byte, error) {
	p, err := ParseBody(b)
	if err != nil && !errors.Is(err, ErrMissingModel) {
		return nil, err
	}
	if p.Has(hasModel) {
		dst = append(dst, b[:p.model.start]...)
		dst = appendQuoted(dst, model)
		return append(dst, b[p.model.end:]...), nil
	}
	open := firstBrace(b) + 1
	dst = append(dst, b[:open]...)
	dst = appendQuoted(append(dst, `"model":`...), model)
	if jsonscan.SkipWS(b, open) != lastBrace(b) {
		dst = append(dst, ',')
	}
	return append(dst, b[open:]...), nil
}
