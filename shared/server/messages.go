package server

// Anthropic's Messages API in front (issue 26): POST /v1/messages and
// POST /v1/messages/count_tokens go through the one request path
// (serveProxy) like every operation; what differs is said here: the
// caller's JWT may come in x-api-key, and the gateway's own errors take
// Anthropic's shapes, as a JSON body and as a stream's error event.

import (
	"encoding/json"
	"net/http"

	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
)

// messages returns the handler for one of the Messages API's operations.
// The caller's JWT comes as Authorization: Bearer (Claude Code's
// ANTHROPIC_AUTH_TOKEN) or in x-api-key (ANTHROPIC_API_KEY, the
// Anthropic SDKs' apiKey); Authorization wins when both are sent. Neither
// reaches a backend (upstream.NewRequest forwards by allow-list).
func (s *Server) messages(op request.Operation) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			if key := r.Header.Get("X-Api-Key"); key != "" {
				r.Header.Set("Authorization", "Bearer "+key)
			}
		}
		s.serveProxy(w, r, op, "")
	}
}

// anthropicType is the Messages API's error type for an HTTP status, as
// Anthropic's clients read it (their error classes follow the status).
func anthropicType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// anthropicError is the Messages API's error body.
type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

// anthropicJSON renders e in the Messages API's shape:
// {"type":"error","error":{"type":…,"message":…},"request_id":…}. The
// gateway's own code (e.Code) is in the access log's outcome.
func (e *apiError) anthropicJSON(requestID string) []byte {
	var a anthropicError
	a.Type, a.Error.Type, a.Error.Message, a.RequestID = "error", anthropicType(e.Status), e.Message, requestID
	b, _ := json.Marshal(a) // plain strings always marshal
	return b
}

// writeAs sends e as the whole response in the shape of rec's API:
// Anthropic's on the Messages API's routes, else OpenAI's. Status,
// Retry-After and WWW-Authenticate are the same in both.
func (e *apiError) writeAs(w http.ResponseWriter, rec *record) {
	if !rec.op.Anthropic() {
		e.write(w)
		return
	}
	e.writeBody(w, e.anthropicJSON(rec.id))
}

// appendAnthropicStreamError appends the Messages API's error event, which
// ends a stream the gateway cannot finish: event: error, data
// {"type":"error","error":{…}}.
func appendAnthropicStreamError(dst []byte, rec *record, e *apiError) []byte {
	dst = append(dst, "event: error\n"...)
	return sse.AppendErrorEvent(dst, e.anthropicJSON(rec.id))
}

// anthropicPath reports whether path is one of the Messages API's, so
// that a wrong method or an unknown path below it is answered in
// Anthropic's shape too.
func anthropicPath(path string) bool {
	return path == "/v1/messages" || len(path) > len("/v1/messages/") && path[:len("/v1/messages/")] == "/v1/messages/"
}
