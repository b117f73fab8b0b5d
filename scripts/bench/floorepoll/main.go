// Command floorepoll is the bench's floor (scripts/relayfloor) with its
// backend leg dialed through shared/upstream/epollconn: the same
// httputil.ReverseProxy, one change, so that the bench measures what
// owning read readiness on the backend leg saves per relayed event.
// `go run ./scripts/bench -epoll-floor` builds and measures it beside the
// floor.
//
//	go run ./scripts/bench/floorepoll -listen 127.0.0.1:9301 -backend http://127.0.0.1:9100
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmgw/gateway/scripts/relayfloor"
	"github.com/llmgw/gateway/shared/upstream/epollconn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "floorepoll:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("floorepoll", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9301", "listen address")
	backend := fs.String("backend", "http://127.0.0.1:9100", "backend base URL")
	idle := fs.Int("max-idle-conns-per-host", 4096, "keep-alive pool size per backend host")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*backend)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("-backend %q: want an http URL", *backend)
	}
	h := relayfloor.New(u, *idle, log.New(stderr, "floorepoll: ", 0))
	tr, ok := h.Transport.(*http.Transport)
	if !ok {
		return fmt.Errorf("relayfloor.New's transport is %T, not *http.Transport", h.Transport)
	}
	tr.DialContext = epollconn.Dialer{Dialer: &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}}.DialContext
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "floorepoll listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	_ = srv.Close()
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
