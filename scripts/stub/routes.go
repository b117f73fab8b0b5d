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
)

// route is what a path asks for.
type route struct {
	kind       kind
	method     string
	azure      bool   // an /openai/... path: api-key auth is accepted
	deployment string // the {deployment} of /openai/deployments/{deployment}/...
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
//	GET  /health                                              vLLM's health check
func parseRoute(path string) (route, bool) {
	if path == "/health" {
		return route{kind: kindHealth, method: http.MethodGet}, true
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
	rt.method = http.MethodPost
	switch rest {
	case "chat/completions":
		rt.kind = kindChat
	case "completions":
		rt.kind = kindCompletion
	case "embeddings":
		rt.kind = kindEmbeddings
	case "models":
		rt.kind, rt.method = kindModels, http.MethodGet
	default:
		return route{}, false
	}
	return rt, true
}
