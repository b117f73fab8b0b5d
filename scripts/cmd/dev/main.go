// Command dev is what `make run` starts: the bundled stub backend, the local
// dev token issuer, and the gateway binary on the demo config, all on
// loopback. It prints a ready curl line with a fresh token; Ctrl-C stops it
// all. With -otel (or OTEL=1 in the environment: `OTEL=1 make run`) it also
// starts the test collector of scripts/otelcol and points the gateway's
// telemetry at it, writing what arrives where a person can read it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/gateway/internal/testing/otelcoltest"
	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/scripts/stub"
)

// demoBackendKey is the stub's api key in the demo: the gateway reads it
// from DEMO_BACKEND_KEY, as a real deployment reads its backend secrets.
const demoBackendKey = "demo-backend-key"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

func run() error {
	gatewayBin := flag.String("gateway", "bin/gateway", "gateway binary")
	config := flag.String("config", "scripts/dev/demo.yaml", "gateway config")
	stubAddr := flag.String("stub", "127.0.0.1:9100", "stub backend address (must match the config)")
	issuerAddr := flag.String("issuer", "127.0.0.1:9200", "dev issuer address (must match the config's auth.issuer)")
	gatewayURL := flag.String("url", "http://127.0.0.1:8080", "where the gateway listens (per the config)")
	otel := flag.Bool("otel", os.Getenv("OTEL") == "1", "also start the test collector (scripts/otelcol) and export the gateway's telemetry to it (default: OTEL=1)")
	otelDir := flag.String("otel-dir", "bin/otel", "where the collector writes what it receives")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	backend := stub.New(stub.Options{APIKey: demoBackendKey, Name: "stub", Prose: true,
		Models: []string{"gpt-4o-prod", "gpt-4o-mini-2024-07-18", "o4-mini", "meta-llama/Llama-3.1-8B-Instruct"}})
	stubSrv, err := serve(*stubAddr, backend)
	if err != nil {
		return fmt.Errorf("stub: %w", err)
	}
	defer stubSrv.Close()

	iss, err := devissuer.New(devissuer.Options{Issuer: "http://" + *issuerAddr})
	if err != nil {
		return err
	}
	issSrv, err := serve(*issuerAddr, iss.Handler())
	if err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	defer issSrv.Close()

	cmd := exec.Command(*gatewayBin, "-config", *config)
	cmd.Env = append(os.Environ(), "DEMO_BACKEND_KEY="+demoBackendKey, "DEMO_KEYS_SECRET="+demoKeysSecret)
	otelNote := ""
	if *otel {
		col, err := startCollector(ctx, *otelDir)
		if err != nil {
			return fmt.Errorf("collector: %w", err)
		}
		defer func() { _ = col.Process.Kill(); _ = col.Wait() }()
		cmd.Env = append(cmd.Env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+otelAddr, "OTEL_METRIC_EXPORT_INTERVAL=10000", "OTEL_SERVICE_NAME=llmgw-dev")
		otelNote = fmt.Sprintf(`
Telemetry goes to the collector on %[1]s (metrics every 10 s, spans as
they end). Each batch is one line of OTLP JSON in %[2]s/otlp.jsonl, e.g.
  tail -f %[2]s/otlp.jsonl | jq -c '.resourceMetrics[]?.scopeMetrics[].metrics[] | {name, sum, histogram}'
and a line per batch in the collector's log, %[2]s/otelcol.log.
`, otelAddr, *otelDir)
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start gateway: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	if err := waitHealthy(ctx, *gatewayURL+"/healthz", exited); err != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return err
	}
	token, err := iss.Mint(devissuer.Claims{Tenant: "contoso", Subject: "dev-user", Audience: []string{"llm-gateway"}, TTL: 12 * time.Hour})
	if err != nil {
		return err
	}
	operator, err := iss.Mint(devissuer.Claims{Tenant: "ops", Subject: "dev-operator", Audience: []string{"llm-gateway"}, TTL: time.Minute,
		Extra: map[string]any{"roles": []string{demoAdminRole}}})
	if err != nil {
		return err
	}
	key, err := demoKey(ctx, *gatewayURL, operator)
	if err != nil {
		return err
	}
	fmt.Print(readyText(*gatewayURL, "http://"+*stubAddr, *issuerAddr, token, key, otelNote))

	select {
	case err := <-exited:
		return fmt.Errorf("gateway exited: %v", err)
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	return nil
}

// demoKeysSecret is the demo's api_keys secret (DEMO_KEYS_SECRET):
// demo-only, published here, never to be used by a real gateway.
const demoKeysSecret = "demo-only-gateway-keys-secret-not-for-production"

// demoAdminRole is the demo config's api_keys.admin_role.
const demoAdminRole = "Gateway.Admin"

// demoKey makes contoso's demo gateway key (12 hours) on the admin
// route with operator, an operator's token carrying demoAdminRole.
func demoKey(ctx context.Context, gatewayURL, operator string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gatewayURL+"/admin/keys", strings.NewReader(`{"tenant":"contoso","user":"dev-user","ttl":"12h"}`))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+operator)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("demo key: %w", err)
	}
	defer resp.Body.Close()
	var made struct{ Key string }
	if err := json.NewDecoder(resp.Body).Decode(&made); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("demo key: %s (%v)", resp.Status, err)
	}
	return made.Key, nil
}

// otelAddr is the collector's OTLP/HTTP address in the dev setup (the
// standard port).
const otelAddr = "127.0.0.1:4318"

// startCollector builds scripts/otelcol (once; later runs reuse the
// binary) and starts it with its OTLP receiver on otelAddr, the jsonfile
// exporter into dir/otlp.jsonl and the debug exporter's one line per batch
// into dir/otelcol.log.
func startCollector(ctx context.Context, dir string) (*exec.Cmd, error) {
	fmt.Println("building and starting the collector (scripts/otelcol; the first build takes a while)")
	bin, err := otelcoltest.Binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http: {endpoint: %q}
exporters:
  jsonfile: {path: %q}
  debug: {verbosity: basic}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    metrics: {receivers: [otlp], exporters: [jsonfile, debug]}
    traces: {receivers: [otlp], exporters: [jsonfile, debug]}
`, otelAddr, filepath.Join(abs, "otlp.jsonl"))
	cfgPath := filepath.Join(abs, "otelcol.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(abs, "otelcol.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	_ = logf.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", otelAddr, time.Second); err == nil {
			_ = c.Close()
			return cmd, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("not listening on %s; see %s", otelAddr, logf.Name())
		}
	}
}

func serve(addr string, h http.Handler) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "dev:", err)
		}
	}()
	return srv, nil
}

func waitHealthy(ctx context.Context, url string, exited <-chan error) error {
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("gateway exited before it was healthy: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readyText is what `make run` prints once the gateway is healthy: the
// curl lines, with token (tenant contoso) and the dev issuer's mint lines
// for the other demo tenants. TestReadyTextTenants checks each line
// against scripts/dev/demo.yaml.
func readyText(gatewayURL, stubURL, issuerAddr, token, key, otelNote string) string {
	return fmt.Sprintf(`
Gateway ready on %[1]s (stub backend %[2]s, dev issuer http://%[3]s).
Stream a chat completion through it (tenant contoso: every model, token
budgets of 5M a minute and 500M a month; token valid 12h):

curl -N %[1]s/v1/chat/completions \
  -H "Authorization: Bearer %[4]s" \
  -H "Content-Type: application/json" \
  -d '{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'

The Responses API (named events; continue with "previous_response_id"):

curl -N %[1]s/v1/responses \
  -H "Authorization: Bearer %[4]s" \
  -H "Content-Type: application/json" \
  -d '{"model":"o4-mini","stream":true,"input":"Hello!"}'

The Messages API with contoso's demo gateway key (a static key for
editors and CLIs, valid 12h; also as "Authorization: Bearer"; docs/keys.md):

curl -N %[1]s/v1/messages \
  -H 'x-api-key: %[6]s' \
  -H "anthropic-version: 2023-06-01" \
  -H "Content-Type: application/json" \
  -d '{"model":"claude-haiku-5-5","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Hello!"}]}'

An Azure OpenAI client: endpoint %[1]s, the token as its api key,
deployment = a model name (e.g. gpt-4o), any date-shaped api-version.

Claude Code, Codex and the Agents SDK run with only their base URL and
this token (their default models are served by alias): docs/clients.md.

More tokens (each tenant can use gpt-4o and the Claude models):
  fabrikam, 60 requests a minute:
    curl 'http://%[3]s/mint?tenant=fabrikam&sub=me&aud=llm-gateway'
  tailspin, a 2000-token daily quota (shows the 429 insufficient_quota):
    curl 'http://%[3]s/mint?tenant=tailspin&sub=me&aud=llm-gateway'
%[5]sCtrl-C stops everything.

`, gatewayURL, stubURL, issuerAddr, token, otelNote, key)
}
