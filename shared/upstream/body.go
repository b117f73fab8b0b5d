package upstream

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Body is what the gateway reads of a request body: only the top-level
// fields routing and relaying need, found by a byte scan so the rest of the
// body (the prompt) is never decoded. Spans index into the body.
type Body struct {
	Model  string
	Stream bool
	// IncludeUsage is stream_options.include_usage as the client sent it.
	IncludeUsage bool

	model         span // the "model" value (with quotes)
	streamOptions span // the "stream_options" value
	includeUsage  span // the include_usage value inside stream_options
	present       uint8
}

type span struct{ start, end int }

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
)

// ParseBody validates b as JSON and extracts the routing fields.
func ParseBody(b []byte) (Body, error) {
	var out Body
	if !json.Valid(b) {
		return out, ErrNotJSON
	}
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return out, ErrNotObject
	}
	err := eachMember(b, i, func(key []byte, v span) error {
		switch string(key) { // no allocation: the compiler special-cases this switch
		case "model":
			if b[v.start] != '"' {
				return ErrModelType
			}
			out.model, out.present = v, out.present|hasModel
			s, err := unquote(b[v.start:v.end])
			if err != nil {
				return ErrModelType
			}
			out.Model = s
		case "stream":
			switch string(b[v.start:v.end]) {
			case "true":
				out.Stream = true
			case "false", "null":
			default:
				return ErrStreamType
			}
		case "stream_options":
			if string(b[v.start:v.end]) == "null" {
				out.streamOptions, out.present = v, out.present&^hasStreamOptions
				return nil
			}
			if b[v.start] != '{' {
				return ErrOptionsType
			}
			out.streamOptions, out.present = v, out.present|hasStreamOptions
			out.includeUsage, out.IncludeUsage = span{}, false
			return eachMember(b, v.start, func(k []byte, iv span) error {
				if string(k) == "include_usage" {
					out.includeUsage = iv
					out.IncludeUsage = string(b[iv.start:iv.end]) == "true"
				}
				return nil
			})
		case "messages":
			out.present |= HasMessages
		case "prompt":
			out.present |= HasPrompt
		case "input":
			out.present |= HasInput
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

// Rewrite appends to dst the body the backend must receive: b unchanged but
// for the model value (when model is not empty and differs) and, when
// injectUsage is set, stream_options.include_usage forced to true. It never
// reorders or re-encodes anything else.
func (p *Body) Rewrite(dst, b []byte, model string, injectUsage bool) []byte {
	type edit struct {
		at, end int
		with    func([]byte) []byte
	}
	var edits [2]edit
	n := 0
	if model != "" && model != p.Model {
		edits[n] = edit{p.model.start, p.model.end, func(d []byte) []byte { return appendQuoted(d, model) }}
		n++
	}
	if injectUsage && !p.IncludeUsage {
		switch {
		case p.includeUsage.end > 0: // present but false/null
			edits[n] = edit{p.includeUsage.start, p.includeUsage.end, func(d []byte) []byte { return append(d, "true"...) }}
		case p.streamOptions.end > 0 && !p.Has(hasStreamOptions): // "stream_options":null
			edits[n] = edit{p.streamOptions.start, p.streamOptions.end, func(d []byte) []byte { return append(d, `{"include_usage":true}`...) }}
		case p.Has(hasStreamOptions): // an object without include_usage
			open := p.streamOptions.start + 1
			empty := skipWS(b, open) == p.streamOptions.end-1
			edits[n] = edit{open, open, func(d []byte) []byte {
				d = append(d, `"include_usage":true`...)
				if !empty {
					d = append(d, ',')
				}
				return d
			}}
		default: // append a member before the closing brace
			end := lastBrace(b)
			empty := skipWS(b, firstBrace(b)+1) == end
			edits[n] = edit{end, end, func(d []byte) []byte {
				if !empty {
					d = append(d, ',')
				}
				return append(d, `"stream_options":{"include_usage":true}`...)
			}}
		}
		n++
	}
	if n == 2 && edits[1].at < edits[0].at {
		edits[0], edits[1] = edits[1], edits[0]
	}
	last := 0
	for _, e := range edits[:n] {
		dst = append(dst, b[last:e.at]...)
		dst = e.with(dst)
		last = e.end
	}
	return append(dst, b[last:]...)
}

// eachMember calls fn for each member of the object starting at b[i]=='{'.
// b must be valid JSON.
func eachMember(b []byte, i int, fn func(key []byte, v span) error) error {
	i = skipWS(b, i+1)
	for i < len(b) && b[i] != '}' {
		ks := i
		ke := skipString(b, i)
		key := b[ks+1 : ke-1]
		i = skipWS(b, ke)
		i = skipWS(b, i+1) // ':'
		vs := i
		ve := skipValue(b, i)
		if err := fn(key, span{vs, ve}); err != nil {
			return err
		}
		i = skipWS(b, ve)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i]=='"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

func firstBrace(b []byte) int { return skipWS(b, 0) }

func lastBrace(b []byte) int {
	i := len(b) - 1
	for i > 0 && b[i] != '}' {
		i--
	}
	return i
}

func unquote(q []byte) (string, error) {
	for _, c := range q[1 : len(q)-1] {
		if c == '\\' {
			var s string
			if err := json.Unmarshal(q, &s); err != nil {
				return "", fmt.Errorf("unquote: %w", err)
			}
			return s, nil
		}
	}
	return string(q[1 : len(q)-1]), nil
}

func appendQuoted(d []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(d, q...)
}
