package request

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/llmgw/gateway/shared/jsonscan"
)

// Server-side features: what a backend runs, stores or connects to for a
// request beyond generating tokens, under the one account every tenant
// shares. Web search and fetch bill per use, code execution per container
// hour; file_search reads account-wide vector stores; MCP servers make
// the account connect to any URL a tenant names; file ids and containers
// name state any tenant of the account may have created. Each is off
// until the operator allows it per tenant (config tenants[].features),
// and then costed per use.

// Feature is one server-side feature a request body may ask for.
type Feature uint8

// The features, by the config name in featureNames.
const (
	WebSearch Feature = iota
	WebFetch
	CodeExecution
	FileSearch
	MCP
	ImageGeneration
	ComputerUse
	FileID
	Container
	// DataSources is Azure OpenAI's "On your data" (chat's
	// data_sources): the operator's resource retrieves from a search
	// index or store as itself, so any index its identity reads is open.
	DataSources
	// Priority is vLLM's priority: a lower value preempts every other
	// tenant's requests on the shared server.
	Priority
	// KVTransfer is vLLM's kv_transfer_params: remote hosts and block ids
	// of the shared servers' KV caches, read and written as named.
	KVTransfer
	numFeatures
)

var featureNames = [numFeatures]string{
	WebSearch:       "web_search",
	WebFetch:        "web_fetch",
	CodeExecution:   "code_execution",
	FileSearch:      "file_search",
	MCP:             "mcp",
	ImageGeneration: "image_generation",
	ComputerUse:     "computer_use",
	FileID:          "file_id",
	Container:       "container",
	DataSources:     "data_sources",
	Priority:        "priority",
	KVTransfer:      "kv_transfer_params",
}

// String is the feature's config name.
func (f Feature) String() string { return featureNames[f] }

// FeatureNames lists every feature's config name.
func FeatureNames() []string { return append([]string(nil), featureNames[:]...) }

// Features lists every feature, in table order (an array: no
// allocation on the request path).
func Features() [numFeatures]Feature {
	var fs [numFeatures]Feature
	for i := range fs {
		fs[i] = Feature(i)
	}
	return fs
}

// ParseFeature finds a feature by its config name.
func ParseFeature(name string) (Feature, bool) {
	for f, n := range featureNames {
		if n == name {
			return Feature(f), true
		}
	}
	return 0, false
}

// featureRule is the features column of the operations table: where an
// operation's body may ask for server-side features. Kept beside the
// scans that read it, one entry per operation.
type featureRule uint8

const (
	// featResponsesTools: tools[] are Responses API tools.
	featResponsesTools featureRule = 1 << iota
	// featChatTools: tools[] are Chat Completions tools (function,
	// custom) and web_search_options asks for search.
	featChatTools
	// featMessagesTools: tools[] are Anthropic tools, and mcp_servers and
	// container are top-level fields.
	featMessagesTools
	// featFileIDs: a file_id anywhere in the prompt (messages, input,
	// system) or in a server tool (code_interpreter's container.file_ids,
	// image_generation's input_image_mask.file_id) names a stored file.
	featFileIDs
	// featDeclared: every row has it. The fields that reach the shared
	// backend's or the account's state (data_sources, priority,
	// kv_transfer_params) are features on every row, whatever its API
	// documents: a backend that reads one where its API does not
	// (Azure, vLLM) must not be reached by it.
	featDeclared
)

// Uses is what a body asks for: per feature, where it first asked (its
// param; "" = not asked) and the most uses it may bill when the body
// bounds them (max_uses, max_tool_calls; 0 = unbounded).
type Uses struct {
	Param   [numFeatures]string
	MaxUses [numFeatures]int64
	// Unbounded is, per feature whose tools bound their own uses
	// (Anthropic's web_search and web_fetch: max_uses), the param of the
	// first such tool that bounds none ("" = every one does).
	Unbounded [numFeatures]string
	// MaxToolCalls is the Responses API's max_tool_calls: a bound on
	// every built-in tool's calls together (0 = none).
	MaxToolCalls int64
	// Unknown is the param of a tool whose type the gateway does not know:
	// it may be a server tool, so it is refused (fails closed).
	Unknown string
}

// Asked reports whether the body asks for f.
func (u *Uses) Asked(f Feature) bool { return u.Param[f] != "" }

// Bound is the most uses of f the body allows (max_uses, else
// max_tool_calls), or 0 when it bounds none.
func (u *Uses) Bound(f Feature) int64 {
	if u.MaxUses[f] > 0 {
		return u.MaxUses[f]
	}
	return u.MaxToolCalls
}

// Any reports whether the body asks for any feature or names an unknown
// tool.
func (u *Uses) Any() bool {
	if u.Unknown != "" {
		return true
	}
	for _, p := range u.Param {
		if p != "" {
			return true
		}
	}
	return false
}

func (u *Uses) ask(f Feature, param string, maxUses int64) {
	if u.Param[f] == "" {
		u.Param[f] = param
	}
	if maxUses > 0 {
		u.MaxUses[f] += maxUses
	}
}

// responsesTools maps a Responses API tool type to its feature; function
// and custom tools, and the client-run shells and patches, are the
// caller's own and pass.
var responsesTools = map[string]int{
	"function": -1, "custom": -1, "local_shell": -1, "shell": -1, "apply_patch": -1,
	"web_search": int(WebSearch), "web_search_preview": int(WebSearch),
	"web_search_2025_08_26": int(WebSearch), "web_search_preview_2025_03_11": int(WebSearch),
	"file_search":          int(FileSearch),
	"code_interpreter":     int(CodeExecution),
	"mcp":                  int(MCP),
	"image_generation":     int(ImageGeneration),
	"computer_use_preview": int(ComputerUse), "computer": int(ComputerUse),
}

// messagesToolPrefixes maps an Anthropic tool type's family (its type
// without the _YYYYMMDD version) to its feature; a tool without a type
// (or "custom") is the caller's own, and so are bash, text_editor and
// memory, which the client runs.
var messagesToolPrefixes = map[string]int{
	"custom": -1, "bash": -1, "text_editor": -1, "memory": -1,
	"web_search": int(WebSearch), "web_fetch": int(WebFetch),
	"code_execution": int(CodeExecution), "computer": int(ComputerUse),
}

// messagesFamily is an Anthropic tool type without its date suffix
// ("web_search_20250305" → "web_search").
func messagesFamily(t []byte) []byte {
	i := bytes.LastIndexByte(t, '_')
	if i < 0 || len(t)-i-1 != 8 {
		return t
	}
	for _, c := range t[i+1:] {
		if c < '0' || c > '9' {
			return t
		}
	}
	return t[:i]
}

// FeaturesOf reads which server-side features body b (parsed by
// ParseBody, which reads max_tool_calls once) of op asks for. Every
// occurrence of a key that asks for a feature is read, so a duplicate
// cannot hide a feature from a first-wins or last-wins decoder; a key a
// tool is billed or recognised by (type, max_uses, container, a
// namespace's tools) is read once, as ParseBody reads model: a duplicate
// or a variant spelling is refused (a *KeyError; a max_uses that is not a
// count, an *IntError), its Param naming the tool ("tools[0].max_uses").
func FeaturesOf(b []byte, op Operation) (Uses, error) {
	var u Uses
	rule := operations[op].features
	i := jsonscan.SkipWS(b, 0)
	if rule == 0 || i >= len(b) || b[i] != '{' {
		return u, nil
	}
	var kb [32]byte
	var err error
	jsonscan.Members(b, i, func(raw []byte, v, end int) {
		if err != nil {
			return
		}
		// Params are constants: a key bound to a variable would be a
		// string allocated per member.
		switch string(jsonscan.Key(raw, &kb)) {
		case "tools":
			if b[v] == '[' && rule&(featResponsesTools|featChatTools|featMessagesTools) != 0 {
				err = tools(&u, b, v, rule, "")
			}
		case "web_search_options":
			if rule&featChatTools != 0 && b[v] != 'n' {
				u.ask(WebSearch, "web_search_options", 0)
			}
		case "max_tool_calls":
			if rule&featResponsesTools != 0 {
				u.MaxToolCalls, err = toolCalls(b[v:end])
			}
		case "mcp_servers":
			if rule&featMessagesTools != 0 && b[v] == '[' && jsonscan.SkipWS(b, v+1) < end-1 {
				u.ask(MCP, "mcp_servers", 0)
			}
		case "container":
			if rule&featMessagesTools != 0 && b[v] != 'n' {
				u.ask(Container, "container", 0)
			}
		case "messages":
			u.fileIDs(rule, b, v, end, "messages.file_id")
		case "input":
			u.fileIDs(rule, b, v, end, "input.file_id")
			if rule&featResponsesTools != 0 && b[v] == '[' {
				// Codex sends tools in an input item too (additional_tools):
				// any item's tools are checked as the body's are.
				err = inputTools(&u, b, v, rule)
			}
		case "system":
			u.fileIDs(rule, b, v, end, "system.file_id")
		case "data_sources":
			if b[v] != 'n' {
				u.ask(DataSources, "data_sources", 0)
			}
		case "priority":
			if b[v] != 'n' {
				u.ask(Priority, "priority", 0)
			}
		case "kv_transfer_params":
			if b[v] != 'n' {
				u.ask(KVTransfer, "kv_transfer_params", 0)
			}
		}
	})
	return u, err
}

// inputTools checks the tools arrays of the input items at b[v].
func inputTools(u *Uses, b []byte, v int, rule featureRule) error {
	var kb [32]byte
	var err error
	for i := jsonscan.SkipWS(b, v+1); i < len(b) && b[i] != ']' && err == nil; {
		e := jsonscan.SkipValue(b, i)
		if b[i] == '{' {
			jsonscan.Members(b, i, func(raw []byte, tv, _ int) {
				if err == nil && string(jsonscan.Key(raw, &kb)) == "tools" && b[tv] == '[' {
					err = tools(u, b, tv, rule, "input.")
				}
			})
		}
		i = jsonscan.SkipWS(b, e)
		if i < len(b) && b[i] == ',' {
			i = jsonscan.SkipWS(b, i+1)
		}
	}
	return err
}

// tools reads the tools array at b[v]; prefix is what its params are
// named under ("" for the body's own tools).
func tools(u *Uses, b []byte, v int, rule featureRule, prefix string) error {
	n := 0
	for i := jsonscan.SkipWS(b, v+1); i < len(b) && b[i] != ']'; n++ {
		e := jsonscan.SkipValue(b, i)
		if b[i] == '{' {
			if err := tool(u, b, i, n, rule, prefix); err != nil {
				return err
			}
		}
		i = jsonscan.SkipWS(b, e)
		if i < len(b) && b[i] == ',' {
			i = jsonscan.SkipWS(b, i+1)
		}
	}
	return nil
}

// tool reads one tool object at b[i], tools[n]: each key it decides on
// once (classify, as ParseBody's).
func tool(u *Uses, b []byte, i, n int, rule featureRule, prefix string) error {
	var typ []byte
	typed := false
	var maxUses int64
	container := false
	nested := -1 // a namespace's tools array
	var seen [len(guarded)]bool
	err := eachMember(b, i, func(raw []byte, s span) error {
		k, err := classify(raw, toolKeys, toolFolded, &seen)
		if err != nil {
			return err
		}
		v, end := s.start, s.end
		switch k {
		case keyTools:
			if b[v] == '[' {
				nested = v
			}
		case keyType:
			if b[v] == '"' {
				if t, ok := stringValue(b[v:end]); ok {
					typ, typed = t, true
				}
			} else if b[v] != 'n' {
				typ, typed = []byte{0}, true // not a string: no tool the gateway knows
			}
		case keyMaxUses:
			maxUses, err = count(b[v:end], keyNames[k])
		case keyContainer:
			container = b[v] == '"' // an existing container's id
		}
		return err
	})
	if err != nil {
		return within(err, fmt.Sprintf("%stools[%d]", prefix, n))
	}
	f := -1
	known := true
	switch {
	case rule&featMessagesTools != 0:
		if typed {
			f, known = messagesToolPrefixes[string(messagesFamily(typ))]
		}
	case rule&featResponsesTools != 0 && string(typ) == "namespace" && nested >= 0:
		// A namespace (Codex 0.171 groups its tools so) is as its tools
		// are: each is checked, named by its place in the namespace.
		if err := tools(u, b, nested, rule, prefix); err != nil {
			return err
		}
	case rule&featResponsesTools != 0:
		f, known = responsesTools[string(typ)]
	case rule&featChatTools != 0:
		known = string(typ) == "function" || string(typ) == "custom"
	}
	// The param is built only for a tool that asks for something: most
	// tools are the caller's own functions.
	switch {
	case !known:
		if u.Unknown == "" {
			u.Unknown = fmt.Sprintf("%stools[%d].type", prefix, n)
		}
	case f >= 0:
		if err := serverToolMembers(b, i, n, rule, typ, prefix); err != nil {
			return err
		}
		param := fmt.Sprintf("%stools[%d]", prefix, n)
		u.ask(Feature(f), param, maxUses)
		if maxUses == 0 && rule&featMessagesTools != 0 && (Feature(f) == WebSearch || Feature(f) == WebFetch) && u.Unbounded[f] == "" {
			u.Unbounded[f] = param + ".max_uses"
		}
		// A server tool's file ids (code_interpreter's container.file_ids,
		// image_generation's input_image_mask.file_id) name stored files
		// as the prompt's do. Only a server tool's: a function's schema
		// may well name a property file_id.
		if !u.Asked(FileID) {
			u.fileIDs(rule, b, i, jsonscan.SkipValue(b, i), param+".file_id")
		}
	}
	if container {
		u.ask(Container, fmt.Sprintf("%stools[%d].container", prefix, n), 0)
	}
	return nil
}

// within names a refused key's param (a *KeyError's or *IntError's) as a
// member of the object at param.
func within(err error, param string) error {
	var ke *KeyError
	var ie *IntError
	switch {
	case errors.As(err, &ke):
		ke.Param = param + "." + ke.Param
	case errors.As(err, &ie):
		ie.Param = param + "." + ie.Param
	}
	return err
}

// fileIDs asks for FileID at param when the value b[v:end] has a member
// named file_id or file_ids (not null, not an empty list) at any depth
// and rule reads file ids.
func (u *Uses) fileIDs(rule featureRule, b []byte, v, end int, param string) {
	if rule&featFileIDs == 0 {
		return
	}
	var kb [32]byte
	for i := v; i < end; i++ {
		if b[i] != '"' {
			continue
		}
		e := jsonscan.SkipString(b, i)
		if j := jsonscan.SkipWS(b, e); j < end && b[j] == ':' && fileIDKey(jsonscan.Key(b[i+1:e-1], &kb)) && named(b, jsonscan.SkipWS(b, j+1)) {
			u.ask(FileID, param, 0)
			return
		}
		i = e - 1
	}
}

func fileIDKey(k []byte) bool { return string(k) == "file_id" || string(k) == "file_ids" }

// named reports whether the value at b[v] names something: not null and
// not an empty list.
func named(b []byte, v int) bool {
	switch b[v] {
	case 'n':
		return false
	case '[':
		return b[jsonscan.SkipWS(b, v+1)] != ']'
	}
	return true
}
