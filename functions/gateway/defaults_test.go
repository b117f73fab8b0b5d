package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/ratelimit"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/server/listener"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/tenant"
	"github.com/llmgw/gateway/shared/upstream"
)

// TestDefaultsAreTheParts: each setting the file leaves out stays zero in
// the loaded config, and the part that takes it applies its own default,
// declared once in that part (one home per default). A default
// put back into package config fails the first column; a part that stops
// applying its own fails the second.
func TestDefaultsAreTheParts(t *testing.T) {
	noenv := func(string) string { return "" }
	cfg, err := assemble.Parse([]byte(strings.Replace(checkBase, "listen: 127.0.0.1:0\n", "", 1)), noenv)
	if err != nil {
		t.Fatal(err)
	}
	given := assemble.HostOf(cfg, noenv)
	host := withHostDefaults(given)
	srv := server.New(assemble.Server(cfg))
	_, limits := assemble.RequestLimiter(cfg)
	log := newLogger(io.Discard, given.LogLevel)
	ctx := context.Background()
	backend := newHTTPClient(assemble.BackendsOf(cfg), nil).Transport.(*http.Transport)
	for _, tc := range []struct {
		field      string
		zero, part bool
	}{
		{"listen", cfg.Listen == "" && given.Listen == "", host.Listen == defaultListen},
		{"log_level", cfg.Server.Host.LogLevel == "", log.Enabled(ctx, slog.LevelInfo) && !log.Enabled(ctx, slog.LevelDebug)},
		{"max_header_bytes", cfg.Server.Limits.MaxHeaderBytes == 0 && given.MaxHeaderBytes == 0,
			srv.MaxHeaderBytes == server.DefaultMaxHeaderBytes && host.MaxHeaderBytes == server.DefaultMaxHeaderBytes},
		{"tenants[0].interval", cfg.Tenants[0].Interval == 0 && limits[0].Interval == 0,
			limits[0].WithDefaults().Interval == ratelimit.DefaultInterval},
		{"pools[0].endpoints[0].auth", cfg.Pools[0].Endpoints[0].Auth == "",
			assemble.Endpoints(cfg)[0][0].Entra == nil},
		{"read_header_timeout", cfg.Server.Host.ReadHeaderTimeout == 0, host.ReadHeaderTimeout == server.DefaultReadHeaderTimeout},
		{"idle_timeout", cfg.Server.Host.IdleTimeout == 0, host.IdleTimeout == server.DefaultIdleTimeout},
		{"shutdown_grace", cfg.Server.Host.ShutdownGrace == 0, host.ShutdownGrace == server.DefaultShutdownGrace},
		{"telemetry.flush_timeout", cfg.Telemetry.FlushTimeout == 0, cfg.Telemetry.WithDefaults().FlushTimeout == telemetry.DefaultFlushTimeout},
		{"upstream.connect_timeout", cfg.Upstream.ConnectTimeout == 0, backend.TLSHandshakeTimeout == upstream.DefaultConnectTimeout},
		{"upstream.max_idle_conns_per_host", cfg.Upstream.MaxIdleConnsPerHost == 0, backend.MaxIdleConnsPerHost == upstream.DefaultMaxIdleConnsPerHost},
		{"max_body_bytes", cfg.Server.Limits.MaxBodyBytes == 0, srv.MaxBodyBytes == server.DefaultMaxBodyBytes},
		{"max_connections", cfg.Server.Conns.MaxConns == 0 && given.Conns.MaxConns == 0, host.Conns.WithDefaults().MaxConns == listener.DefaultMaxConns},
		{"max_concurrent_requests", cfg.MaxConcurrentRequests == 0 && cfg.Tenants[0].MaxConcurrentRequests == 0,
			srv.Tenants.Lookup("t1").MaxConcurrent == tenant.DefaultMaxConcurrent},
		{"upstream.keepalive_interval", cfg.Upstream.Streams.KeepaliveInterval == nil && cfg.Pools[0].Streams.KeepaliveInterval == nil,
			srv.Streams["p1"].Keepalive() == server.DefaultKeepaliveInterval},
		{"lambda.min_remaining", cfg.Lambda.MinRemaining == nil, *srv.Lambda.MinRemaining == server.DefaultMinRemaining},
		{"body_read_timeout", cfg.Server.Limits.BodyReadTimeout == 0, srv.BodyReadTimeout == server.DefaultBodyReadTimeout},
		{"raw_syscalls", cfg.Server.RawSyscalls == nil && !given.Conns.PlainConns && !assemble.BackendsOf(cfg).PlainConns,
			!host.Conns.WithDefaults().PlainConns},
	} {
		if !tc.zero {
			t.Errorf("%s: the loaded config holds a default; the part that takes it owns it", tc.field)
		}
		if !tc.part {
			t.Errorf("%s: the part does not apply its default", tc.field)
		}
	}
}
