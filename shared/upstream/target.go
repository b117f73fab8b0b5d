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

	"github.com/llmgw/gateway/shared/request"
)

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

// preset is a HeaderKey with its header value built once, for
// Target.Cred.
func (k HeaderKey) preset() presetKey {
	v := k.Value
	if k.Header == "Authorization" {
		v = "Bearer " + v
	}
	return presetKey{header: k.Header, value: []string{v}}
}

// presetKey is a HeaderKey whose value was built once (HeaderKey.preset):
// every request shares it.
type presetKey struct {
	header string
	value  []string
}

// Apply implements Credential.
func (k presetKey) Apply(_ context.Context, h http.Header) error {
	h[k.header] = k.value
	return nil
}

// Target is one endpoint of a pool, ready to build requests.
type Target struct {
	Cred Credential // nil = no credentials
	kind kind
	// provider is the gen_ai.provider.name (Provider).
	provider string
	base     string // the endpoint URL without a trailing slash, built once for every URL
	// Models maps public model names to the backend's names.
	Models map[string]string
	// fixed holds the headers from config sent on every request
	// (OpenAI-Organization, OpenAI-Project); forward the caller headers the
	// operator allowed beyond Accept.
	fixed   http.Header
	forward []string
	// fields is what it forwards of each body beyond the operation's
	// table (Forwards).
	fields        fieldSet
	refuseUnknown bool
	// post and posts make a POST without building and parsing its URL per
	// request (an allocation each): post is a request to base (method, protocol, Host),
	// copied per request and pointed at posts[op], the operation's URL,
	// parsed once. Nil for a kind whose URL names the model (Azure's
	// deployments): its URL is built per request.
	post  *http.Request
	posts map[request.Operation]*url.URL
}

// modelURL is a kind whose URL names the model: Target.NewRequest builds
// its URL per request.
type modelURL interface{ urlNamesModel() }

// jsonType is the Content-Type of every backend request's body. Header
// values here are shared by every request, never written in place
// (http.Header.Add appends to a full slice, so it copies).
var jsonType = []string{"application/json"}

// TargetSpec describes a Target for NewTarget.
type TargetSpec struct {
	Kind       string // one of Kinds()
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
	// Fields names top-level body members forwarded beyond the
	// operation's table and the kind's own (Forwards); CheckField refuses
	// those the gateway writes or gates per tenant.
	Fields []string
	// RefuseUnknown refuses a body member Forwards does not name, which
	// is otherwise dropped.
	RefuseUnknown bool
}

// NewTarget validates spec and builds the target.
func NewTarget(spec TargetSpec) (*Target, error) {
	u, err := url.Parse(strings.TrimRight(spec.URL, "/"))
	if err != nil {
		return nil, fmt.Errorf("endpoint url %q: %w", spec.URL, err)
	}
	k := registered(spec.Kind)
	if k == nil {
		return nil, fmt.Errorf("unknown pool kind %q", spec.Kind)
	}
	t := &Target{Cred: spec.Cred, Models: spec.Models, base: u.String(), kind: k.build(spec), provider: spec.Kind}
	if p, ok := t.kind.(namedProvider); ok {
		t.provider = p.provider()
	}
	if t.Cred == nil && spec.APIKey != "" {
		t.Cred = HeaderKey{Header: t.kind.keyHeader(), Value: spec.APIKey}
	}
	if k, ok := t.Cred.(HeaderKey); ok {
		t.Cred = k.preset()
	}
	if _, ok := t.kind.(modelURL); !ok {
		if err := t.parsePosts(); err != nil {
			return nil, fmt.Errorf("endpoint url %q: %w", spec.URL, err)
		}
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
	for _, name := range spec.Fields {
		if err := CheckField(name); err != nil {
			return nil, fmt.Errorf("fields: %w", err)
		}
	}
	t.fields, t.refuseUnknown = newFieldSet(t.kind, spec.Fields), spec.RefuseUnknown
	return t, nil
}

// CapField is the output-cap field op's body carries on this endpoint
// when the gateway must add one (token budgets): the operation's own
// (request.Operation.CapField) unless the kind reads another.
func (t *Target) CapField(op request.Operation) request.CapField { return t.kind.capField(op) }

// StandardTier is the service_tier value that holds an answer to op to
// the standard tier on the endpoint's kind, or "" where the kind reads
// none: OpenAI's "default" (chat, Responses), Anthropic's
// "standard_only" (Messages). Without it OpenAI serves the project's
// default tier and Anthropic "auto", either of which may be a dearer one.
// The OpenAI-compatible kinds (vLLM, Azure) are not asked: they bill no
// tier, or serve a dearer one only when it is named.
func (t *Target) StandardTier(op request.Operation) string {
	switch t.kind.(type) {
	case openAI:
		if op == request.ChatCompletions || op == request.Responses {
			return "default"
		}
	case anthropic:
		if op == request.Messages {
			return "standard_only"
		}
	}
	return ""
}

// SaltsCache reports whether the endpoint's kind shares its prefix cache
// between the requests of one cache_salt (vLLM): the gateway then writes
// each tenant's own (request.Changes.SaltCache).
func (t *Target) SaltsCache() bool {
	_, ok := t.kind.(cacheSalted)
	return ok
}

// RunningUsage reports whether the endpoint's kind reports a stream's
// usage on every chunk when asked (vLLM's continuous_usage_stats): the
// gateway then asks it with the include_usage it adds
// (request.Changes.RunningUsage).
func (t *Target) RunningUsage() bool {
	_, ok := t.kind.(runningUsage)
	return ok
}

// Supports reports whether the endpoint's kind serves op; each kind's
// file says which it does (the gateway translates no API into another).
func (t *Target) Supports(op request.Operation) bool { return t.kind.supports(op) }

// Provider is the endpoint's gen_ai.provider.name: its kind's config
// name unless the kind names another (Azure OpenAI's is azure.ai.openai).
func (t *Target) Provider() string { return t.provider }

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
func (t *Target) NewRequest(ctx context.Context, op request.Operation, public string, body []byte, in http.Header) (*http.Request, error) {
	var req *http.Request
	if u := t.posts[op]; u != nil && body != nil {
		// What http.NewRequestWithContext makes of this URL and body,
		// with the URL parsed once.
		req = t.post.WithContext(ctx)
		req.URL = u
		req.Header = make(http.Header, 8)
		req.ContentLength = int64(len(body))
		if len(body) == 0 {
			req.Body, req.GetBody = http.NoBody, noBody
		} else {
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		if err := t.setHeaders(ctx, req.Header, in); err != nil {
			return nil, err
		}
	} else {
		var err error
		req, err = t.newRequest(ctx, http.MethodPost, t.kind.url(t.base, op, t.BackendModel(public)), body, in)
		if err != nil {
			return nil, err
		}
	}
	if op.Anthropic() {
		for _, k := range [...]string{"Anthropic-Version", "Anthropic-Beta"} {
			if v := in[k]; len(v) > 0 {
				req.Header[k] = v
			}
		}
	}
	t.kind.setHeaders(req.Header, op)
	return req, nil
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// parsePosts parses the URL of every operation the kind serves, once
// (post, posts).
func (t *Target) parsePosts() error {
	post, err := http.NewRequest(http.MethodPost, t.base, nil)
	if err != nil {
		return err
	}
	t.post, t.posts = post, map[request.Operation]*url.URL{}
	for _, op := range request.Operations() {
		if !t.kind.supports(op) {
			continue
		}
		u, err := url.Parse(t.kind.url(t.base, op, ""))
		if err != nil {
			return err
		}
		t.posts[op] = u
	}
	return nil
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
	if err := t.setHeaders(ctx, req.Header, in); err != nil {
		return nil, err
	}
	return req, nil
}

// setHeaders sets a backend request's headers (h), by allow-list
// (NewRequest).
func (t *Target) setHeaders(ctx context.Context, h http.Header, in http.Header) error {
	h["Content-Type"] = jsonType
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
			return fmt.Errorf("%w: %w", ErrCredential, err)
		}
	}
	return nil
}

// BodyModel is the model value the backend's body must carry for public
// ("" = leave the client's value).
func (t *Target) BodyModel(public string) string {
	return t.kind.bodyModel(t.BackendModel(public))
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
// the client, by allow-list: a backend's other headers
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
