// Command stub serves the stub model backend (package scripts/stub) as a
// separate process, for `make run` and the benchmark: OpenAI, Azure OpenAI
// and vLLM paths (the Responses API included), streaming like a loaded vLLM.
//
//	go run ./scripts/cmd/stub -addr 127.0.0.1:9100 -ttft 90ms -interval 14ms -tokens 128
//
// With -tls-cert and -tls-key it serves HTTPS, HTTP/1.1 only unless -http2
// offers h2 by ALPN: the backend legs the bench measures beside plain HTTP.
// GET /stub/stats answers the stub's counters (stub.Stats) as JSON, so the
// bench can tell which protocol a relay negotiated.
//
// It logs nothing per request: at 1,500 concurrent streams a log line per
// request would cost more than the stub itself.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/gateway/scripts/stub"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "stub:", err)
		os.Exit(1)
	}
}

// shutdownGrace bounds Shutdown, which after Server.Close only waits for
// handlers to notice; then the listener's connections are closed.
const shutdownGrace = 5 * time.Second

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stub", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9100", "listen address")
	ttft := fs.Duration("ttft", stub.DefaultTTFT, "delay to the first token of a stream (negative: none)")
	interval := fs.Duration("interval", stub.DefaultInterval, "delay between tokens (negative: none)")
	tokens := fs.Int("tokens", stub.DefaultTokens, "completion tokens per response (negative: none)")
	promptTokens := fs.Int("prompt-tokens", 0, "reported prompt_tokens (0: request body length / 4)")
	apiKey := fs.String("api-key", "", "required API key, as Bearer or (Azure paths) api-key (empty: no auth)")
	name := fs.String("name", "", "value of the "+stub.NameHeader+" response header")
	nonStreamDelay := fs.Duration("non-stream-delay", 0, "delay of non-streaming answers")
	models := fs.String("models", stub.DefaultModel, "comma-separated model ids for /v1/models")
	prose := fs.Bool("prose", false, `answer with English sentences, one word a token (default: " tok" per token)`)
	certFile := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate (chain) (with -tls-key)")
	keyFile := fs.String("tls-key", "", "the PEM private key of -tls-cert")
	offerH2 := fs.Bool("http2", false, "with -tls-cert, offer HTTP/2 by ALPN besides HTTP/1.1")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if (*certFile == "") != (*keyFile == "") {
		return errors.New("-tls-cert and -tls-key go together")
	}
	if *offerH2 && *certFile == "" {
		return errors.New("-http2 needs -tls-cert: the stub offers HTTP/2 only by ALPN")
	}
	st := stub.New(stub.Options{
		TTFT:           *ttft,
		Interval:       *interval,
		Tokens:         *tokens,
		PromptTokens:   *promptTokens,
		Name:           *name,
		APIKey:         *apiKey,
		NonStreamDelay: *nonStreamDelay,
		Models:         strings.Split(*models, ","),
		Prose:          *prose,
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// No ReadTimeout or WriteTimeout: either would cut long streams (a
	// read deadline that passes mid-stream cancels the request context).
	srv := &http.Server{
		Handler:           withStats(st),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	fmt.Fprintf(stdout, "stub listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	if *certFile != "" {
		// Set explicitly: a TLS server's default would offer h2 too.
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetHTTP2(*offerH2)
		go func() { errc <- srv.ServeTLS(ln, *certFile, *keyFile) }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Abort open streams and hung requests first: the run is over, and
	// Shutdown would otherwise wait for each stream's last token (or, for
	// a hang, forever).
	st.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		_ = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// statsPath is where the stub answers its counters.
const statsPath = "/stub/stats"

// withStats answers GET statsPath with st's counters and passes every
// other request to st unchanged (no ServeMux: it would clean and redirect
// the odd paths the stub must answer as a backend does).
func withStats(st *stub.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != statsPath || r.Method != http.MethodGet {
			st.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st.Stats())
	})
}
