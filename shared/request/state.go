package request

import (
	"bytes"
	"fmt"
	"strings"
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

// itemContent is the allow-list of Responses input items that may name an
// id: per item type (the variants of the API's input item union, checked
// against the SDK's by TestItemContentMatchesSDK), the members that carry
// the item itself. An item with an id passes only when its type is listed
// and each member listed is present with content (not "", null, [] or
// {}; "a|b": either); any other item with an id names a stored item the
// backend would resolve from the account every tenant shares, and is
// refused. A type listed with no members is never carried by its id. A
// reasoning item is carried only by its encrypted_content (its summary is
// not what the model reads back); a tool call by what it did and what it
// returned, not by its ids, name or status.
var itemContent = map[string][]string{
	"":        {"content"}, // an easy input message, or an item reference without its type
	"message": {"content"},
	// A compaction item (what compaction returns; Codex sends it back) is
	// carried only by its encrypted_content, the compacted window itself.
	"compaction":              {"encrypted_content"},
	"reasoning":               {"encrypted_content"},
	"file_search_call":        {"queries", "results"},
	"computer_call":           {"action|actions"},
	"computer_call_output":    {"output"},
	"web_search_call":         {"action"},
	"function_call":           {"arguments"},
	"function_call_output":    {"output"},
	"tool_search_call":        {"arguments"},
	"tool_search_output":      {"tools"},
	"additional_tools":        {"tools"},
	"configuration_update":    {"reasoning|text"},
	"image_generation_call":   {"result"},
	"code_interpreter_call":   {"code", "outputs"},
	"local_shell_call":        {"action"},
	"local_shell_call_output": {"output"},
	"shell_call":              {"action"},
	"shell_call_output":       {"output"},
	"apply_patch_call":        {"operation"},
	"apply_patch_call_output": {"output"},
	"mcp_list_tools":          {"tools"},
	"mcp_approval_request":    {"arguments"},
	"mcp_approval_response":   {"approve"},
	"mcp_call":                {"arguments", "output|error"},
	"custom_tool_call":        {"input"},
	"custom_tool_call_output": {"output"},
	"program":                 {"code"},
	"program_output":          {"result"},
	"compaction_trigger":      nil,
	"item_reference":          nil,
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
	members, ok := itemContent[string(typ)]
	if !ok || len(members) == 0 {
		return fmt.Sprintf("an input item of type %q with an 'id' is not served through the gateway: the gateway cannot tell it from a stored item's reference. Send the item without its 'id', or continue with 'previous_response_id'", typ)
	}
	for _, want := range members {
		if !carries(b, i, want) {
			return fmt.Sprintf("an input item with an 'id' and no '%s' (or an empty one) names a stored item, which is not served through the gateway: send the item with its '%s', or continue with 'previous_response_id'", want, want)
		}
	}
	return ""
}

// carries reports whether the object at b[i] has a member named by want
// ("a|b": either) with content at each occurrence: a key sent twice is
// read differently by first-wins and last-wins decoders, so a check takes
// the reading that refuses.
func carries(b []byte, i int, want string) bool {
	for want != "" {
		var name string
		name, want, _ = strings.Cut(want, "|")
		found, empty := false, false
		var kb [32]byte
		jsonscan.Members(b, i, func(raw []byte, v, end int) {
			if string(jsonscan.Key(raw, &kb)) == name {
				found = true
				empty = empty || !hasContent(b, v, end)
			}
		})
		if found && !empty {
			return true
		}
	}
	return false
}

// hasContent reports whether the JSON value b[v:end] says something: not
// null, "", [] or {}.
func hasContent(b []byte, v, end int) bool {
	switch b[v] {
	case 'n':
		return false
	case '"':
		return end-v > 2
	case '[', '{':
		return jsonscan.SkipWS(b, v+1) < end-1
	}
	return true
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
