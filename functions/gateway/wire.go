package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/shared/affinity/redisaffinity"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/ratelimit/redisstore"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
	"github.com/llmgw/gateway/shared/upstream/entra"
)

// gateway is the wired application.
type gateway struct {
	handler http.Handler
	limiter *ratelimit.Limiter
	// state is the Redis client for shared state other than the request
	// buckets (stored-response affinity, token budgets); nil with the
	// memory store.
	state *redis.Client
}

func (g *gateway) close() {
	_ = g.limiter.Close()
	if g.state != nil {
		_ = g.state.Close()
	}
}

// wire builds every part from cfg. It starts background work (JWKS, tokens)
// but waits for none of it.
func wire(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger) (*gateway, error) {
	client, err := newBackendClient(cfg)
	if err != nil {
		return nil, err
	}

	verifier, err := auth.New(auth.Config{
		Issuer:             cfg.Auth.Issuer,
		JWKSURL:            cfg.Auth.JWKSURL,
		Audiences:          cfg.Auth.Audiences,
		TenantClaim:        cfg.Auth.TenantClaim,
		RequiredRoles:      cfg.Auth.RequiredRoles,
		RequiredScopes:     cfg.Auth.RequiredScopes,
		Algorithms:         cfg.Auth.Algorithms,
		Leeway:             cfg.Auth.Leeway.D(),
		MaxTokenBytes:      cfg.Auth.MaxTokenBytes,
		RefreshMin:         cfg.Auth.JWKSRefreshMin.D(),
		RefreshMax:         cfg.Auth.JWKSRefreshMax.D(),
		UnknownKIDInterval: cfg.Auth.UnknownKIDInterval.D(),
	}, &http.Client{Timeout: 10 * time.Second}, log)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	verifier.Start(ctx)

	rows := make([]tenant.Row, 0, len(cfg.Tenants))
	limits := make([]ratelimit.TenantLimit, 0, len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		rows = append(rows, tenant.Row{ID: t.ID, Name: t.Name, Models: t.Models})
		limits = append(limits, ratelimit.TenantLimit{Tenant: t.ID, Tokens: t.Requests, Interval: t.Interval.D()})
	}
	lc := ratelimit.Config{
		Store:         cfg.Limiter.Store,
		KeyPrefix:     cfg.Limiter.KeyPrefix,
		Timeout:       cfg.Limiter.Timeout.D(),
		FailurePolicy: cfg.Limiter.FailurePolicy,
	}
	if cfg.Limiter.Store == "redis" {
		lc.RedisURL = getenv(cfg.Limiter.RedisURLEnv)
		if cfg.Limiter.RedisPasswordEnv != "" {
			lc.RedisPassword = getenv(cfg.Limiter.RedisPasswordEnv)
		}
		if e := cfg.Limiter.RedisEntra; e != nil {
			cred, err := entra.New(entra.Config{Credential: e.Credential, ClientID: e.ClientID, Scope: e.Scope, Timeout: e.Timeout.D()}, log)
			if err != nil {
				return nil, fmt.Errorf("limiter.redis_entra: %w", err)
			}
			cred.Start(ctx)
			user := e.Username
			lc.RedisCredentials = func(ctx context.Context) (string, string, error) {
				tok, err := cred.Token(ctx)
				return user, tok, err
			}
		}
	}
	lim, err := ratelimit.New(lc, limits, log)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	// Dial Redis (TLS, AUTH) in the background so the first take does not
	// pay for it inside its 50 ms budget.
	go func() {
		if err := lim.Warm(ctx); err != nil {
			log.Warn("limiter store not reachable yet", "err", err)
		}
	}()

	specs := make([]route.PoolSpec, 0, len(cfg.Pools))
	for _, p := range cfg.Pools {
		ps := route.PoolSpec{Name: p.Name}
		for m := range p.Models {
			ps.Models = append(ps.Models, m)
		}
		for _, e := range p.Endpoints {
			ps.Endpoints = append(ps.Endpoints, route.EndpointSpec{Name: e.URL, Weight: e.Weight})
		}
		specs = append(specs, ps)
	}
	router := route.New(specs, nil)
	targets := map[*route.Pool][]*upstream.Target{}
	for _, p := range cfg.Pools {
		var pool *route.Pool
		for m := range p.Models {
			pool = router.Pool(m)
			break
		}
		for j, e := range p.Endpoints {
			cred, err := credential(ctx, e, log)
			if err != nil {
				_ = lim.Close()
				return nil, fmt.Errorf("pools[%s].endpoints[%d]: %w", p.Name, j, err)
			}
			t, err := upstream.NewTarget(upstream.TargetSpec{
				Kind: p.Kind, URL: e.URL, APIVersion: e.APIVersion, AzureAPI: e.AzureAPI, Models: p.Models,
				Cred: cred, APIKey: apiKey(e, getenv),
				Organization: e.Organization, Project: e.Project, Forward: p.ForwardHeaders,
			})
			if err != nil {
				_ = lim.Close()
				return nil, fmt.Errorf("pools[%s].endpoints[%d]: %w", p.Name, j, err)
			}
			targets[pool] = append(targets[pool], t)
		}
	}

	var state *redis.Client
	var aff server.Affinity // nil: in memory, per process
	if cfg.Limiter.Store == "redis" {
		// A client of its own: these calls may take longer than a take's
		// tight budget.
		state, err = redisstore.NewClient(redisstore.ClientOptions{
			URL: lc.RedisURL, Password: lc.RedisPassword, Credentials: lc.RedisCredentials, Timeout: stateTimeout,
		})
		if err != nil {
			_ = lim.Close()
			return nil, fmt.Errorf("limiter: %w", err)
		}
		aff = redisaffinity.New(state, cfg.Limiter.KeyPrefix)
	}
	bud, err := budgets(ctx, cfg, state, log)
	if err != nil {
		_ = lim.Close()
		if state != nil {
			_ = state.Close()
		}
		return nil, err
	}

	h := server.New(server.Deps{
		Auth:              verifier,
		Tenants:           tenant.NewTable(rows),
		Limiter:           lim,
		Router:            router,
		Targets:           targets,
		Client:            client,
		Log:               log,
		MaxBodyBytes:      cfg.MaxBodyBytes,
		MaxAttempts:       cfg.Upstream.MaxAttempts,
		DefaultCooldown:   cfg.Upstream.DefaultCooldown.D(),
		StreamIdleTimeout: cfg.Upstream.StreamIdleTimeout.D(),
		BodyReadTimeout:   cfg.BodyReadTimeout.D(),
		HeaderTimeout:     cfg.Upstream.HeaderTimeout.D(),
		ResponseTimeout:   cfg.Upstream.ResponseTimeout.D(),
		Streams:           streamPolicies(cfg),
		Affinity:          aff,
		Budgets:           bud,
		MinRemaining:      cfg.Lambda.MinRemaining.D(),
	})
	return &gateway{handler: h, limiter: lim, state: state}, nil
}

// stateTimeout bounds one call for shared state other than a take.
const stateTimeout = time.Second

// streamPolicies is each pool's keepalive and first-token policy (config
// has filled pool values from upstream's).
func streamPolicies(cfg *config.Config) map[string]server.StreamPolicy {
	m := make(map[string]server.StreamPolicy, len(cfg.Pools))
	for _, p := range cfg.Pools {
		m[p.Name] = server.StreamPolicy{KeepaliveInterval: p.KeepaliveInterval.D(), FirstTokenTimeout: p.FirstTokenTimeout.D()}
	}
	return m
}

// apiKey is an endpoint's key from its env var ("" = none).
func apiKey(e config.Endpoint, getenv func(string) string) string {
	if e.APIKeyEnv == "" {
		return ""
	}
	return getenv(e.APIKeyEnv)
}

// credential builds an endpoint's Entra ID credential; a key (from its
// env var) goes in TargetSpec.APIKey, and the kind's wire file says which
// header carries it.
func credential(ctx context.Context, e config.Endpoint, log *slog.Logger) (upstream.Credential, error) {
	if e.Auth == "entra" {
		return entraCredential(ctx, e.Entra, log)
	}
	return nil, nil
}

// backendClient sends each backend request through its endpoint's
// transport: endpoints with a ca_file have one per distinct file (its roots
// are the system's plus the file's), every other endpoint shares one. It
// picks by the request's host, so all endpoints on one host must name the
// same ca_file (the config checks).
type backendClient struct {
	shared *http.Client
	byHost map[string]*http.Client // hosts of endpoints with a ca_file
}

var _ server.Doer = (*backendClient)(nil)

// Do implements server.Doer.
func (b *backendClient) Do(req *http.Request) (*http.Response, error) {
	if c, ok := b.byHost[req.URL.Host]; ok {
		return c.Do(req)
	}
	return b.shared.Do(req)
}

// newBackendClient builds the clients for every backend: keep-alive pools
// sized for the concurrency, no transparent gzip (an SSE stream must be
// scanned as sent), no redirects (a POST body must not wander). It reads
// each ca_file once, so a missing or empty file stops the start.
func newBackendClient(cfg *config.Config) (*backendClient, error) {
	b := &backendClient{shared: newHTTPClient(cfg.Upstream, nil)}
	byFile := map[string]*http.Client{}
	for _, p := range cfg.Pools {
		for j, e := range p.Endpoints {
			if e.CAFile == "" {
				continue
			}
			u, err := url.Parse(e.URL)
			if err != nil {
				return nil, fmt.Errorf("pools[%s].endpoints[%d]: url: %w", p.Name, j, err)
			}
			c := byFile[e.CAFile]
			if c == nil {
				roots, err := rootsWith(e.CAFile)
				if err != nil {
					return nil, fmt.Errorf("pools[%s].endpoints[%d]: ca_file: %w", p.Name, j, err)
				}
				c = newHTTPClient(cfg.Upstream, roots)
				byFile[e.CAFile] = c
			}
			if b.byHost == nil {
				b.byHost = map[string]*http.Client{}
			}
			b.byHost[u.Host] = c
		}
	}
	return b, nil
}

// rootsWith is the system's root CAs plus the PEM certificates in path.
func rootsWith(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return roots, nil
}

// newHTTPClient is one backend client; roots nil trusts the system's CAs.
func newHTTPClient(c config.Upstream, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: c.ConnectTimeout.D(), KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: c.MaxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: c.ConnectTimeout.D(),
		DisableCompression:  true,
		// The request is written once per connection use and the buffer is
		// held for the connection's life (one per open stream): keep it
		// small. The read side keeps its 4 KiB: under load one read then
		// takes several queued events, and syscalls are the cost per event.
		WriteBufferSize: 1 << 10,
	}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
