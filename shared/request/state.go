package request

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// Stored state named by id. One backend key serves every tenant, so an id
// the backend resolves from its own store (a stored item, a prompt
// template, a response id a client chooses) reaches whatever any tenant
// stored under it. The gateway records only the responses it relayed
// (shared/affinity); everything else a body names by id without carrying
// it is refused before any backend call.

// stateRule is the stored-state column of the operations table: which
// ways of naming backend state an operation's body has. It is kept in
// this file, beside the checks that read it, one entry per operation.
type stateRule uint8

const (
	// stateInputItems: the body's input is Responses API items, any of
	// which may name a stored item by id.
	stateInputItems stateRule = 1 << iota
	// statePrompt: prompt is a stored prompt template ({"id": …}).
	statePrompt
	// stateRequestID: a top-level request_id names the backend's own
	// record: vLLM stores a Responses answer under it, so a tenant who
	// names another's response id overwrites it there.
	stateRequestID
	// stateDeclared marks a row as written, so that a new operation
	// without one fails TestStateRules.
	stateDeclared
)

// StateError refuses a body that names backend state without carrying it:
// the server answers 400 stored_state_not_supported with Param.
type StateError struct {
	Param   string // where: "input[2]", "prompt.id", "request_id"
	Message string
}

func (e *StateError) Error() string { return e.Message }

// itemContent is, per Responses input item type, the member that carries
// the item itself: an item of that type with an id but without it is a
// reference the backend resolves from its store. A reasoning item is
// carried only by its encrypted_content (its summary is not what the model
// reads back). Types not listed are carried by any member besides id,
// type and status.
var itemContent = map[string]string{
	"":          "content", // an easy input message, or an item with no type
	"message":   "content",
	"reasoning": "encrypted_content",
	// A compaction item (what compaction returns; Codex sends it back) is
	// carried only by its encrypted_content, the compacted window itself.
	"compaction":            "encrypted_content",
	"function_call":         "arguments",
	"function_call_output":  "output",
	"computer_call":         "action",
	"computer_call_output":  "output",
	"custom_tool_call":      "input",
	"web_search_call":       "action",
	"local_shell_call":      "action",
	"image_generation_call": "result",
}

// StoredState checks body b (already parsed by ParseBody) of operation op
// for the ways op's row says it may name backend state; it returns nil
// when b names none without carrying it. Keys are compared after
// unescaping, and every occurrence of a key is checked, so a duplicate
// cannot hide one from a first-wins or last-wins decoder.
func StoredState(b []byte, op Operation) *StateError {
	rule := operations[op].state
	i := jsonscan.SkipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil
	}
	var found *StateError
	var kb [32]byte
	jsonscan.Members(b, i, func(raw []byte, v, end int) {
		if found != nil {
			return
		}
		switch string(jsonscan.Key(raw, &kb)) {
		case "request_id":
			if rule&stateRequestID != 0 && b[v] != 'n' {
				found = &StateError{Param: "request_id", Message: "'request_id' is not served through the gateway: a backend stores its answer under it, and one backend account serves every tenant. Send the request without it"}
			}
		case "prompt":
			if set, _ := member(b, v, "id"); rule&statePrompt != 0 && b[v] == '{' && set {
				found = &StateError{Param: "prompt.id", Message: "stored prompts ('prompt.id') are not served through the gateway: a prompt template lives in the backend account every tenant shares. Send the prompt's text in 'instructions' and 'input'"}
			}
		case "input":
			if rule&stateInputItems != 0 && b[v] == '[' {
				found = storedItem(b, v)
			}
		}
	})
	return found
}

// storedItem is the first item of the input array at b[v] that names a
// stored item without carrying it.
func storedItem(b []byte, v int) *StateError {
	n := 0
	for i := jsonscan.SkipWS(b, v+1); i < len(b) && b[i] != ']'; n++ {
		e := jsonscan.SkipValue(b, i)
		if b[i] == '{' {
			if msg := itemRefused(b, i); msg != "" {
				return &StateError{Param: fmt.Sprintf("input[%d]", n), Message: msg}
			}
		}
		i = jsonscan.SkipWS(b, e)
		if i < len(b) && b[i] == ',' {
			i = jsonscan.SkipWS(b, i+1)
		}
	}
	return nil
}

// itemRefused says why the item object at b[i] is refused, or "".
func itemRefused(b []byte, i int) string {
	var typ []byte
	typeOK, hasID, types := true, false, 0
	var kb [32]byte
	jsonscan.Members(b, i, func(raw []byte, v, end int) {
		switch string(jsonscan.Key(raw, &kb)) {
		case "type":
			types++
			if b[v] == '"' {
				typ, typeOK = stringValue(b[v:end])
			}
		case "id":
			// Any id counts: a first-wins decoder reads the first.
			hasID = hasID || b[v] != 'n'
		}
	})
	switch {
	case !typeOK:
		return "an input item's 'type' does not decode"
	case types > 1:
		// First-wins and last-wins decoders would read two types.
		return "an input item has 'type' more than once: send it once"
	case string(typ) == "item_reference":
		return "input items of type 'item_reference' are not served through the gateway: send the item itself, or continue with 'previous_response_id'"
	case !hasID:
		return ""
	}
	if want, ok := itemContent[string(typ)]; ok {
		if set, null := member(b, i, want); set && !null {
			return ""
		}
		return fmt.Sprintf("an input item with an 'id' and no '%s' names a stored item, which is not served through the gateway: send the item with its '%s', or continue with 'previous_response_id'", want, want)
	}
	carried := false
	jsonscan.Members(b, i, func(raw []byte, v, _ int) {
		switch string(jsonscan.Key(raw, &kb)) {
		case "id", "type", "status":
		default:
			carried = carried || b[v] != 'n'
		}
	})
	if carried {
		return ""
	}
	return "an input item with only an 'id' names a stored item, which is not served through the gateway: send the item itself, or continue with 'previous_response_id'"
}

// member reports whether the object at b[i] has a member named name
// (after unescaping) that is not null (set), and one that is (null): a
// key sent twice is read differently by first-wins and last-wins
// decoders, so a check takes the reading that refuses.
func member(b []byte, i int, name string) (set, null bool) {
	var kb [32]byte
	jsonscan.Members(b, i, func(raw []byte, v, _ int) {
		if string(jsonscan.Key(raw, &kb)) == name {
			if b[v] == 'n' {
				null = true
			} else {
				set = true
			}
		}
	})
	return set, null
}

// stringValue is the JSON string q (with its quotes) unescaped: q's own
// bytes when it has no escapes (no allocation), else a decoded copy.
func stringValue(q []byte) ([]byte, bool) {
	inner := q[1 : len(q)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner, true
	}
	s, _, err := unquote(q)
	return []byte(s), err == nil
}
