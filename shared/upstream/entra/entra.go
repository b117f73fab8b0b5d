// Package entra owns keyless backend credentials from Microsoft Entra ID: it
// turns one explicitly chosen azidentity credential into an
// upstream.Credential that keeps a bearer token cached, fetches it in the
// background at start and refreshes it before it expires, so that requests
// almost never wait for the identity endpoint.
//
// The credential is chosen by name, never probed: DefaultAzureCredential tries
// environment, workload identity, managed identity (with an IMDS probe) and
// several developer tools in turn, which costs time on a cold start and hides
// which identity a deployment really uses (see docs/azure.md, "Run on Azure Container Apps", for its measured
// cost when nothing is configured).
package entra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/llmgw/gateway/shared/problem"
)

// Credential kinds accepted in Config.Credential.
const (
	ManagedIdentity  = "managed-identity"
	WorkloadIdentity = "workload-identity"
	AzureCLI         = "azure-cli"
)

// DefaultScope is the Azure OpenAI (Cognitive Services) token scope.
const DefaultScope = "https://cognitiveservices.azure.com/.default"

// RedisScope is the token scope of Azure Managed Redis and Azure Cache for
// Redis with Microsoft Entra ID.
const RedisScope = "https://redis.azure.com/.default"

// DefaultTimeout bounds one token fetch when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// refreshMargin is how long before expiry a token is refreshed at the latest.
// It equals MSAL's own five-minute expiry buffer, so a refresh at this point
// finds MSAL's cached copy stale and really asks the identity endpoint.
const refreshMargin = 5 * time.Minute

// expirySkew is how long before its expiry a cached token stops being handed
// out: a token that expires in transit is refused by the backend.
const expirySkew = 30 * time.Second

// Backoff bounds for background retries after a failed fetch.
const (
	minBackoff = time.Second
	maxBackoff = time.Minute
)

// failureHold is how long a failed fetch's error is returned to callers
// without starting another fetch, so an outage under load costs the identity
// endpoint at most one request per hold.
const failureHold = time.Second

// Config selects and tunes one credential: explicitly, no probing chain.
// It is the config file's entra settings as written (an endpoint's entra,
// store.redis_entra); its zero Scope and Timeout take the defaults.
type Config struct {
	// Credential is managed-identity, workload-identity or azure-cli.
	Credential string `yaml:"credential" json:"credential"`
	// ClientID selects a user-assigned managed identity, or the application
	// of a workload identity (default: $AZURE_CLIENT_ID). Not used by azure-cli.
	ClientID string `yaml:"client_id" json:"client_id"`
	// Scope is the one token scope. Default DefaultScope (a backend's;
	// the gateway gives store.redis_entra RedisScope).
	Scope string `yaml:"scope" json:"scope"`
	// Timeout bounds every token fetch and every wait in Apply. Default
	// DefaultTimeout.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
}

// tokenSource is what Credential needs of an azidentity credential.
type tokenSource interface {
	GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error)
}

// Credential is an upstream.Credential that sets an Entra ID bearer token.
// It caches one token for its one scope; concurrent callers without a valid
// token share one fetch.
type Credential struct {
	kind    string
	scope   string
	timeout time.Duration
	src     tokenSource
	log     *slog.Logger

	// cur is the cached token, read without locking on every request.
	cur atomic.Pointer[cached]

	mu       sync.Mutex // guards the fields below
	inflight *fetch
	lastErr  error
	failedAt time.Time
}

// cached is a token ready to hand out.
type cached struct {
	header    string    // "Bearer " + token, built once per token
	usableTil time.Time // expiry less expirySkew
	expiresOn time.Time
}

// valid reports whether c may still be handed out at now.
func (c *cached) valid(now time.Time) bool { return c != nil && now.Before(c.usableTil) }

// fetch is one token request shared by every caller that waits for it.
type fetch struct {
	done   chan struct{}
	header string
	token  azcore.AccessToken
	err    error
}

// New builds the credential named by cfg.Credential. It does no network I/O:
// the first token is fetched by Start or by the first Apply.
func New(cfg Config, log *slog.Logger) (*Credential, error) {
	var p []string
	cfg.Check(problem.Into(&p, ""), os.Getenv)
	if err := problem.Err("entra", p); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Scope == "" {
		cfg.Scope = DefaultScope
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	// Every fetch is bounded by cfg.Timeout; inside it, retry transient
	// failures a little (a bare ManagedIdentityCredential would otherwise
	// retry IMDS for minutes), and leave longer backoff to Start's loop.
	opts := azcore.ClientOptions{Retry: policy.RetryOptions{
		MaxRetries:    2,
		RetryDelay:    200 * time.Millisecond,
		MaxRetryDelay: 2 * time.Second,
		TryTimeout:    cfg.Timeout,
	}}
	var (
		src tokenSource
		err error
	)
	switch cfg.Credential {
	case ManagedIdentity:
		o := &azidentity.ManagedIdentityCredentialOptions{ClientOptions: opts}
		if cfg.ClientID != "" {
			o.ID = azidentity.ClientID(cfg.ClientID)
		}
		src, err = azidentity.NewManagedIdentityCredential(o)
	case WorkloadIdentity:
		src, err = azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
			ClientOptions: opts, ClientID: cfg.ClientID,
		})
	case AzureCLI:
		src, err = azidentity.NewAzureCLICredential(nil)
	}
	if err != nil {
		return nil, fmt.Errorf("entra %s credential: %s", cfg.Credential, redact(err.Error()))
	}
	return newCredential(cfg, src, log), nil
}

// Check reports every problem with c under at, by the gateway config's
// field names; getenv is the environment the credential will read. It
// refuses an unknown credential, client_id with the Azure CLI, and a
// workload identity without the variables the workload identity webhook
// sets. New refuses what it reports; the gateway's config check calls it
// for each Entra section.
func (c Config) Check(at problem.At, getenv func(string) string) {
	switch c.Credential {
	case ManagedIdentity:
	case WorkloadIdentity:
		problem.NeedEnv(at, "credential", "AZURE_TENANT_ID", getenv)
		problem.NeedEnv(at, "credential", "AZURE_FEDERATED_TOKEN_FILE", getenv)
		if c.ClientID == "" {
			problem.NeedEnv(at, "client_id", "AZURE_CLIENT_ID", getenv)
		}
	case AzureCLI:
		if c.ClientID != "" {
			at.Add("client_id", "not used by the Azure CLI credential; remove it")
		}
	default:
		at.Add("credential", "must be %s, %s or %s, not %q", ManagedIdentity, WorkloadIdentity, AzureCLI, c.Credential)
	}
	problem.NotNegative(at, "timeout", c.Timeout)
}

func newCredential(cfg Config, src tokenSource, log *slog.Logger) *Credential {
	return &Credential{
		kind: cfg.Credential, scope: cfg.Scope, timeout: cfg.Timeout, src: src,
		log: log.With("credential", "entra "+cfg.Credential, "scope", cfg.Scope),
	}
}

// Start fetches the first token in the background and then refreshes each
// token before it expires: at half its lifetime or refreshMargin before
// expiry, whichever comes first, retrying failures with capped exponential
// backoff. It returns at once; the loop ends with ctx. Without Start, Apply
// fetches on demand, as it also does after ctx ends (a draining server may
// still need a token).
func (c *Credential) Start(ctx context.Context) {
	go c.refreshLoop(ctx)
}

func (c *Credential) refreshLoop(ctx context.Context) {
	backoff := minBackoff
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		f := c.startFetch(true)
		select {
		case <-ctx.Done():
			return
		case <-f.done:
		}
		var wait time.Duration
		if f.err != nil {
			wait = jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
			c.log.Warn("entra token refresh failed; retrying", "in", wait, "err", f.err)
		} else {
			backoff = minBackoff
			wait = refreshIn(time.Until(f.token.ExpiresOn))
			c.log.Debug("entra token refreshed", "expires_on", f.token.ExpiresOn, "next_refresh_in", wait)
		}
		timer.Reset(wait)
	}
}

// refreshIn is how long to keep a token with the given remaining lifetime
// before fetching the next: half the lifetime or until refreshMargin before
// expiry, whichever is sooner, and never less than a second so that an
// identity endpoint handing out very short tokens is not hammered.
func refreshIn(remaining time.Duration) time.Duration {
	d := remaining / 2
	if m := remaining - refreshMargin; m > 0 && m < d {
		d = m
	}
	return max(d, minBackoff)
}

// jitter spreads d by ±10% so replicas that failed together retry apart.
func jitter(d time.Duration) time.Duration {
	return d - d/10 + rand.N(d/5+1)
}

// Apply implements upstream.Credential: it sets Authorization to the cached
// bearer token. It waits only when no valid token is cached, then at most
// until ctx ends or the configured timeout passes, sharing one fetch with
// concurrent callers. Errors name the credential kind and never carry a
// token.
func (c *Credential) Apply(ctx context.Context, h http.Header) error {
	if cur := c.cur.Load(); cur.valid(time.Now()) {
		h["Authorization"] = []string{cur.header}
		return nil
	}
	header, err := c.wait(ctx)
	if err != nil {
		return err
	}
	h["Authorization"] = []string{header}
	return nil
}

// Token returns the cached access token, waiting as Apply does when none is
// valid. It is for clients that send the token other than as a bearer
// header, such as Redis, where it is the password.
func (c *Credential) Token(ctx context.Context) (string, error) {
	header, err := c.Header(ctx)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(header, "Bearer "), nil
}

// Header returns "Bearer <token>".
func (c *Credential) Header(ctx context.Context) (string, error) {
	if cur := c.cur.Load(); cur.valid(time.Now()) {
		return cur.header, nil
	}
	return c.wait(ctx)
}

// wait obtains a token when none is cached: it shares one fetch with
// concurrent callers and waits at most until ctx ends or the timeout passes.
func (c *Credential) wait(ctx context.Context) (string, error) {
	now := time.Now()
	c.mu.Lock()
	if c.inflight == nil && c.lastErr != nil && now.Sub(c.failedAt) < failureHold {
		err := c.lastErr
		c.mu.Unlock()
		return "", err
	}
	c.mu.Unlock()

	f := c.startFetch(false)
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	select {
	case <-f.done:
	case <-ctx.Done():
		return "", c.errorf("waiting for a token: %w", ctx.Err())
	case <-timer.C:
		return "", c.errorf("no token within %s: %w", c.timeout, context.DeadlineExceeded)
	}
	if f.err != nil {
		return "", f.err
	}
	return f.header, nil
}

// startFetch returns the fetch in flight, or starts one. A refresh (from the
// background loop) always starts a new one; a demand fetch reuses a fresh
// token another caller just stored.
func (c *Credential) startFetch(refresh bool) *fetch {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight != nil {
		return c.inflight
	}
	if cur := c.cur.Load(); !refresh && cur.valid(time.Now()) {
		f := &fetch{done: make(chan struct{}), header: cur.header, token: azcore.AccessToken{ExpiresOn: cur.expiresOn}}
		close(f.done)
		return f
	}
	f := &fetch{done: make(chan struct{})}
	c.inflight = f
	go c.run(f)
	return f
}

// run performs one token request bounded by the timeout and publishes it.
// It is not tied to any one caller's context: others may wait for it.
func (c *Credential) run(f *fetch) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	tok, err := c.src.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{c.scope}})
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err) // errors.Is finds the timeout
	}
	cancel()
	if err == nil && tok.Token == "" {
		err = errors.New("empty token")
	}
	c.mu.Lock()
	if err != nil {
		f.err = c.errorf("token request failed: %w", err)
		c.lastErr, c.failedAt = f.err, time.Now()
	} else {
		f.token, f.header = tok, "Bearer "+tok.Token
		c.cur.Store(&cached{header: f.header, usableTil: tok.ExpiresOn.Add(-expirySkew), expiresOn: tok.ExpiresOn})
		c.lastErr = nil
	}
	c.inflight = nil
	c.mu.Unlock()
	close(f.done)
}

// Error is a credential failure. Its message names the credential kind and
// has anything that looks like a token removed, since identity endpoints and
// tools echo response bodies into their errors.
type Error struct {
	Kind string // managed-identity, workload-identity or azure-cli
	msg  string
	err  error
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the underlying error, so errors.Is finds
// context.DeadlineExceeded and azidentity's errors. Its own message is not
// redacted: log the *Error, not what it wraps.
func (e *Error) Unwrap() error { return e.err }

func (c *Credential) errorf(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	return &Error{Kind: c.kind, msg: "entra " + c.kind + " credential: " + oneLine(redact(err.Error())), err: err}
}

// oneLine folds azidentity's multi-line error layout (request, response
// body, rulers) into one log-friendly line.
func oneLine(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" || strings.Trim(line, "-") == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(line)
	}
	return b.String()
}

// tokenLike matches JWTs (base64url JSON header "eyJ…" with two dots) and
// JSON access_token values of any shape.
var tokenLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*|("access_token"\s*:\s*")[^"]*(")`)

// redact removes token-looking text from s.
func redact(s string) string {
	return tokenLike.ReplaceAllStringFunc(s, func(m string) string {
		if m[0] == '"' {
			return `"access_token":"[REDACTED]"`
		}
		return "[REDACTED]"
	})
}
