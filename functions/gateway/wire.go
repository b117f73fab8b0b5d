package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/rawconn"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/stores"
	"github.com/llmgw/gateway/shared/telemetry/otlp"
	"github.com/llmgw/gateway/shared/upstream"
)

// gateway is the wired application.
type gateway struct {
	handler http.Handler
	limiter *ratelimit.Limiter
	// stores is the shared state's clients (stores.Open), closed last.
	stores *stores.Set
	// tel exports metrics and spans; nil without an OTLP endpoint.
	tel *otlp.Exporter
	// ledger is the tenants' budgets; nil when no tenant has one.
	ledger *budget.Ledger
}

func (g *gateway) close() {
	if g.tel != nil {
		// Stops the exporter's goroutines (serveHTTP has flushed already).
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = g.tel.Shutdown(ctx)
		cancel()
	}
	if g.limiter != nil {
		_ = g.limiter.Close()
	}
	if g.stores != nil {
		_ = g.stores.Close()
	}
}

// wire builds every part from cfg. It starts background work (JWKS, tokens)
// but waits for none of it. accessLog takes the access log's lines (stdout,
// beside the log's own). fds is the open-file limit (0: unknown): the
// store's pools are sized within their share of it (storeFDShare).
func wire(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger, accessLog io.Writer, fds uint64) (g *gateway, err error) {
	client, err := newBackendClient(cfg)
	if err != nil {
		return nil, err
	}
	verifier, err := newVerifier(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	g = &gateway{}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	sc, err := storeConfig(ctx, cfg, getenv, log)
	if err != nil {
		return nil, err
	}
	sc.MaxConns = storeFDShare(fds)
	if g.stores, err = stores.Open(ctx, sc); err != nil {
		return nil, err
	}
	if g.limiter, err = newLimiter(ctx, cfg, g.stores, log); err != nil {
		return nil, err
	}
	shared := g.stores.Cooldowns // nil: cooldowns per process
	router, targets, err := newRouting(ctx, cfg, shared, getenv, log)
	if err != nil {
		return nil, err
	}
	bud, err := budgets(cfg, g.stores.Budget, log)
	if err != nil {
		return nil, err
	}
	g.ledger, _ = bud.(*budget.Ledger)
	if g.tel, err = newTelemetry(cfg, getenv, log); err != nil {
		return nil, err
	}
	var tel server.Telemetry // a nil *otlp.Exporter must stay a nil interface
	if g.tel != nil {
		tel = g.tel
	}
	deps := assemble.Server(cfg)
	deps.Auth, deps.Ready = verifier, verifier
	if deps.Auth, err = withKeys(cfg, verifier, g.stores.Keys, getenv); err != nil {
		return nil, err
	}
	if ks := assemble.Keys(cfg); ks.AdminRole != "" {
		deps.KeyAdmin = keys.Manager{Secret: []byte(getenv(ks.SecretEnv)), Store: g.stores.Keys, MaxTTL: ks.MaxTTL, Log: log}
		deps.AdminRole = ks.AdminRole
	}
	deps.Limiter, deps.Router, deps.Targets, deps.Client = g.limiter, router, targets, client
	deps.Affinity, deps.Budgets, deps.Telemetry, deps.Log, deps.AccessLog = g.stores.Affinity, bud, tel, log, accessLog
	g.handler = server.New(deps)
	return g, nil
}

// newVerifier builds the JWT verifier and starts its background key fetch.
func newVerifier(ctx context.Context, cfg *config.Config, log *slog.Logger) (*auth.Verifier, error) {
	v, err := auth.New(assemble.Verifier(cfg), &http.Client{Timeout: 10 * time.Second}, log)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	v.Start(ctx)
	return v, nil
}

// storeConfig is the shared store's settings, defaults applied: its
// secrets from the environment, the Entra login for keyless Redis, and
// the answer timeout of each part's calls.
func storeConfig(ctx context.Context, cfg *config.Config, getenv func(string) string, log *slog.Logger) (stores.Config, error) {
	sc := assemble.Stores(cfg).WithSecrets(getenv)
	sc.Log = log
	login := sc.RedisEntra
	if login == nil || sc.Backend != stores.Redis {
		return sc, nil
	}
	cred, err := newEntra(ctx, login.Entra(), log)
	if err != nil {
		return sc, fmt.Errorf("%s: %w", cfg.FieldName("store.redis_entra"), err)
	}
	sc.Credentials = func(ctx context.Context) (string, string, error) {
		tok, err := cred.Token(ctx)
		return login.Username, tok, err
	}
	return sc, nil
}

// newLimiter builds the request limiter and establishes its store's
// connections (TLS, AUTH) in the background, so that the first takes find
// them ready; a take that still waits for one is bounded by the dial budget.
func newLimiter(ctx context.Context, cfg *config.Config, st *stores.Set, log *slog.Logger) (*ratelimit.Limiter, error) {
	lc, limits := assemble.RequestLimiter(cfg)
	lc.Shared = st.Limiter
	lim, err := ratelimit.New(lc, limits, log)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	go func() {
		if err := lim.Warm(ctx); err != nil {
			log.Warn("limiter store not reachable yet", "err", err)
		}
	}()
	return lim, nil
}

// newRouting builds the router and each endpoint's backend target, paired
// by pointer: the router keeps the config's order of pools and endpoints.
// shared, when not nil, carries backend-asked cooldowns between replicas;
// outlier ejections start at the default cooldown.
func newRouting(ctx context.Context, cfg *config.Config, shared route.Shared, getenv func(string) string, log *slog.Logger) (*route.Router, map[*route.Endpoint]*upstream.Target, error) {
	router := route.New(assemble.Routing(cfg, shared))
	endpoints := assemble.Endpoints(cfg)
	targets := map[*route.Endpoint]*upstream.Target{}
	for i, pool := range router.Pools() {
		for j, ep := range pool.Endpoints {
			t, err := newTarget(ctx, endpoints[i][j], getenv, log)
			if err != nil {
				return nil, nil, fmt.Errorf("pools[%d].endpoints[%d]: %w", i, j, err)
			}
			targets[ep] = t
		}
	}
	return router, targets, nil
}

// newTarget builds one endpoint's target: its wire format, its key or
// Entra credential, and the headers config adds or lets through.
func newTarget(ctx context.Context, e assemble.Endpoint, getenv func(string) string, log *slog.Logger) (*upstream.Target, error) {
	spec := e.Spec
	if e.Entra != nil {
		c, err := newEntra(ctx, *e.Entra, log)
		if err != nil {
			return nil, err
		}
		spec.Cred = c
	}
	if e.APIKeyEnv != "" {
		spec.APIKey = getenv(e.APIKeyEnv)
	}
	return upstream.NewTarget(spec)
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

// Do implements server.Doer with the client's transport's RoundTrip. The
// gateway follows no redirect and sets neither a client timeout nor
// cookies, so http.Client.Do added only redirect bookkeeping: a copy of
// the headers and a rewindable body, 1.6 KB a request. Its
// errors are the client's, an *url.Error naming the method and the URL;
// a URL with credentials in it goes through the client, which sends
// them.
func (b *backendClient) Do(req *http.Request) (*http.Response, error) {
	c := b.shared
	if h, ok := b.byHost[req.URL.Host]; ok {
		c = h
	}
	if req.URL.User != nil {
		return c.Do(req)
	}
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: urlErrorOp(req.Method), URL: req.URL.String(), Err: err}
	}
	return resp, nil
}

// urlErrorOp is the Op of http.Client's *url.Error: "Post" for POST.
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

// newBackendClient builds the clients for every backend: keep-alive pools
// sized for the concurrency, no transparent gzip (an SSE stream must be
// scanned as sent), no redirects (a POST body must not wander). It reads
// each ca_file once, so a missing or empty file stops the start.
func newBackendClient(cfg *config.Config) (*backendClient, error) {
	conn := assemble.BackendsOf(cfg)
	b := &backendClient{shared: newHTTPClient(conn, nil)}
	byFile := map[string]*http.Client{}
	for _, pool := range assemble.Endpoints(cfg) {
		for j, e := range pool {
			if e.CAFile == "" {
				continue
			}
			u, err := url.Parse(e.URL)
			if err != nil {
				return nil, fmt.Errorf("pools[%s].endpoints[%d]: url: %w", e.Pool, j, err)
			}
			c := byFile[e.CAFile]
			if c == nil {
				roots, err := rootsWith(e.CAFile)
				if err != nil {
					return nil, fmt.Errorf("pools[%s].endpoints[%d]: ca_file: %w", e.Pool, j, err)
				}
				c = newHTTPClient(conn, roots)
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
// Its zero settings are upstream.ClientSettings' defaults.
func newHTTPClient(c assemble.Backends, roots *x509.CertPool) *http.Client {
	c.ClientSettings = c.ClientSettings.WithDefaults()
	d := &net.Dialer{Timeout: c.ConnectTimeout, KeepAlive: 30 * time.Second}
	dial := d.DialContext
	if !c.PlainConns {
		// Raw reads and writes (package rawconn): a stream's reads then
		// do not wake the runtime's sysmon on one core.
		dial = rawconn.DialContext(d)
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: c.MaxIdleConnsPerHost,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: c.ConnectTimeout,
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
