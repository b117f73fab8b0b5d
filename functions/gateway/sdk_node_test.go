package main

// The official Node SDK (scripts/sdktest) against a live gateway, and the
// helpers every node-based test shares. The Go SDK's tests are in
// sdk_test.go and sdk_clients_test.go, which the race pass leaves out.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/testtool"
	"github.com/llmgw/gateway/scripts/stub"
)

// TestSDKNode runs scripts/sdktest (node --test with the official openai
// npm package) against a live gateway. It fails, never skips, when node or
// the package is missing: `make test` installs it with npm ci.
func TestSDKNode(t *testing.T) {
	t.Parallel()
	node, dir := nodeSDK(t)
	// Two endpoints (stored Responses must find theirs) and a short
	// keepalive interval (a slow first token brings comments).
	g := startGateway(t, options{stubs: 2, stubOpts: stub.Options{Tokens: 12}, tenants: sdkBudgetTenants,
		upstreamCfg: "upstream: {max_attempts: 3, header_timeout: 5s, keepalive_interval: 40ms}\n"})
	env := append(cleanEnv(), "GATEWAY_URL="+g.URL+"/v1", "TOKEN="+g.token("contoso"), "EXPECT_TOKENS=12",
		"BUDGET_TOKEN="+g.token("budgeted"), "TPM_TOKEN="+g.token("tpm"))
	nodeTest(t, node, dir, env, "sdk.test.mjs", "clients.test.mjs")
}

// nodeTest runs node --test on files in dir with env, and fails on a
// failure or when nothing passed.
func nodeTest(t *testing.T, node, dir string, env []string, files ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "pass") {
		t.Fatalf("node --test printed no passes:\n%s", out)
	}
	t.Logf("node --test:\n%s", out)
}

// cleanEnv is the environment without OPENAI_* (the SDK would read them) and
// without proxies (loopback only).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OPENAI_") || strings.EqualFold(k, "HTTP_PROXY") || strings.EqualFold(k, "HTTPS_PROXY") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// sdkBudgetTenants are tenants: rows with token budgets for the SDK tests:
// "budgeted" has a monthly quota of 100 tokens (two small answers) and
// caps output at 8 tokens; "tpm" has a per-minute limit below any
// request's prompt bound.
const sdkBudgetTenants = "  - {id: budgeted, models: [llama], requests: 1000, interval: 1h, token_quota: 100, quota_period: month, max_output_tokens: 8}\n" +
	"  - {id: tpm, models: [llama], requests: 1000, interval: 1h, tokens_per_minute: 30}\n"

// nodeSDK finds node and scripts/sdktest with its openai package; a test
// that lacks them fails in CI and skips elsewhere (testtool.Missing).
func nodeSDK(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testtool.Missing(t, "node not found on PATH: install Node.js 20+ and run `make test` (it runs `npm ci --prefix scripts/sdktest`)")
	}
	dir, err = filepath.Abs(filepath.Join("..", "..", "scripts", "sdktest"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		testtool.Missing(t, "scripts/sdktest/node_modules/openai missing: run `make test` (or `npm ci --prefix scripts/sdktest`): %v", err)
	}
	return node, dir
}
