package stub

// What agents need of a backend besides text: a tool call when the request
// offers tools, and an answer that is JSON satisfying a schema when it asks
// for structured output. The three APIs (Chat Completions' tool_calls and
// response_format, the Responses API's function_call items and
// text.format, the Messages API's tool_use blocks) share the choice of the
// tool and the value generated from a JSON Schema.

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"unicode/utf8"
)

// schemaDepth bounds the generator on recursive schemas: past it a value
// is null.
const schemaDepth = 12

// schemaValue is a value that satisfies schema as a client validates it:
// an object with every required property (optional ones left out), the
// first enum or const value, the first branch of anyOf / oneOf, the first
// non-null type of a type list, $ref to #/$defs/…, #/definitions/… or #
// resolved. Strings are "stub" (the format's shape for date-time, date,
// email, uri and uuid; "echo stub" for a property named command or cmd),
// numbers 1 (moved into minimum / maximum), booleans true, arrays
// minItems items (["echo", "stub"] for an array of strings named command).
// A schema that does not parse is the empty object.
func schemaValue(schema json.RawMessage) any {
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return map[string]any{}
	}
	m, _ := root.(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	g := schemaGen{root: m}
	return g.value(m, "", 0)
}

// schemaJSON is schemaValue encoded.
func schemaJSON(schema json.RawMessage) string {
	out, err := json.Marshal(schemaValue(schema))
	if err != nil { // unreachable: the values are decoded JSON and the stub's own
		return "{}"
	}
	return string(out)
}

type schemaGen struct{ root map[string]any }

func (g *schemaGen) resolve(ref string) map[string]any {
	if ref == "#" {
		return g.root
	}
	for _, prefix := range []string{"#/$defs/", "#/definitions/"} {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			defs, _ := g.root[strings.TrimSuffix(strings.TrimPrefix(prefix, "#/"), "/")].(map[string]any)
			s, _ := defs[name].(map[string]any)
			return s
		}
	}
	return nil
}

func (g *schemaGen) value(s map[string]any, name string, depth int) any {
	if s == nil || depth > schemaDepth {
		return nil
	}
	if ref, ok := s["$ref"].(string); ok {
		return g.value(g.resolve(ref), name, depth+1)
	}
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if list, ok := s[k].([]any); ok && len(list) > 0 {
			// The first branch that is not null.
			for _, b := range list {
				if bm, _ := b.(map[string]any); bm != nil && bm["type"] != "null" {
					return g.value(bm, name, depth+1)
				}
			}
			bm, _ := list[0].(map[string]any)
			return g.value(bm, name, depth+1)
		}
	}
	typ, _ := s["type"].(string)
	if list, ok := s["type"].([]any); ok {
		for _, t := range list {
			if ts, _ := t.(string); ts != "null" {
				typ = ts
				break
			}
		}
	}
	if typ == "" {
		switch {
		case s["properties"] != nil:
			typ = "object"
		case s["items"] != nil:
			typ = "array"
		default:
			typ = "string"
		}
	}
	switch typ {
	case "object":
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		out := make(map[string]any, len(req))
		for _, r := range req {
			if k, ok := r.(string); ok {
				ps, _ := props[k].(map[string]any)
				out[k] = g.value(ps, k, depth+1)
			}
		}
		return out
	case "array":
		items, _ := s["items"].(map[string]any)
		n, _ := s["minItems"].(float64)
		if (name == "command" || name == "cmd") && items != nil && items["type"] == "string" && n <= 2 {
			return []any{"echo", "stub"}
		}
		out := make([]any, 0, int(n))
		for range int(min(n, 16)) {
			out = append(out, g.value(items, "", depth+1))
		}
		return out
	case "integer", "number":
		v := 1.0
		if lo, ok := s["minimum"].(float64); ok && v < lo {
			v = lo
		}
		if lo, ok := s["exclusiveMinimum"].(float64); ok && v <= lo {
			v = lo + 1
		}
		if hi, ok := s["maximum"].(float64); ok && v > hi {
			v = hi
		}
		if hi, ok := s["exclusiveMaximum"].(float64); ok && v >= hi {
			v = hi - 1
		}
		if typ == "integer" {
			v = math.Ceil(v)
		}
		return v
	case "boolean":
		return true
	case "null":
		return nil
	}
	return stringValue(s, name)
}

func stringValue(s map[string]any, name string) string {
	v := "stub"
	switch f, _ := s["format"].(string); f {
	case "date-time":
		v = "2025-01-01T00:00:00Z"
	case "date":
		v = "2025-01-01"
	case "time":
		v = "00:00:00Z"
	case "email":
		v = "stub@example.com"
	case "uri", "url":
		v = "https://example.com/stub"
	case "uuid":
		v = "00000000-0000-4000-8000-000000000000"
	default:
		switch name {
		case "command", "cmd":
			v = "echo stub"
		case "new_string":
			// An edit that changes something: Claude Code's Edit refuses
			// an old_string equal to its new_string.
			v = StubEditText
		}
	}
	if n, ok := s["minLength"].(float64); ok && float64(len(v)) < n {
		v += strings.Repeat("x", int(n)-len(v))
	}
	if n, ok := s["maxLength"].(float64); ok && float64(len(v)) > n {
		v = v[:int(max(n, 0))]
	}
	return v
}

// pickTool is the index of the tool an answer calls among names, or -1:
// none when forced names none, else forced when it is one of names (a
// tool_choice naming a function), else the longest name that last (the
// conversation's last message or item) mentions, else the first. A
// request whose last message is a tool's result gets no call: the tool
// ran, the answer is text.
func pickTool(names []string, last []byte, forced string) int {
	if len(names) == 0 {
		return -1
	}
	if forced != "" {
		for i, n := range names {
			if n == forced {
				return i
			}
		}
	}
	at := -1
	for i, n := range names {
		if n != "" && bytes.Contains(last, []byte(n)) && (at < 0 || len(n) > len(names[at])) {
			at = i
		}
	}
	if at < 0 {
		for i, n := range names {
			if n != "" {
				return i
			}
		}
	}
	return at
}

// splitPieces cuts s into pieces of size bytes (the last shorter), as a
// stream's deltas; none for an empty s.
func splitPieces(s string, size int) []string {
	var out []string
	for len(s) > 0 {
		n := min(len(s), size)
		for n < len(s) && !utf8.RuneStart(s[n]) { // never cut a character
			n++
		}
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}
