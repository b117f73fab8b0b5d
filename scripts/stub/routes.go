package stub

import (
	"net/http"
	"strings"
)

type kind uint8

const (
	kindChat kind = iota
	kindCompletion
	kindEmbeddings
	kindModels
	kindHealth
	kindResponses          // POST responses: create
	kindResponse           // GET or DELETE responses/{id}
	kindResponseCancel     // POST responses/{id}/cancel
	kindResponseInputItems // GET responses/{id}/input_items
	kindMessages           // POST messages: Anthropic's Messages API
	kindCountTokens        // POST messages/count_tokens
	kindResponsesCompact   // POST responses/compact
	kindResponsesInput     // POST responses/input_tokens
)

// route is what a path asks for.
type route struct {
	kind       kind
	allow      string // the methods it answers, as the Allow header lists them
	azure      bool   // an /openai/... path: api-key auth is accepted
	deployment string // the {deployment} of /openai/deployments/{deployment}/...
	id         string // the {id} of responses/{id}...
	anthropic  bool   // a Messages API path: x-api-key auth, Anthropic's errors
}

// allows reports whether method is one of rt.allow.
func (rt route) allows(method string) bool {
	for m := range strings.SplitSeq(rt.allow, ", ") {
		if m == method {
			return true
		}
	}
	return false
}

// parseRoute maps every path shape the stub answers:
//
//	POST /v1/chat/completions                                 OpenAI, vLLM
//	POST /v1/completions
//	POST /v1/embeddings
//	GET  /v1/models
//	POST /openai/deployments/{deployment}/chat/completions    Azure OpenAI (api-version required)
//	POST /openai/deployments/{deployment}/completions
//	POST /openai/deployments/{deployment}/embeddings
//	POST /openai/v1/chat/completions                          Azure OpenAI v1 API
//	POST /openai/v1/completions
//	POST /openai/v1/embeddings
//	GET  /openai/v1/models
//	POST /v1/responses                                        OpenAI Responses API
//	GET  /v1/responses/{id}                                   (DELETE too)
//	POST /v1/responses/{id}/cancel
//	GET  /v1/responses/{id}/input_items
//	POST /v1/responses/compact                                a conversation compacted
//	POST /v1/responses/input_tokens                           a prompt counted
//	POST /openai/v1/responses                                 Azure OpenAI v1 API, as /v1/responses
//	GET  /openai/v1/responses/{id}                            (DELETE too)
//	POST /openai/v1/responses/{id}/cancel
//	GET  /openai/v1/responses/{id}/input_items
//	POST /v1/messages                                         Anthropic's Messages API (vLLM's too)
//	POST /v1/messages/count_tokens
//	POST /anthropic/v1/messages                               Claude in Microsoft Foundry
//	POST /anthropic/v1/messages/count_tokens
//	GET  /health                                              vLLM's health check
func parseRoute(path string) (route, bool) {
	if path == "/health" {
		return route{kind: kindHealth, allow: http.MethodGet}, true
	}
	switch strings.TrimPrefix(path, "/anthropic") {
	case "/v1/messages":
		return route{kind: kindMessages, allow: http.MethodPost, anthropic: true}, true
	case "/v1/messages/count_tokens":
		return route{kind: kindCountTokens, allow: http.MethodPost, anthropic: true}, true
	}
	var rt route
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		rt.azure = true
		if rest, ok = strings.CutPrefix(path, "/openai/v1/"); !ok {
			rest, ok = strings.CutPrefix(path, "/openai/deployments/")
			if !ok {
				return route{}, false
			}
			dep, op, found := strings.Cut(rest, "/")
			if !found || dep == "" || op == "models" {
				return route{}, false
			}
			rt.deployment, rest = dep, op
		}
	}
	rt.allow = http.MethodPost
	switch rest {
	case "chat/completions":
		rt.kind = kindChat
	case "completions":
		rt.kind = kindCompletion
	case "embeddings":
		rt.kind = kindEmbeddings
	case "models":
		rt.kind, rt.allow = kindModels, http.MethodGet
	case "responses", "responses/compact", "responses/input_tokens":
		if rt.deployment != "" {
			return route{}, false
		}
		rt.kind = map[string]kind{"responses": kindResponses, "responses/compact": kindResponsesCompact, "responses/input_tokens": kindResponsesInput}[rest]
	default:
		return parseResponseRoute(rt, rest)
	}
	return rt, true
}

// parseResponseRoute maps responses/{id}, responses/{id}/cancel and
// responses/{id}/input_items, which only the OpenAI and Azure v1 paths have.
func parseResponseRoute(rt route, rest string) (route, bool) {
	rest, ok := strings.CutPrefix(rest, "responses/")
	if !ok || rt.deployment != "" {
		return route{}, false
	}
	id, op, slash := strings.Cut(rest, "/")
	if id == "" || slash && op == "" {
		return route{}, false
	}
	rt.id = id
	switch op {
	case "":
		rt.kind, rt.allow = kindResponse, http.MethodGet+", "+http.MethodDelete
	case "cancel":
		rt.kind = kindResponseCancel
	case "input_items":
		rt.kind, rt.allow = kindResponseInputItems, http.MethodGet
	default:
		return route{}, false
	}
	return rt, true
}
