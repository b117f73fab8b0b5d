// Package upstream owns the backends' wire formats (one file per kind) and
// their credentials: it turns a client request that passed the gateway's
// checks into the request one backend endpoint expects.
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Operation is the API operation being proxied: OpenAI's, or Anthropic's
// Messages API (issue 26).
type Operation uint8

// Operations the gateway proxies.
const (
	ChatCompletions Operation = iota
	Completions
	Embeddings
	Responses
	// Messages is Anthropic's POST /v1/messages.
	Messages
	// CountTokens is Anthropic's POST /v1/messages/count_tokens: a prompt
	// counted, nothing generated.
	CountTokens
)

// Anthropic reports whether op is one of Anthropic's Messages API, whose
// errors and stream events have Anthropic's shapes.
func (o Operation) Anthropic() bool { return o == Messages || o == CountTokens }

// HasCap reports whether op's request has the output-cap field f: chat
// reads max_completion_tokens and its deprecated max_tokens, legacy
// completions max_tokens, the Responses API max_output_tokens, the
// Messages API max_tokens (which it requires), and embeddings and
// count_tokens none. A cap field an operation does not have is read by some
// backends and ignored by others (vLLM's chat ignores max_output_tokens),
// so the gateway refuses it rather than trust it (issue 20).
func (o Operation) HasCap(f CapField) bool {
	switch o {
	case ChatCompletions:
		return f == MaxTokens || f == MaxCompletionTokens
	case Completions, Messages:
		return f == MaxTokens
	case Responses:
		return f == MaxOutputTokens
	}
	return false
}

// suffix is the operation's path below the API root.
func (o Operation) suffix() string {
	switch o {
	case Completions:
		return "/completions"
	case Embeddings:
		return "/embeddings"
	case Responses:
		return "/responses"
	case Messages:
		return "/messages"
	case CountTokens:
		return "/messages/count_tokens"
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
	// keyHeader is the header an api key goes in ("Authorization" is sent
	// as a bearer token).
	keyHeader() string
}

// Kinds lists the backend kinds NewTarget builds; config validation takes
// it from here, so a new kind is its wire file plus its case in NewTarget.
func Kinds() []string { return []string{"openai", "azure-openai", "vllm", "anthropic"} }

// Target is one endpoint of a pool, ready to build requests.
type Target struct {
	Base *url.URL
	Cred Credential // nil = no credentials
	// Kind is the backend kind from config (openai, azure-openai, vllm).
	Kind string
	wire wire
	// Models maps public model names to the backend's names.
	Models map[string]string
	// fixed holds the headers from config sent on every request
	// (OpenAI-Organization, OpenAI-Project); forward the caller headers the
	// operator allowed beyond Accept.
	fixed   http.Header
	forward []string
}

// TargetSpec describes a Target for NewTarget.
type TargetSpec struct {
	Kind       string // openai | azure-openai | vllm | anthropic
	URL        string
	APIVersion string // azure-openai
	AzureAPI   string // azure-openai: deployments | v1
	Models     map[string]string
	// Cred is the endpoint's credential; when nil and APIKey is set, the key
	// is sent the way the kind takes it (bearer, or Azure's api-key).
	Cred   Credential
	APIKey string
	// Organization and Project (openai kind) are sent as OpenAI-Organization
	// and OpenAI-Project: which account and project the gateway's key acts
	// for is the operator's choice, so the caller's values never pass. The
	// config checks them (kind, a valid header value).
	Organization string
	Project      string
	// Forward names caller headers forwarded as sent, beyond the built-in
	// allow-list (see NewRequest). Default none. Names that carry
	// credentials, pick an account, an encoding or a framing, or claim an
	// identity are refused (see neverForward).
	Forward []string
}

// NewTarget validates spec and builds the target.
func NewTarget(spec TargetSpec) (*Target, error) {
	u, err := url.Parse(strings.TrimRight(spec.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("endpoint url %q: %w", spec.URL, err)
	}
	t := &Target{Base: u, Cred: spec.Cred, Kind: spec.Kind, Models: spec.Models}
	switch spec.Kind {
	case "openai":
		t.wire = openAI{}
	case "vllm":
		t.wire = vllm{}
	case "anthropic":
		t.wire = anthropic{}
	case "azure-openai":
		if spec.AzureAPI == "v1" {
			t.wire = azureV1{}
		} else {
			t.wire = azureDeployments{apiVersion: url.QueryEscape(spec.APIVersion)}
		}
	default:
		return nil, fmt.Errorf("unknown pool kind %q", spec.Kind)
	}
	if t.Cred == nil && spec.APIKey != "" {
		t.Cred = HeaderKey{Header: t.wire.keyHeader(), Value: spec.APIKey}
	}
	if spec.Organization != "" {
		t.fixed = http.Header{"Openai-Organization": {spec.Organization}}
	}
	if spec.Project != "" {
		if t.fixed == nil {
			t.fixed = http.Header{}
		}
		t.fixed["Openai-Project"] = []string{spec.Project}
	}
	for _, name := range spec.Forward {
		if err := CheckForward(name); err != nil {
			return nil, fmt.Errorf("forward: %w", err)
		}
		if k := http.CanonicalHeaderKey(name); k != "Accept" {
			t.forward = append(t.forward, k)
		}
	}
	return t, nil
}

// CapField is the output-cap field op's body carries on this endpoint
// when the gateway must add one (token budgets): max_output_tokens for the
// Responses API; max_tokens for legacy completions, for vLLM (which
// ignores fields it does not know, and knows max_completion_tokens only
// since 0.6) and for Azure api-versions before 2024-09-01; else
// max_completion_tokens (OpenAI's reasoning models refuse max_tokens).
// The Messages API reads max_tokens.
func (t *Target) CapField(op Operation) CapField {
	switch op {
	case Responses:
		return MaxOutputTokens
	case Completions, Messages, CountTokens:
		return MaxTokens
	}
	switch w := t.wire.(type) {
	case vllm:
		return MaxTokens
	case azureDeployments:
		if v := w.apiVersion; len(v) >= 10 && v[:10] < "2024-09-01" {
			return MaxTokens
		}
	}
	return MaxCompletionTokens
}

// BackendModel is the backend's name for a public model.
func (t *Target) BackendModel(public string) string {
	if m := t.Models[public]; m != "" {
		return m
	}
	return public
}

// NewRequest builds the backend request. body is the already rewritten body
// (see Body.Rewrite with BodyModel). in is the client's request header.
//
// Headers reach a backend by allow-list, never by deny-list: a caller must
// not pick the account, project, encoding or identity the backend sees. A
// backend request carries exactly
//   - Content-Type: application/json (the gateway sent the body it checked);
//   - Accept, as the caller sent it (a media type; never Accept-Encoding:
//     a compressed SSE stream could not be scanned per event);
//   - the endpoint's credential (Cred), never the caller's;
//   - OpenAI-Organization and OpenAI-Project from the endpoint's config;
//   - on the Messages API's operations, Anthropic-Version and
//     Anthropic-Beta as the caller sent them (they choose the API's
//     version and features, as the body does; prompt caching and
//     extended thinking need them), and an anthropic kind's default
//     Anthropic-Version when the caller sent none;
//   - the caller headers named in TargetSpec.Forward;
//   - what the server and transport add: X-Request-Id (the gateway's own
//     id), Host, Content-Length, User-Agent.
//
// Everything else a caller sends stays at the gateway: credentials and
// cookies (X-Api-Key among them), OpenAI-Organization and OpenAI-Project, X-Forwarded-* and
// Forwarded, Content-Encoding, Expect, hop-by-hop headers, X-Ms-* and any
// other vendor header.
func (t *Target) NewRequest(ctx context.Context, op Operation, public string, body []byte, in http.Header) (*http.Request, error) {
	req, err := t.newRequest(ctx, http.MethodPost, t.wire.url(t.Base, op, t.BackendModel(public)), body, in)
	if err == nil && op.Anthropic() {
		anthropicHeaders(req.Header, in, t.wire)
	}
	return req, err
}

// newRequest builds a backend request with exactly the allowed headers.
func (t *Target) newRequest(ctx context.Context, method, url string, body []byte, in http.Header) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, fmt.Errorf("build backend request: %w", err)
	}
	h := req.Header
	h["Content-Type"] = []string{"application/json"}
	if v := in["Accept"]; len(v) > 0 {
		h["Accept"] = v
	}
	for _, k := range t.forward {
		if v := in[k]; len(v) > 0 {
			h[k] = v
		}
	}
	for k, v := range t.fixed {
		h[k] = v
	}
	if t.Cred != nil {
		if err := t.Cred.Apply(ctx, h); err != nil {
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

// CheckForward says why a caller's header may not be forwarded by config
// (nil: it may). Config validation and NewTarget share it.
func CheckForward(name string) error {
	k := http.CanonicalHeaderKey(name)
	if k == "" || !validHeaderName(k) {
		return fmt.Errorf("%q is not a header name", name)
	}
	if neverForward(k) {
		return fmt.Errorf("%s is never forwarded from a caller", k)
	}
	return nil
}

// neverForward reports whether a caller's header k (canonical) must never
// reach a backend, even when an operator lists it in TargetSpec.Forward:
// credentials and cookies (RFC 9110 §11), hop-by-hop and framing headers
// (RFC 9110 §7.6.1, RFC 9112 §6), those that pick an encoding, account or
// project, and those that claim a client identity the gateway did not
// check.
func neverForward(k string) bool {
	switch k {
	case "Authorization", "Proxy-Authorization", "Cookie", "Api-Key", "X-Api-Key",
		"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Host", "Content-Length", "Content-Type", "Content-Encoding", "Accept-Encoding", "Expect",
		"Openai-Organization", "Openai-Project", "X-Request-Id", "Forwarded", "X-Real-Ip":
		return true
	}
	return strings.HasPrefix(k, "X-Forwarded-")
}

func validHeaderName(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// CopyResponseHeaders copies the backend response headers that may reach
// the client, by allow-list (issue 22): a backend's other headers
// (OpenAI-Organization, OpenAI-Project, Apim-Request-Id, X-Ms-Region,
// Server, Set-Cookie, Location, its own x-ratelimit-* and request id)
// describe the gateway's account and network, not the caller's request.
// Relayed are only
//   - Content-Type, the media type of what follows;
//   - OpenAI-Processing-Ms, the backend's processing time, which OpenAI's
//     SDKs log and which names nothing.
//
// Everything else a caller gets is the gateway's own: X-Request-Id, the
// x-ratelimit-* headers of the tenant's limits, Retry-After on the
// gateway's own refusals, Content-Length and the SSE headers.
func CopyResponseHeaders(dst, src http.Header) {
	for _, k := range relayedResponse {
		if v := src[k]; len(v) > 0 {
			dst[k] = v
		}
	}
}

// relayedResponse is the allow-list of CopyResponseHeaders (canonical).
var relayedResponse = []string{"Content-Type", "Openai-Processing-Ms"}
