// Command devissuer serves a development token issuer (package
// scripts/devissuer) on loopback: OIDC discovery, a JWKS, and
// /mint?tenant=..&sub=..&aud=..&ttl=..&alg=.. for signed test tokens.
//
//	go run ./scripts/cmd/devissuer -addr 127.0.0.1:9200
//	curl 'http://127.0.0.1:9200/mint?tenant=t1&sub=alice&aud=llm-gateway'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/llmgw/gateway/scripts/devissuer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "devissuer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("devissuer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9200", "listen address (keep it on loopback: /mint signs tokens for anyone who asks)")
	issuer := fs.String("issuer", "", "issuer URL (default http://<addr>)")
	maxAge := fs.Duration("max-age", devissuer.DefaultMaxAge, "Cache-Control max-age of the JWKS")
	if err := fs.Parse(args); err != nil {
		return err
	}
	iss, err := devissuer.New(devissuer.Options{Issuer: *issuer, MaxAge: *maxAge})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	if *issuer == "" {
		iss.SetIssuer("http://" + ln.Addr().String())
	}
	srv := &http.Server{Handler: iss.Handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "devissuer: issuer %s, jwks %s/jwks.json, mint %s/mint?tenant=t1&sub=dev&aud=llm-gateway\n",
		iss.IssuerURL(), iss.IssuerURL(), iss.IssuerURL())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			return err
		}
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
