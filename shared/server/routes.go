package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"github.com/llmgw/gateway/shared/request"
)

// methods is one path's handlers by method; a nil handler is a probe
// (/healthz, /readyz), which ServeHTTP answers itself, unlogged.
type methods map[string]handler

// routeTable lists the routes at fixed paths and Azure's deployment
// routes; the ones with an id in the path (/v1/responses/{id}…,
// /v1/models/{model}) and Azure's others are matched by prefix in route.
func (s *Server) routeTable() map[string]methods {
	t := map[string]methods{
		"/healthz":           {http.MethodGet: nil, http.MethodHead: nil},
		"/readyz":            {http.MethodGet: nil, http.MethodHead: nil},
		"/v1/models":         {http.MethodGet: withAPIKey(s.listModels)},
		"/v1/llmgw/spend":    {http.MethodGet: withAPIKey(s.spendView)},
		azureDeploymentRoute: {http.MethodPost: s.serveDeployment},
	}
	s.adminRoutes(t)
	// Every operation at its path; Anthropic's Messages API through its
	// own front (messages).
	for _, op := range request.Operations() {
		if op.Anthropic() {
			t[op.Path()] = methods{http.MethodPost: s.messages(op)}
		} else {
			t[op.Path()] = methods{http.MethodPost: s.proxy(op)}
		}
	}
	return t
}

// route picks r's handler (nil: the health check). Refusals that need
// no step (431, 404, 405, 426, a bad api-version) are handlers too, so
// that serve answers and logs them like every other error.
func (s *Server) route(w http.ResponseWriter, r *http.Request) handler {
	if s.MaxHeaderBytes > 0 && headerBytes(r) > s.MaxHeaderBytes {
		return s.headersTooLarge
	}
	if strings.HasPrefix(r.URL.Path, "/openai/") {
		return s.azure(w, r)
	}
	return s.dispatch(w, r, r.URL.Path)
}

// dispatch picks the handler of path (the request's own, or the OpenAI
// path an Azure v1 route stands for). A route that reads no body marks
// the connection for closing when one is still arriving (closeUnread).
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, path string) handler {
	rt, ok := s.routes[path]
	if rest, stored := strings.CutPrefix(path, "/v1/responses/"); stored && !ok {
		// A stored response's id; the operations below /v1/responses/
		// (compact, input_tokens) are in the table.
		return s.stored(w, r, rest)
	}
	if path == "/v1/responses" && isWebSocket(r) {
		return refuseWebSocket
	}
	if !ok && len(path) > len("/v1/models/") && path[:len("/v1/models/")] == "/v1/models/" {
		id := path[len("/v1/models/"):]
		rt, ok = methods{http.MethodGet: withAPIKey(func(w http.ResponseWriter, r *http.Request, ex *exchange) error { return s.getModel(w, r, ex, id) })}, true
	}
	if rest, admin := strings.CutPrefix(path, adminKeys+"/"); admin && !ok {
		rt, ok = s.adminKey(rest)
	}
	if !ok {
		return notFound
	}
	h, ok := rt[r.Method]
	if !ok {
		allowed := make([]string, 0, len(rt))
		for m := range rt {
			allowed = append(allowed, m)
		}
		sort.Strings(allowed)
		return s.methodNotAllowed(strings.Join(allowed, ", "))
	}
	if r.Method != http.MethodPost {
		closeUnread(w, r) // only the proxied POSTs read a body
	}
	return h
}

// headerBytes is about what the request line and headers took on the wire.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vv := range r.Header {
		for _, v := range vv {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// headersTooLarge answers 431, logged. net/http's own bound (twice
// max_header_bytes, see run.go) answers larger blocks before any handler,
// unlogged; this check keeps the configured limit exact and logged.
func (s *Server) headersTooLarge(w http.ResponseWriter, _ *http.Request, _ *exchange) error {
	w.Header()["Connection"] = []string{"close"}
	return headersTooLarge(s.MaxHeaderBytes)
}

// notFound answers a path the gateway does not serve, logged: a
// misconfigured client is what an operator needs to find.
func notFound(_ http.ResponseWriter, r *http.Request, _ *exchange) error {
	return unknownURL(r.Method, r.URL.Path)
}

// methodNotAllowed answers a wrong method, listing the allowed ones.
func (s *Server) methodNotAllowed(allow string) handler {
	return func(w http.ResponseWriter, r *http.Request, _ *exchange) error {
		w.Header().Set("Allow", allow)
		return methodNotAllowed(r.Method, r.URL.Path, allow)
	}
}

// ReadinessProbeHeader, sent with GET /healthz, asks /healthz the
// readiness question (/readyz's). Container Apps' readiness probe sends
// it: its probes must also pass on the placeholder image an app runs
// before azd deploy swaps in the gateway (which serves only /healthz and
// ignores the header), and azd deploy swaps the image, not the probes.
const ReadinessProbeHeader = "X-Llmgw-Probe"

// probe answers /healthz (liveness: the process serves) and /readyz
// (readiness: the issuer's keys are in, so a token can be checked; until
// then every request would get 503 auth_unavailable, and the platform's
// readiness probe keeps traffic on the replicas that are ready).
func (s *Server) probe(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	readiness := r.URL.Path == "/readyz" || r.Header.Get(ReadinessProbeHeader) == "readiness"
	if readiness && s.Ready != nil && !s.Ready.Ready() {
		notReady().write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}

// liveAnswer is /healthz's liveness answer as HTTP/1.1 writes it, for a
// probe answered by the listener at the cap (LivenessAtCap).
const liveAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}"

// LivenessAtCap is the listener's answer to a liveness probe that came
// beyond max_connections (listener.Options.Probe): head is what the
// refused connection sent first. A whole GET or HEAD /healthz without
// the readiness question (ReadinessProbeHeader) is answered 200, as
// probe answers it: the process serves, and a liveness probe that failed
// at the cap would restart a replica only busy. Anything else is refused
// (nil), a readiness question too: a replica at its cap is not ready for
// more.
func LivenessAtCap(head []byte) []byte {
	head, _, whole := bytes.Cut(head, []byte("\r\n\r\n"))
	if !whole {
		return nil // not the whole head: refused, as before
	}
	line, hdr, _ := bytes.Cut(head, []byte("\r\n"))
	method, target, ok := bytes.Cut(line, []byte(" "))
	if !ok || string(method) != http.MethodGet && string(method) != http.MethodHead {
		return nil
	}
	target, _, _ = bytes.Cut(target, []byte(" "))
	if path, _, _ := bytes.Cut(target, []byte("?")); string(path) != "/healthz" {
		return nil
	}
	for h := range bytes.SplitSeq(hdr, []byte("\r\n")) {
		name, value, _ := bytes.Cut(h, []byte(":"))
		if strings.EqualFold(string(name), ReadinessProbeHeader) && string(bytes.TrimSpace(value)) == "readiness" {
			return nil
		}
	}
	return []byte(liveAnswer)
}

// messages returns the handler for one of the Messages API's operations,
// which go through the one request path (serveProxy) like every
// operation; their errors take Anthropic's shapes (errors.go). The
// caller's JWT comes as Authorization: Bearer (Claude Code's
// ANTHROPIC_AUTH_TOKEN) or in x-api-key (ANTHROPIC_API_KEY, the
// Anthropic SDKs' apiKey); Authorization wins when both are sent. Neither
// reaches a backend (upstream.NewRequest forwards by allow-list).
func (s *Server) messages(op request.Operation) handler {
	return withAPIKey(func(w http.ResponseWriter, r *http.Request, ex *exchange) error {
		return s.serveProxy(w, r, ex, op, "")
	})
}

// withAPIKey is h reading the caller's JWT from x-api-key too, as the
// Messages routes do: the models routes accept every credential the routes
// beside them accept, so anthropic-sdk-go's Models.List, which sends only
// x-api-key, is not answered 401 about a bearer token.
func withAPIKey(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, ex *exchange) error {
		keyAsBearer(r, "X-Api-Key")
		return h(w, r, ex)
	}
}

// keyAsBearer moves a JWT sent in header (x-api-key, Azure's api-key)
// into Authorization, where authentication reads it; an Authorization
// the caller sent wins.
func keyAsBearer(r *http.Request, header string) {
	if r.Header.Get("Authorization") == "" {
		if key := r.Header.Get(header); key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
	}
}

// anthropicPath reports whether path is one of the Messages API's, so
// that a wrong method or an unknown path below it is answered in
// Anthropic's shape too.
func anthropicPath(path string) bool {
	return path == "/v1/messages" || len(path) > len("/v1/messages/") && path[:len("/v1/messages/")] == "/v1/messages/"
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelList is GET /v1/models's answer: OpenAI's list (object, data),
// which the SDKs decode, and Codex's model catalogue (models), which
// Codex fetches from a provider with an auth command (?client_version=…)
// and, without it, logs "failed to decode models response". Each client
// ignores the other's key (serde and the SDKs skip unknown fields).
//
// Codex's list is empty: an entry there overrides Codex's own metadata
// for that slug, its base instructions (the system prompt), shell and
// apply_patch tool types, truncation and context window included, which
// the gateway does not know for its models. With none, Codex keeps its
// bundled catalogue, as it did when the answer failed to decode.
type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
	Models []struct{}    `json:"models"`
}

// listModels answers GET /v1/models with the caller's tenant's models
// (modelList).
func (s *Server) listModels(w http.ResponseWriter, r *http.Request, ex *exchange) error {
	t, err := s.principalTenant(r, ex)
	if err != nil {
		return err
	}
	models := t.Models
	list := modelList{Object: "list", Data: make([]modelObject, 0, len(models)), Models: []struct{}{}}
	for _, m := range models {
		if ex.keyModels.Allows(m) {
			list.Data = append(list.Data, modelObject{ID: m, Object: "model", OwnedBy: s.Router.Pool(m).Name})
		}
	}
	return writeJSON(w, ex, list)
}

// getModel answers GET /v1/models/{model}.
func (s *Server) getModel(w http.ResponseWriter, r *http.Request, ex *exchange, id string) error {
	t, err := s.principalTenant(r, ex)
	if err != nil {
		return err
	}
	models := t.Models
	ex.model = id
	for _, m := range models {
		if m == id && ex.keyModels.Allows(m) {
			return writeJSON(w, ex, modelObject{ID: m, Object: "model", OwnedBy: s.Router.Pool(m).Name})
		}
	}
	return modelNotFound(id)
}

func writeJSON(w http.ResponseWriter, ex *exchange, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	ex.Status, ex.WroteHeader = http.StatusOK, true
	n, _ := w.Write(b)
	ex.Bytes = int64(n)
	return nil
}

// The Azure OpenAI front door: applications written for Azure OpenAI (the
// AzureOpenAI client classes, LangChain's AzureChatOpenAI) change only
// their endpoint and credential to come through the gateway.
//
//   - /openai/deployments/{deployment}/{chat/completions|completions|embeddings}
//     ?api-version=YYYY-MM-DD[-preview]: {deployment} is the gateway's public
//     model name; the body's model is set to it before the allow-list check.
//     api-version is checked, not forwarded: each backend gets its own.
//   - /openai/v1/…: OpenAI's shape, served as /v1/….
//   - /openai/responses[/{id}…] and /openai/models[/{id}] ?api-version=…:
//     what the AzureOpenAI class calls for the Responses API and models,
//     served as /v1/responses… and /v1/models….
//
// The caller's JWT may come as Authorization: Bearer or, on these routes,
// in the api-key header (the AzureOpenAI class with apiKey). Everything
// after that is the one request path.

// azure picks the handler of a path under /openai/.
func (s *Server) azure(w http.ResponseWriter, r *http.Request) handler {
	keyAsBearer(r, "Api-Key")
	path := r.URL.Path
	if rest, ok := strings.CutPrefix(path, "/openai/v1/"); ok {
		return s.dispatch(w, r, "/v1/"+rest)
	}
	if rest, ok := strings.CutPrefix(path, "/openai/"); ok && azureV1Like(rest) {
		// The AzureOpenAI class's Responses and models calls
		// (client.responses.create, models.list) have no deployment in the
		// path: the same routes as /v1/…, with an api-version.
		if aerr := checkAPIVersion(r.URL.Query().Get("api-version")); aerr != nil {
			return failWith(aerr)
		}
		return s.dispatch(w, r, "/v1/"+rest)
	}
	if _, _, ok := azureDeployment(path); !ok {
		return notFound
	}
	if r.Method != http.MethodPost {
		return s.methodNotAllowed("POST")
	}
	if aerr := checkAPIVersion(r.URL.Query().Get("api-version")); aerr != nil {
		return failWith(aerr)
	}
	return s.routes[azureDeploymentRoute][http.MethodPost]
}

// azureDeploymentRoute is the deployment routes' entry in the route table
// (dispatch never looks up a path under /openai/).
const azureDeploymentRoute = "/openai/deployments/{deployment}/{operation}"

// serveDeployment serves a deployment route azure checked: the one request
// path, with the body's model set to the deployment.
func (s *Server) serveDeployment(w http.ResponseWriter, r *http.Request, ex *exchange) error {
	deployment, op, _ := azureDeployment(r.URL.Path)
	return s.serveProxy(w, r, ex, op, deployment)
}

// azureDeployment reads a deployment route's path.
func azureDeployment(path string) (deployment string, op request.Operation, ok bool) {
	rest, ok := strings.CutPrefix(path, "/openai/deployments/")
	deployment, opPath, _ := strings.Cut(rest, "/")
	op, known := request.DeploymentOperation(opPath)
	return deployment, op, ok && deployment != "" && known
}

// failWith is the handler that fails with e.
func failWith(e *apiError) handler {
	return func(http.ResponseWriter, *http.Request, *exchange) error { return e }
}

// azureV1Like reports whether the path below /openai/ is one the Azure
// client classes call without a deployment: responses[/…] and models[/…].
func azureV1Like(rest string) bool {
	for _, p := range [...]string{"responses", "models"} {
		if rest == p || strings.HasPrefix(rest, p+"/") {
			return true
		}
	}
	return false
}

// checkAPIVersion accepts Azure's date-shaped versions: 2024-10-21,
// 2025-01-01-preview.
func checkAPIVersion(v string) *apiError {
	if v == "" {
		return apiVersionMissing()
	}
	date, suffix, _ := strings.Cut(v, "-preview")
	ok := len(date) == 10 && date[4] == '-' && date[7] == '-' && suffix == "" && !strings.HasSuffix(v, "-preview-preview")
	for i := 0; ok && i < len(date); i++ {
		if i != 4 && i != 7 && (date[i] < '0' || date[i] > '9') {
			ok = false
		}
	}
	if !ok {
		return apiVersionInvalid(v)
	}
	return nil
}
