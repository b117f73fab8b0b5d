// Command coldstart measures how fast the gateway binary is useful after
// its process starts, on both hosts, and prints a markdown table:
//
//	make coldstart                                            # builds bin/gateway, 20 runs per host
//	go run ./scripts/cmd/coldstart -n 20 -gateway bin/gateway # or measures a given binary
//
// A warm stub backend (no TTFT, no token interval) and the dev token issuer
// run in-process on loopback. Then, n times for each host, a fresh gateway
// process is started:
//
//   - Lambda: the binary runs against lambdatest's in-process Lambda
//     Runtime API, which already holds one streaming chat completion;
//     measured from exec to the first byte of the streamed response (the
//     prelude, i.e. the headers) and to the first SSE byte, as the Runtime
//     API receives them.
//   - HTTP: the binary listens on a free port; measured from exec to the
//     first 200 from /healthz (polled), and to the first SSE byte of a
//     streaming chat completion sent right after.
//
// Both paths include what a real cold start pays inside the process:
// config load, wiring, the JWKS fetch for the first token (from the dev
// issuer, on loopback) and one backend round trip. They exclude what the
// platform adds (Lambda's sandbox and code download, a container pull).
//
// The Lambda path uses lambdatest.RuntimeAPI rather than the AWS Lambda
// Runtime Interface Emulator: the emulator (v0.0.0-20261030222936) starts
// the function only at the first invocation and buffers a streamed response
// until it ends, so neither the exec time nor the first streamed byte can
// be seen through it.
package main

import (
	"bytes"
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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/gateway/internal/testing/lambdatest"
	"github.com/llmgw/gateway/internal/testing/loopback"
	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/scripts/internal/stats"
	"github.com/llmgw/gateway/scripts/stub"
)

const (
	audience   = "llm-gateway"
	backendKey = "coldstart-backend-key"
	chatStream = `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	// runTimeout bounds one measurement; a cold start takes milliseconds.
	runTimeout = 30 * time.Second
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func main() {
	ctx, stop := signalContext()
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "coldstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coldstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 15, "cold starts per host")
	bin := fs.String("gateway", "bin/gateway", "gateway binary, as `make build` builds it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *n < 1 {
		return errors.New("-n must be at least 1")
	}
	fi, err := os.Stat(*bin)
	if err != nil {
		return fmt.Errorf("-gateway: %w (`make build` writes bin/gateway)", err)
	}
	dir, err := os.MkdirTemp("", "coldstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	env, err := startWorld(ctx, dir)
	if err != nil {
		return err
	}
	defer env.close()

	var lambdaHead, lambdaFirst, httpHealth, httpFirst []time.Duration
	for i := range *n {
		h, f, err := lambdaColdStart(ctx, *bin, env)
		if err != nil {
			return fmt.Errorf("lambda run %d: %w", i+1, err)
		}
		lambdaHead, lambdaFirst = append(lambdaHead, h), append(lambdaFirst, f)
		h, f, err = httpColdStart(ctx, *bin, env)
		if err != nil {
			return fmt.Errorf("http run %d: %w", i+1, err)
		}
		httpHealth, httpFirst = append(httpHealth, h), append(httpFirst, f)
	}

	fmt.Fprintf(stdout, "Cold start of %s (%d bytes), %d runs per host, stub backend and token issuer warm on loopback:\n\n", filepath.Base(*bin), fi.Size(), *n)
	fmt.Fprintln(stdout, "| host | from process exec to | median | min | max |")
	fmt.Fprintln(stdout, "| --- | --- | ---: | ---: | ---: |")
	row := func(host, what string, d []time.Duration) {
		med, lo, hi := stats.Median(d)
		fmt.Fprintf(stdout, "| %s | %s | %s | %s | %s |\n", host, what, ms(med), ms(lo), ms(hi))
	}
	row("Lambda (Runtime API)", "response headers (prelude) of the first invocation", lambdaHead)
	row("Lambda (Runtime API)", "first SSE byte of the first invocation", lambdaFirst)
	row("HTTP", "`/healthz` 200", httpHealth)
	row("HTTP", "first SSE byte of the first request", httpFirst)
	return nil
}

// world is what every cold start talks to: the stub backend, the dev
// issuer, the config, a token.
type world struct {
	config  string
	token   string
	servers []*http.Server
}

func (w *world) close() {
	for _, s := range w.servers {
		_ = s.Close()
	}
}

func startWorld(ctx context.Context, dir string) (*world, error) {
	w := &world{}
	serve := func(h http.Handler) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		w.servers = append(w.servers, s)
		go func() { _ = s.Serve(ln) }()
		return "http://" + ln.Addr().String(), nil
	}
	iss, err := devissuer.New(devissuer.Options{})
	if err != nil {
		return nil, err
	}
	issURL, err := serve(iss.Handler())
	if err != nil {
		return nil, err
	}
	iss.SetIssuer(issURL)
	stubURL, err := serve(stub.New(stub.Options{TTFT: -1, Interval: -1, Tokens: 16, APIKey: backendKey}))
	if err != nil {
		w.close()
		return nil, err
	}
	w.token, err = iss.Mint(devissuer.Claims{Tenant: "contoso", Subject: "coldstart", Audience: []string{audience}})
	if err != nil {
		w.close()
		return nil, err
	}
	w.config = filepath.Join(dir, "gateway.yaml")
	cfg := fmt.Sprintf(`log_level: warn
auth: {issuer: %q, audiences: [%s]}
tenants:
  - {id: contoso, models: [llama], requests: 100000, interval: 1m}
pools:
  - name: stub
    kind: vllm
    models: {llama: ""}
    forward_headers: [X-Stub-TTFT, X-Stub-Interval, X-Stub-Tokens]
    endpoints:
      - {url: %q, api_key_env: BACKEND_KEY}
`, issURL, audience, stubURL)
	if err := os.WriteFile(w.config, []byte(cfg), 0o600); err != nil {
		w.close()
		return nil, err
	}
	// Warm the stub and the issuer's handlers, so the runs measure the gateway.
	for _, u := range []string{issURL + "/.well-known/openid-configuration", stubURL + "/v1/models"} {
		if resp, err := http.Get(u); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	return w, ctx.Err()
}

// start execs the gateway with env added to ours.
func start(bin string, env ...string) (*lambdatest.Process, error) {
	return lambdatest.StartProcess(bin, nil, append(os.Environ(), env...))
}

// died reports an error if the process has exited, with its output.
func died(p *lambdatest.Process) error {
	select {
	case <-p.Exited():
		return fmt.Errorf("gateway exited (%v):\n%s", p.Err(), p.Output())
	default:
		return nil
	}
}

// httpColdStart measures exec → /healthz 200 and exec → first SSE byte.
func httpColdStart(ctx context.Context, bin string, w *world) (health, first time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	port, err := loopback.FreePort()
	if err != nil {
		return 0, 0, err
	}
	p, err := start(bin, "GATEWAY_CONFIG="+w.config, "BACKEND_KEY="+backendKey, "PORT="+strconv.Itoa(port), "AWS_LAMBDA_RUNTIME_API=")
	if err != nil {
		return 0, 0, err
	}
	defer p.Stop(0)
	t0 := p.Started
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				health = time.Since(t0)
				break
			}
		}
		if err := died(p); err != nil {
			return 0, 0, err
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("no /healthz 200: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(chatStream))
	req.Header.Set("Authorization", "Bearer "+w.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return 0, 0, fmt.Errorf("chat completion: %s %s", resp.Status, b)
	}
	var one [1]byte
	if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
		return 0, 0, fmt.Errorf("reading the stream: %w", err)
	}
	first = time.Since(t0)
	_, _ = io.Copy(io.Discard, resp.Body)
	return health, first, nil
}

// lambdaColdStart measures exec → prelude and exec → first SSE byte of the
// first invocation, queued before the process starts.
func lambdaColdStart(ctx context.Context, bin string, w *world) (head, first time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	ev, err := urlEvent(w.token)
	if err != nil {
		return 0, 0, err
	}
	rt, err := lambdatest.NewRuntimeAPI()
	if err != nil {
		return 0, 0, err
	}
	defer rt.Close()
	inv, err := rt.Invoke(ctx, ev, time.Time{})
	if err != nil {
		return 0, 0, err
	}
	p, err := start(bin, "GATEWAY_CONFIG="+w.config, "BACKEND_KEY="+backendKey, rt.Env(),
		"AWS_LAMBDA_FUNCTION_NAME=gateway", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1769")
	if err != nil {
		return 0, 0, err
	}
	defer p.Stop(0)
	// A gateway that exits makes FirstBytes fail at once rather than at
	// runTimeout.
	go func() {
		select {
		case <-p.Exited():
			cancel()
		case <-ctx.Done():
		}
	}()
	h, f, err := inv.FirstBytes(ctx)
	if err == nil || errors.Is(err, lambdatest.ErrNoPrelude) {
		// The whole response says best what went wrong, as an /error post.
		if cerr := checkStream(ctx, inv); cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		if derr := died(p); derr != nil {
			return 0, 0, derr
		}
		return 0, 0, err
	}
	return h.Sub(p.Started), f.Sub(p.Started), nil
}

// checkStream waits for the whole response and checks that it is a 200
// SSE stream, so a fast error answer is never taken for a cold start.
func checkStream(ctx context.Context, inv *lambdatest.Invocation) error {
	res, err := inv.Wait(ctx)
	if err != nil {
		return err
	}
	if res.Endpoint != "response" {
		return fmt.Errorf("function error %s: %s", res.ErrorType(), res.Body)
	}
	prelude, body, err := lambdatest.ParseStreamingResponse(bytes.NewReader(res.Body))
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(body)
	if prelude.StatusCode != http.StatusOK || !bytes.HasPrefix(b, []byte("data:")) && !bytes.HasPrefix(b, []byte(":")) {
		return fmt.Errorf("not an SSE stream: status %d, body %.200q", prelude.StatusCode, b)
	}
	return nil
}

// urlEvent is the Function URL event (payload format 2.0) for one
// streaming chat completion.
func urlEvent(token string) ([]byte, error) {
	r, err := http.NewRequest(http.MethodPost, "https://coldstart.lambda-url.us-east-1.on.aws/v1/chat/completions", strings.NewReader(chatStream))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Authorization", "Bearer "+token)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "coldstart")
	ev, err := lambdatest.URLEvent(r)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ev)
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}
