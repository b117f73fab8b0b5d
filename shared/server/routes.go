package server

import (
	"net/http"

	"github.com/llmgw/gateway/shared/upstream"
)

// route_ is one path's handlers by method.
type route_ map[string]http.HandlerFunc

// routeTable lists every route the gateway serves.
func (s *Server) routeTable() map[string]route_ {
	return map[string]route_{
		"/healthz":             {http.MethodGet: s.healthz, http.MethodHead: s.healthz},
		"/v1/chat/completions": {http.MethodPost: s.proxy(upstream.ChatCompletions)},
		"/v1/completions":      {http.MethodPost: s.proxy(upstream.Completions)},
		"/v1/embeddings":       {http.MethodPost: s.proxy(upstream.Embeddings)},
		"/v1/models":           {http.MethodGet: s.listModels},
	}
}

// ServeHTTP dispatches by exact path, so unknown paths (404) and wrong
// methods (405) get OpenAI's error JSON rather than ServeMux's plain text.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every response carries the gateway's own request id; a caller-supplied
	// one is never trusted into the log.
	w.Header()["X-Request-Id"] = []string{newRequestID()}
	path := r.URL.Path
	rt, ok := s.routes[path]
	if !ok && len(path) > len("/v1/models/") && path[:len("/v1/models/")] == "/v1/models/" {
		rt, ok = route_{http.MethodGet: s.getModel}, true
	}
	if !ok {
		invalidRequest(http.StatusNotFound, "unknown_url", "",
			"Unknown request URL: "+r.Method+" "+path+". Please check the URL for typos.").write(w)
		return
	}
	h, ok := rt[r.Method]
	if !ok {
		allow := ""
		for m := range rt {
			if allow != "" {
				allow += ", "
			}
			allow += m
		}
		w.Header().Set("Allow", allow)
		invalidRequest(http.StatusMethodNotAllowed, "method_not_allowed", "",
			"Method "+r.Method+" is not allowed on "+path+"; use "+allow+".").write(w)
		return
	}
	h(w, r)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}
