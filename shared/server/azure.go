package server

import (
	"net/http"
	"strings"

	"github.com/llmgw/gateway/shared/upstream"
)

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

// azureOps maps a deployment route's operation suffix to the operation.
var azureOps = map[string]upstream.Operation{
	"chat/completions": upstream.ChatCompletions,
	"completions":      upstream.Completions,
	"embeddings":       upstream.Embeddings,
}

// azure picks the handler of a path under /openai/.
func (s *Server) azure(w http.ResponseWriter, r *http.Request) handler {
	if r.Header.Get("Authorization") == "" {
		if key := r.Header.Get("Api-Key"); key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
	}
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
	rest, ok := strings.CutPrefix(path, "/openai/deployments/")
	deployment, opPath, _ := strings.Cut(rest, "/")
	op, known := azureOps[opPath]
	if !ok || deployment == "" || !known {
		return s.notFound
	}
	if r.Method != http.MethodPost {
		return s.methodNotAllowed("POST")
	}
	if aerr := checkAPIVersion(r.URL.Query().Get("api-version")); aerr != nil {
		return failWith(aerr)
	}
	return func(w http.ResponseWriter, r *http.Request, rec *request) error {
		return s.serveProxy(w, r, rec, op, deployment)
	}
}

// failWith is the handler that fails with e.
func failWith(e *apiError) handler {
	return func(http.ResponseWriter, *http.Request, *request) error { return e }
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
