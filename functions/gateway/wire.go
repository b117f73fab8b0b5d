package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/ratelimit"
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
}

func (g *gateway) close() { _ = g.limiter.Close() }

// wire builds every part from cfg. It starts background work (JWKS, tokens)
// but waits for none of it.
func wire(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger) (*gateway, error) {
	client := newBackendClient(cfg.Upstream)

	verifier, err := auth.New(auth.Config{
		Issuer:             cfg.Auth.Issuer,
		JWKSURL:            cfg.Auth.JWKSURL,
		Audiences:          cfg.Auth.Audiences,
		TenantClaim:        cfg.Auth.TenantClaim,
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
		rows = append(rows, tenant.Row{ID: t.ID, Models: t.Models})
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
			cred, err := credential(ctx, p, e, getenv, log)
			if err != nil {
				_ = lim.Close()
				return nil, fmt.Errorf("pools[%s].endpoints[%d]: %w", p.Name, j, err)
			}
			t, err := upstream.NewTarget(upstream.TargetSpec{
				Kind: p.Kind, URL: e.URL, APIVersion: e.APIVersion, AzureAPI: e.AzureAPI, Models: p.Models, Cred: cred,
			})
			if err != nil {
				_ = lim.Close()
				return nil, fmt.Errorf("pools[%s].endpoints[%d]: %w", p.Name, j, err)
			}
			targets[pool] = append(targets[pool], t)
		}
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
	})
	return &gateway{handler: h, limiter: lim}, nil
}

// credential builds an endpoint's backend credential: a key from its env var
// (bearer for openai/vllm, api-key for azure-openai) or an Entra ID token.
func credential(ctx context.Context, p config.Pool, e config.Endpoint, getenv func(string) string, log *slog.Logger) (upstream.Credential, error) {
	if e.Auth == "entra" {
		return entraCredential(ctx, e.Entra, log)
	}
	if e.APIKeyEnv == "" {
		return nil, nil
	}
	key := getenv(e.APIKeyEnv)
	if p.Kind == "azure-openai" {
		return upstream.HeaderKey{Header: "Api-Key", Value: key}, nil
	}
	return upstream.HeaderKey{Header: "Authorization", Value: key}, nil
}

// newBackendClient is the one HTTP client for every backend: keep-alive
// pools sized for the concurrency, no transparent gzip (an SSE stream must
// be scanned as sent), no redirects (a POST body must not wander).
func newBackendClient(c config.Upstream) *http.Client {
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
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
