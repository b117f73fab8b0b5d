package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/lambdaurl"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/server/listener"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

var errUsage = errors.New("usage")

// flags is a command's flags, -config among them.
type flags struct {
	*flag.FlagSet
	path *string
}

func newFlags(name string, getenv func(string) string, stderr io.Writer) flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", getenv("GATEWAY_CONFIG"), "config file, YAML or JSON (default $GATEWAY_CONFIG); $GATEWAY_CONFIG_OVERLAY, when set, is merged over it (RFC 7386)")
	return flags{fs, path}
}

// load parses args and loads and checks the config they name.
func (fs flags) load(args []string, getenv func(string) string) (*config.Config, error) {
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if *fs.path == "" {
		return nil, fmt.Errorf("%w: no config: pass -config FILE or set GATEWAY_CONFIG", errUsage)
	}
	return assemble.Load(*fs.path, getenv("GATEWAY_CONFIG_OVERLAY"), getenv)
}

// run loads and validates the config, wires the parts, and serves until ctx
// ends: HTTP, or Lambda when AWS_LAMBDA_RUNTIME_API is set. Nothing remote
// happens before it is ready: JWKS and backend tokens are fetched in the
// background.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 1 && args[1] == "keys" {
		return runKeys(ctx, args[2:], getenv, stdout, stderr)
	}
	fs := newFlags(args[0], getenv, stderr)
	check := fs.Bool("check", false, "validate the config, ask a Redis store whether it is reachable and of the kind store.redis_cluster says, and exit")
	offline := fs.Bool("offline", false, "with -check: validate the config only, without asking the store (where -check runs without reach to it)")
	cfg, err := fs.load(args[1:], getenv)
	if err != nil {
		return err
	}
	if *check {
		if !*offline {
			if err := checkStore(ctx, cfg, getenv); err != nil {
				return err
			}
		}
		fmt.Fprintln(stdout, "config ok")
		return nil
	}

	host := withHostDefaults(assemble.HostOf(cfg, getenv))
	log := newLogger(stdout, host.LogLevel)
	redisclient.SetLogger(log) // process-wide
	for _, d := range host.Deprecated {
		log.Warn("deprecated config key: " + d)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lambda := getenv("AWS_LAMBDA_RUNTIME_API") != ""
	var fds uint64 // unknown under Lambda: one request at a time
	if !lambda {
		fds = raiseFDLimit()
	}
	gw, err := wire(ctx, cfg, getenv, log, stdout, fds) // the access log's lines beside the log's
	if err != nil {
		return err
	}
	defer gw.close()

	if lambda {
		opts := lambdaurl.Options{Settings: host.Lambda, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}
		if gw.tel != nil {
			gw.tel.Ready(ctx, "lambda", time.Now())
			// Lambda freezes the sandbox once the invocation ends: what a
			// request recorded is exported before its stream ends.
			opts.AfterResponse = func(ictx context.Context) {
				flushTelemetry(ictx, gw.tel, log, slog.LevelDebug, "invocation")
			}
		}
		// lambda.Start blocks for the life of the process.
		lambdaurl.Start(gw.handler, opts)
		return nil
	}
	return serveHTTP(ctx, host, gw, log, fds)
}

// checkStore is -check's question to the store a valid cfg names (none
// with the memory backend): is it reachable within the dial budget and
// an answer's timeout, and does its kind match store.redis_cluster
// (stores.Check, the start-up check's question). A mismatch is a config
// problem naming the setting; a store that does not answer is an error
// naming the URL's setting, which -offline skips.
func checkStore(ctx context.Context, cfg *config.Config, getenv func(string) string) error {
	sc, err := storeConfig(ctx, cfg, getenv, slog.New(slog.DiscardHandler))
	if err != nil || sc.Backend != stores.Redis {
		return err
	}
	sc = sc.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, sc.DialTimeout+sc.StateTimeout)
	defer cancel()
	switch err := stores.Check(ctx, sc); {
	case errors.Is(err, store.ErrMisconfigured):
		return config.Problems{fmt.Sprintf("%s: %v", cfg.FieldName(redisclient.ClusterSetting), err)}
	case err != nil:
		return fmt.Errorf("%s: %w (run -check -offline where the store cannot be reached)", cfg.FieldName("store.redis_url_env"), err)
	}
	return nil
}

// serveHTTP listens on host.Listen (an explicit listen, else $PORT,
// else $CONTAINER_APP_PORT) and, when ctx ends, stops accepting and lets
// open streams finish for the grace period. fds is the open-file limit
// (raiseFDLimit), which holds the client connections beside the store's
// pools.
func serveHTTP(ctx context.Context, host assemble.Host, gw *gateway, log *slog.Logger, fds uint64) (err error) {
	addr := host.Listen
	conns := host.Conns.WithDefaults() // MaxConns sized below
	conns.Log = log
	conns.Refusal = server.TooManyConnections // worded with the handler's errors
	conns.Probe = server.LivenessAtCap        // a liveness probe is answered at the cap too
	want, storeConns := conns.MaxConns, gw.stores.Conns()
	if conns.MaxConns, err = connsWithin(want, fds, storeConns); err != nil {
		return err
	}
	if conns.MaxConns != want {
		log.Warn("max_connections lowered to what the open-file limit allows (two descriptors a connection, the store's pools, and a reserve); raise the limit to serve more",
			"fd_limit", fds, "max_connections", conns.MaxConns, "configured", want, "store_connections", storeConns)
	}
	tcp, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ln := listener.New(tcp, conns)
	// Every connection is bounded from its first byte, with a token or
	// without: the headers by ReadHeaderTimeout and MaxHeaderBytes (431
	// beyond, and net/http closes), the body by the handler's read deadline
	// (server.Server, body_read_timeout), a kept-alive connection between
	// requests by IdleTimeout, the close after an early answer by the
	// lingering bounds, and their number by max_connections (the
	// Listener). No ReadTimeout or WriteTimeout: they would cut long
	// streams.
	srv := &http.Server{
		Handler:           gw.handler,
		ReadHeaderTimeout: host.ReadHeaderTimeout,
		IdleTimeout:       host.IdleTimeout,
		// Twice the limit: the handler answers a header block between the
		// limit and this with a logged 431; net/http answers a larger one
		// itself.
		MaxHeaderBytes: 2 * host.MaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln.Attach(srv)
	// The requests' base context: cancelled with server.ErrShutdown near
	// the end of the grace, so that open streams end in-band.
	base, endRequests := context.WithCancelCause(context.Background())
	defer endRequests(nil)
	srv.BaseContext = func(net.Listener) context.Context { return base }
	log.Info("gateway listening", "addr", "http://"+ln.Addr().String(), "max_connections", conns.MaxConns, "fd_limit", fds)
	if gw.tel != nil {
		gw.tel.Ready(ctx, "http", time.Now())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case err := <-gw.stores.Misconfigured():
		// Found within a round trip of the start: the store is reached
		// as the wrong kind (store.redis_cluster), so refuse to run.
		_ = srv.Close()
		return err
	case <-ctx.Done():
	}
	grace := host.ShutdownGrace
	log.Info("shutting down", "grace", grace.String())
	end := time.Now().Add(grace)
	sctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	// Streams still open when only the margin is left get their error
	// event, and their handlers settle and log within the margin.
	margin := shutdownMargin(grace)
	cut := time.AfterFunc(grace-margin, func() {
		log.Warn("shutdown grace nearly over: ending the open requests in-band", "left", margin.String())
		endRequests(server.ErrShutdown)
	})
	defer cut.Stop()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("grace period over; closing open connections", "err", err)
		_ = srv.Close()
	}
	drainBudgets(sctx, gw.ledger, log)
	if gw.tel != nil {
		// What the last streams recorded leaves before the process does:
		// within flush_timeout and what is left of the grace, whichever
		// ends first, whatever the collector does.
		flushTelemetry(sctx, gw.tel, log, slog.LevelInfo, "shutdown")
	}
	return nil
}

// drainBudgets replays the budget settles a store blip left kept for
// replay, within what is left of the grace: an idle replica scaled in
// would otherwise take them with it, leaving their reservations charged
// whole. Each one the store does not take in time is logged as a line an
// operator can reconcile (budget.Ledger.Drain).
func drainBudgets(ctx context.Context, l *budget.Ledger, log *slog.Logger) {
	if l == nil {
		return
	}
	if pending := l.Stats().Pending; pending > 0 {
		log.Info("replaying the budget settles kept for replay before exit", "pending", pending)
	}
	if left := l.Drain(ctx); left > 0 {
		log.Error("budget settles not replayed before exit: each is logged above to reconcile", "left", left)
	}
}

// shutdownMargin is the part of the shutdown grace left to the handlers
// after their requests were ended: for the error event, the budget
// settle (one store round trip, bounded by its timeout) and the
// access-log line. A quarter of the grace, at most 2 s.
func shutdownMargin(grace time.Duration) time.Duration {
	return min(grace/4, 2*time.Second)
}

// defaultListen (listen) is loopback: a gateway run by hand serves only
// this machine until its config says otherwise; a container's port comes
// from $PORT or $CONTAINER_APP_PORT (assemble.HostOf). withHostDefaults
// applies it to an empty listen.
const defaultListen = "127.0.0.1:8080"

// withHostDefaults is h with its zero settings replaced by the host's
// defaults (the timeouts' and the log level's are server.HostSettings').
func withHostDefaults(h assemble.Host) assemble.Host {
	h.Listen = cmp.Or(h.Listen, defaultListen)
	// The handler's cap (server.New applies the same default): the
	// host's net/http bound is twice it.
	h.MaxHeaderBytes = cmp.Or(h.MaxHeaderBytes, server.DefaultMaxHeaderBytes)
	h.HostSettings = h.HostSettings.WithDefaults()
	return h
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level // "" (log_level left out): info, slog's zero Level
	if level != "" {
		_ = l.UnmarshalText([]byte(level)) // validated by config
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
