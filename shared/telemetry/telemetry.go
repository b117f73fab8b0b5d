// Package telemetry is what the gateway reports about each request and
// each backend attempt, as plain data: the server fills a Request when a
// request ends and an Attempt for each backend try. It imports nothing of
// OpenTelemetry; otlp/ beside it exports these with the OpenTelemetry SDK
// (OTLP over HTTP), and is the only package that imports the SDK.
//
// Nothing here holds a prompt, a completion, a token or a key: only names
// from config (tenant, model, pool), counts and times.
package telemetry

import (
	"net"
	"strconv"
	"time"
)

// Request is one request as it ended.
type Request struct {
	// Route is the route's template (/v1/chat/completions,
	// /v1/responses/{id}, /openai/deployments/{deployment}/…), never the raw
	// path: a path is the caller's to choose, a route is bounded.
	Route  string
	Method string
	// Operation is gen_ai.operation.name (chat, text_completion,
	// embeddings); "" for a route that calls no model.
	Operation string
	// Tenant and TenantName come from config (the tenant table); "" for a
	// caller refused before its tenant was known, "unknown" for a valid
	// token whose tenant the table does not have (never the claim).
	Tenant, TenantName string
	// Model is the public model the caller asked for, set only when a
	// pool serves it (a refused model name is the caller's to choose, so
	// it is never an attribute); ResponseModel is the name the backend
	// was sent (after config's rename).
	Model, ResponseModel string
	Pool                 string
	// Provider is gen_ai.provider.name of the backend that answered (or
	// was tried last): openai, azure.ai.openai or vllm.
	Provider string
	// ServerAddress and ServerPort are the backend's host and port.
	ServerAddress string
	ServerPort    int
	Stream        bool
	Status        int
	// ErrorType is the gateway's error code (the access log's outcome)
	// when the request failed; "" on success.
	ErrorType string
	// Start and End bound the request; FirstEvent is when a stream's
	// first event was written to the client (zero: none).
	Start, End, FirstEvent time.Time
	// InputTokens and OutputTokens are the usage the backend reported;
	// Usage says it did.
	InputTokens, OutputTokens int64
	Usage                     bool
	Attempts                  int
	Keepalives                int
	// Limit is the request limiter's decision: "" (not reached), allowed,
	// refused, degraded (the store failed and the failure policy let the
	// request through) or unavailable (refused because the store failed).
	Limit string
	// Budget is the token budget's decision: "" (no budget), reserved,
	// refused, degraded or unavailable; Reserved and Charged its tokens.
	Budget            string
	Reserved, Charged int64
	// Cost is what a request of a tenant with a spend limit cost, in
	// micro-units of Currency, at the service tier Tier; 0 without a
	// spend limit or a confirmed charge.
	Cost           int64
	Currency, Tier string
}

// Limiter and budget decisions (Request.Limit, Request.Budget).
const (
	Allowed     = "allowed"
	Reserved    = "reserved"
	Refused     = "refused"
	Degraded    = "degraded"
	Unavailable = "unavailable"
)

// Attempt is one backend try, as it starts.
type Attempt struct {
	Operation, Model, ResponseModel string
	Provider                        string
	ServerAddress                   string
	ServerPort                      int
	Tenant                          string
	// Priority is the endpoint's priority in its pool (0 first).
	Priority int
}

// Result is how a backend attempt ended: the backend's status (0: none),
// the gateway's error code for a failure ("" on success), whether
// another endpoint is tried next (a failover), and whether that endpoint
// is of another priority (a spill: PTU to pay-as-you-go).
type Result struct {
	Status    int
	ErrorType string
	Failover  bool
	Spill     bool
}

// HostPort splits a backend URL's host into server.address and
// server.port (the scheme's default when the URL names none).
func HostPort(scheme, host string) (string, int) {
	h, p, err := net.SplitHostPort(host)
	if err != nil {
		if scheme == "https" {
			return host, 443
		}
		return host, 80
	}
	n, _ := strconv.Atoi(p)
	return h, n
}
