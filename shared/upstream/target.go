// Package upstream owns the backends' wire formats (one file per kind) and
// their credentials: it turns a client request that passed the gateway's
// checks into the request one backend endpoint expects.
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Operation is the OpenAI API operation being proxied.
type Operation uint8

// Operations the gateway proxies.
const (
	ChatCompletions Operation = iota
	Completions
	Embeddings
)

// suffix is the operation's path below the API root.
func (o Operation) suffix() string {
	switch o {
	case Completions:
		return "/completions"
	case Embeddings:
		return "/embeddings"
	default:
		return "/chat/completions"
	}
}

// Credential adds a backend's own credentials to an outgoing request. It is
// the seam for keys and for Entra ID tokens.
type Credential interface {
	Apply(ctx context.Context, h http.Header) error
}

// ErrCredential wraps every failure to obtain backend credentials.
var ErrCredential = errors.New("backend credential failed")

// HeaderKey sets one header to a static secret (an api key).
type HeaderKey struct {
	Header string // "Authorization" values are sent as "Bearer <Value>"
	Value  string
}

// Apply implements Credential.
func (k HeaderKey) Apply(_ context.Context, h http.Header) error {
	if k.Header == "Authorization" {
		h["Authorization"] = []string{"Bearer " + k.Value}
	} else {
		h[k.Header] = []string{k.Value}
	}
	return nil
}

// wire is one backend kind's URL and body conventions.
type wire interface {
	// url returns the endpoint URL for op on a deployment/model.
	url(base *url.URL, op Operation, backendModel string) string
	// bodyModel is the model value to write into the body ("" = unchanged).
	bodyModel(backendModel string) string
}

// Target is one endpoint of a pool, ready to build requests.
type Target struct {
	Base *url.URL
	Cred Credential // nil = no credentials
	wire wire
	// Models maps public model names to the backend's names.
	Models map[string]string
}

// TargetSpec describes a Target for NewTarget.
type TargetSpec struct {
	Kind       string // openai | azure-openai | vllm
	URL        string
	APIVersion string // azure-openai
	AzureAPI   string // azure-openai: deployments | v1
	Models     map[string]string
	Cred       Credential
}

// NewTarget validates spec and builds the target.
func NewTarget(spec TargetSpec) (*Target, error) {
	u, err := url.Parse(strings.TrimRight(spec.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("endpoint url %q: %w", spec.URL, err)
	}
	t := &Target{Base: u, Cred: spec.Cred, Models: spec.Models}
	switch spec.Kind {
	case "openai":
		t.wire = openAI{}
	case "vllm":
		t.wire = vllm{}
	case "azure-openai":
		if spec.AzureAPI == "v1" {
			t.wire = azureV1{}
		} else {
			t.wire = azureDeployments{apiVersion: url.QueryEscape(spec.APIVersion)}
		}
	default:
		return nil, fmt.Errorf("unknown pool kind %q", spec.Kind)
	}
	return t, nil
}

// BackendModel is the backend's name for a public model.
func (t *Target) BackendModel(public string) string {
	if m := t.Models[public]; m != "" {
		return m
	}
	return public
}

// NewRequest builds the backend request. body is the already rewritten body
// (see Body.Rewrite with BodyModel). in is the client's request: only its
// end-to-end headers are copied, never its credentials or cookies.
func (t *Target) NewRequest(ctx context.Context, op Operation, public string, body []byte, in http.Header) (*http.Request, error) {
	backend := t.BackendModel(public)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.wire.url(t.Base, op, backend), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build backend request: %w", err)
	}
	copyRequestHeaders(req.Header, in)
	req.Header["Content-Type"] = []string{"application/json"}
	if t.Cred != nil {
		if err := t.Cred.Apply(ctx, req.Header); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCredential, err)
		}
	}
	return req, nil
}

// BodyModel is the model value the backend's body must carry for public
// ("" = leave the client's value).
func (t *Target) BodyModel(public string) string {
	return t.wire.bodyModel(t.BackendModel(public))
}

// dropRequest lists headers never forwarded to a backend: hop-by-hop headers
// (RFC 9110 §7.6.1), the caller's credentials and cookies, and those the
// transport must set itself (Accept-Encoding: a compressed SSE stream could
// not be scanned per event).
var dropRequest = map[string]bool{
	"Authorization": true, "Cookie": true, "Api-Key": true, "Proxy-Authorization": true,
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Host": true, "Content-Length": true,
	"Accept-Encoding": true, "Forwarded": true, "X-Forwarded-For": true,
}

func copyRequestHeaders(dst, src http.Header) {
	connection := src["Connection"]
	for k, vv := range src {
		if dropRequest[k] || listed(connection, k) {
			continue
		}
		dst[k] = vv
	}
}

// dropResponse lists backend response headers not relayed: hop-by-hop ones,
// those the server sets itself, and the backend's own rate-limit headers,
// which describe the gateway's backend key, not the caller's budget.
var dropResponse = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Set-Cookie": true,
	"X-Ratelimit-Limit-Requests": true, "X-Ratelimit-Remaining-Requests": true, "X-Ratelimit-Reset-Requests": true,
	"X-Ratelimit-Limit-Tokens": true, "X-Ratelimit-Remaining-Tokens": true, "X-Ratelimit-Reset-Tokens": true,
	"X-Request-Id": true,
}

// CopyResponseHeaders copies a backend's response headers that may reach the
// client.
func CopyResponseHeaders(dst, src http.Header) {
	connection := src["Connection"]
	for k, vv := range src {
		if dropResponse[k] || listed(connection, k) {
			continue
		}
		dst[k] = vv
	}
}

func listed(connection []string, key string) bool {
	for _, v := range connection {
		for _, f := range strings.Split(v, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(f)) == key {
				return true
			}
		}
	}
	return false
}
