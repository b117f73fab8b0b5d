// Command coldstart measures how fast the gateway binary is useful after
// its process starts, on both hosts, and prints a markdown table:
//
//	go run ./scripts/coldstart -n 20                 # builds the binary as production does
//	go run ./scripts/coldstart -gateway bin/gateway  # or measures a given one
//
// A warm stub backend (no TTFT, no token interval) and the dev token issuer
// run in-process on loopback. Then, n times for each host, a fresh gateway
// process is started:
//
//   - Lambda: the binary runs against a small in-process Lambda Runtime API
//     that already holds one streaming chat completion; measured from exec
//     to the first byte of the streamed response (the prelude, i.e. the
//     headers) and to the first SSE byte, as the Runtime API receives them.
//   - HTTP: the binary listens on a free port; measured from exec to the
//     first 200 from /healthz (polled), and to the first SSE byte of a
//     streaming chat completion sent right after.
//
// Both paths include what a real cold start pays inside the process:
// config load, wiring, the JWKS fetch for the first token (from the dev
// issuer, on loopback) and one backend round trip. They exclude what the
// platform adds (Lambda's sandbox and code download, a container pull).
//
// The Lambda path uses its own Runtime API rather than the AWS Lambda
// Runtime Interface Emulator: the emulator (v0.0.0-20261030222936) starts
// the function only at the first invocation and buffers a streamed response
// until it ends, so neither the exec time nor the first streamed byte can
// be seen through it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/gateway/scripts/devissuer"
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
	bin := fs.String("gateway", "", "gateway binary (default: build ./functions/gateway as `make build` does)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return errors.New("-n must be at least 1")
	}
	dir, err := os.MkdirTemp("", "coldstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *bin == "" {
		*bin = filepath.Join(dir, "gateway")
		if err := build(ctx, *bin); err != nil {
			return err
		}
	}

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

	fi, _ := os.Stat(*bin)
	fmt.Fprintf(stdout, "Cold start of %s (%d bytes), %d runs per host, stub backend and token issuer warm on loopback:\n\n", filepath.Base(*bin), fi.Size(), *n)
	fmt.Fprintln(stdout, "| host | from process exec to | median | min | max |")
	fmt.Fprintln(stdout, "| --- | --- | ---: | ---: | ---: |")
	row := func(host, what string, d []time.Duration) {
		med, lo, hi := summary(d)
		fmt.Fprintf(stdout, "| %s | %s | %s | %s | %s |\n", host, what, ms(med), ms(lo), ms(hi))
	}
	row("Lambda (Runtime API)", "response headers (prelude) of the first invocation", lambdaHead)
	row("Lambda (Runtime API)", "first SSE byte of the first invocation", lambdaFirst)
	row("HTTP", "`/healthz` 200", httpHealth)
	row("HTTP", "first SSE byte of the first request", httpFirst)
	return nil
}

func build(ctx context.Context, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out,
		"github.com/llmgw/gateway/functions/gateway")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, b)
	}
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
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
log_level: warn
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

// proc is one gateway process.
type proc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer // written by the process until exited closes
	exited chan struct{}
}

// start execs the gateway with env added to ours and returns it with the
// time just before the exec.
func start(bin string, env ...string) (*proc, time.Time, error) {
	p := &proc{cmd: exec.Command(bin), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	t0 := time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, t0, err
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	return p, t0, nil
}

// stop kills the process by its PID and waits for it.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// died reports an error if the process has exited, with its output.
func (p *proc) died() error {
	select {
	case <-p.exited:
		return fmt.Errorf("gateway exited (%v):\n%s", p.cmd.ProcessState, p.out.String())
	default:
		return nil
	}
}

// httpColdStart measures exec → /healthz 200 and exec → first SSE byte.
func httpColdStart(ctx context.Context, bin string, w *world) (health, first time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	port, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	p, t0, err := start(bin, "GATEWAY_CONFIG="+w.config, "BACKEND_KEY="+backendKey, "PORT="+port, "AWS_LAMBDA_RUNTIME_API=")
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	base := "http://127.0.0.1:" + port
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
		if err := p.died(); err != nil {
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
	rt, err := startRuntimeAPI(ev)
	if err != nil {
		return 0, 0, err
	}
	defer rt.close()
	p, t0, err := start(bin, "GATEWAY_CONFIG="+w.config, "BACKEND_KEY="+backendKey, "AWS_LAMBDA_RUNTIME_API="+rt.addr,
		"AWS_LAMBDA_FUNCTION_NAME=gateway", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=1769")
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	select {
	case r := <-rt.result:
		if r.err != nil {
			return 0, 0, r.err
		}
		return r.head.Sub(t0), r.first.Sub(t0), nil
	case <-p.exited:
		return 0, 0, p.died()
	case <-ctx.Done():
		return 0, 0, fmt.Errorf("no response: %w", ctx.Err())
	}
}

// urlEvent is a Function URL event (payload format 2.0) for one streaming
// chat completion.
func urlEvent(token string) ([]byte, error) {
	body, err := jsonString(chatStream)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return []byte(`{"version":"2.0","rawPath":"/v1/chat/completions","rawQueryString":"",` +
		`"headers":{"authorization":"Bearer ` + token + `","content-type":"application/json","host":"coldstart.lambda-url.us-east-1.on.aws"},` +
		`"requestContext":{"accountId":"anonymous","apiId":"coldstart","domainName":"coldstart.lambda-url.us-east-1.on.aws",` +
		`"domainPrefix":"coldstart","requestId":"coldstart-1","time":"` + now.UTC().Format("02/Jan/2006:15:04:05 -0700") + `",` +
		`"timeEpoch":` + strconv.FormatInt(now.UnixMilli(), 10) + `,` +
		`"http":{"method":"POST","path":"/v1/chat/completions","protocol":"HTTP/1.1","sourceIp":"127.0.0.1","userAgent":"coldstart"}},` +
		`"body":` + body + `,"isBase64Encoded":false}`), nil
}

func jsonString(s string) (string, error) {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			return "", fmt.Errorf("control character in %q", s)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}

// runtimeAPI is the smallest Lambda Runtime API that serves one queued
// invocation and times the response's bytes as they arrive.
type runtimeAPI struct {
	addr   string
	srv    *http.Server
	event  []byte
	once   sync.Once
	result chan invocationResult
}

type invocationResult struct {
	head, first time.Time // first byte of the prelude; first byte after it
	err         error
}

func startRuntimeAPI(event []byte) (*runtimeAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rt := &runtimeAPI{addr: ln.Addr().String(), event: event, result: make(chan invocationResult, 1)}
	mux := http.NewServeMux()
	served := make(chan struct{}, 1)
	served <- struct{}{}
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-served:
		default:
			<-r.Context().Done() // one invocation per run: park the next poll
			return
		}
		h := w.Header()
		h.Set("Lambda-Runtime-Aws-Request-Id", "coldstart-1")
		h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10))
		h.Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:012345678912:function:gateway")
		h.Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000;Sampled=0")
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(rt.event)
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) {
		res := timeStream(r.Body)
		w.WriteHeader(http.StatusAccepted)
		rt.deliver(res)
	})
	fail := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
		rt.deliver(invocationResult{err: fmt.Errorf("function error at %s: %s", r.URL.Path, b)})
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", fail)
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", fail)
	rt.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = rt.srv.Serve(ln) }()
	return rt, nil
}

func (rt *runtimeAPI) deliver(r invocationResult) {
	rt.once.Do(func() { rt.result <- r })
}

func (rt *runtimeAPI) close() { _ = rt.srv.Close() }

// timeStream reads a streamed Function URL response (JSON prelude, eight
// NULs, body) and notes when its first byte and its first body byte came.
func timeStream(body io.Reader) invocationResult {
	br := bufio.NewReaderSize(body, 64)
	var res invocationResult
	zeros := 0
	for {
		b, err := br.ReadByte()
		if err != nil {
			res.err = fmt.Errorf("response ended before its body: %w", err)
			return res
		}
		now := time.Now()
		if res.head.IsZero() {
			res.head = now
		}
		if zeros == 8 {
			res.first = now
			if b != 'd' && b != ':' {
				res.err = fmt.Errorf("body starts with %q, not an SSE event", b)
			}
			_, _ = io.Copy(io.Discard, br)
			return res
		}
		if b == 0 {
			zeros++
		} else {
			zeros = 0
		}
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}

func summary(d []time.Duration) (median, lo, hi time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	n := len(s)
	median = s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, s[0], s[n-1]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
}
