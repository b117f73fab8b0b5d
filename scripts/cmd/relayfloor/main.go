// Command relayfloor serves the benchmark's zero-logic floor (package
// scripts/relayfloor: httputil.ReverseProxy, flushing after every write) in
// front of one backend:
//
//	go run ./scripts/cmd/relayfloor -listen 127.0.0.1:9300 -backend http://127.0.0.1:9100
//
// An https backend behind a private CA is trusted with -ca-file.
//
// -epoll dials the backend leg through scripts/relayfloor/epollconn, the
// prototype that owns read readiness (the bench's floor-epoll), to measure
// what that saves per relayed event.
package main

import (
	"context"
	"crypto/x509"
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

	"github.com/llmgw/gateway/scripts/internal/privateca"
	"github.com/llmgw/gateway/scripts/relayfloor"
	"github.com/llmgw/gateway/scripts/relayfloor/epollconn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "relayfloor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("relayfloor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9300", "listen address")
	backend := fs.String("backend", "http://127.0.0.1:9100", "backend base URL")
	idle := fs.Int("max-idle-conns-per-host", 4096, "keep-alive pool size per backend host")
	epoll := fs.Bool("epoll", false, "dial the backend leg through the epollconn prototype")
	caFile := fs.String("ca-file", "", "PEM CA bundle an https backend is verified against (default: the system's roots)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	u, err := url.Parse(*backend)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-backend %q: want an http(s) URL", *backend)
	}
	var roots *x509.CertPool
	if *caFile != "" {
		if roots, err = privateca.Pool(*caFile); err != nil {
			return fmt.Errorf("-ca-file: %w", err)
		}
	}
	h := relayfloor.New(u, *idle, roots, log.New(stderr, "relayfloor: ", 0))
	if *epoll {
		tr, ok := h.Transport.(*http.Transport)
		if !ok {
			return fmt.Errorf("relayfloor.New's transport is %T, not *http.Transport", h.Transport)
		}
		tr.DialContext = epollconn.Dialer{Dialer: &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}}.DialContext
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	fmt.Fprintf(stdout, "relayfloor listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// The bench stops the floor between runs; open streams are not worth
	// waiting for.
	_ = srv.Close()
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
