package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/internal/testing/syncbuf"
	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/config"
)

// checkBase is a valid config; the cases below each break one thing.
const checkBase = `listen: 127.0.0.1:0
auth: {issuer: "https://issuer.example", audiences: [gw]}
tenants: [{id: t1, models: [m1, m2], requests: 10}]
pools:
  - name: p1
    kind: vllm
    models: {m1: served}
    endpoints: [{url: "http://127.0.0.1:9"}]
  - name: p2
    kind: openai
    models: {m2: ""}
    endpoints: [{url: "https://127.0.0.1:10"}]
`

// badConfigs are configs that start-up used to reject (with exit status 1
// and no field path) or run with a silently changed meaning; -check must
// now refuse each with its field path.
func badConfigs(t *testing.T) map[string]struct{ cfg, want string } {
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	caFile := testCAFile(t)
	vllmEndpoint := func(s string) string {
		return strings.Replace(checkBase, `{url: "http://127.0.0.1:9"}`, `{url: "http://127.0.0.1:9", `+s+`}`, 1)
	}
	return map[string]struct{ cfg, want string }{
		"negative leeway":       {strings.Replace(checkBase, "audiences: [gw]", "audiences: [gw], leeway: -1s", 1), "auth.leeway: must not be negative"},
		"empty audience":        {strings.Replace(checkBase, "audiences: [gw]", `audiences: [gw, ""]`, 1), "auth.audiences[1]: must not be empty"},
		"unparsable listen":     {strings.Replace(checkBase, "listen: 127.0.0.1:0", "listen: localhost", 1), "listen: must be host:port"},
		"negative connect":      {checkBase + "upstream: {connect_timeout: -1s}\n", "upstream.connect_timeout: must not be negative"},
		"negative header":       {checkBase + "upstream: {header_timeout: -3s}\n", "upstream.header_timeout: must not be negative"},
		"negative header bytes": {checkBase + "max_header_bytes: -1\n", "max_header_bytes: must not be negative"},
		"weight 0":              {vllmEndpoint("weight: 0"), "pools[0].endpoints[0].weight: must be at least 1"},
		"url with query":        {strings.Replace(checkBase, "http://127.0.0.1:9", "http://127.0.0.1:9/?a=1", 1), "pools[0].endpoints[0].url: must not have a query"},
		"organization on vllm":  {vllmEndpoint("organization: org-1"), "pools[0].endpoints[0].organization: only for openai pools"},
		"ca_file not PEM":       {vllmEndpoint(fmt.Sprintf("ca_file: %q", notPEM)), "pools[0].endpoints[0].ca_file:"},
		"unknown field":         {strings.Replace(checkBase, "audiences: [gw]", "audiences: [gw], leway: 1s", 1), "auth.leway: unknown field"},
		"two trusts on one host": {strings.Replace(checkBase, `{url: "https://127.0.0.1:10"}`, fmt.Sprintf(`{url: "https://127.0.0.1:9", ca_file: %q}`, caFile), 1),
			"pools[1].endpoints[0].ca_file: "},
		"unknown feature":                          {strings.Replace(checkBase, "requests: 10}", "requests: 10, features: [{name: web_serch}]}", 1), "tenants[0].features[0].name: must be one of web_search"},
		"account-wide feature on a shared account": {strings.Replace(checkBase, "requests: 10}", "requests: 10, features: [{name: container}]}", 1), `tenants[0].features[0].account_owner: must be true to enable "container"`},
		"negative feature cost":                    {strings.Replace(checkBase, "requests: 10}", "requests: 10, features: [{name: web_search, cost_per_use: -1}]}", 1), "tenants[0].features[0].cost_per_use: must not be negative"},
		"feature twice":                            {strings.Replace(checkBase, "requests: 10}", "requests: 10, features: [{name: mcp}, {name: mcp}]}", 1), "tenants[0].features[1].name: feature \"mcp\" is listed twice"},
		"beta with a comma":                        {strings.Replace(checkBase, "requests: 10}", `requests: 10, anthropic_beta: ["a,b"]}`, 1), "tenants[0].anthropic_beta[0]: must be one anthropic-beta value"},
		"tenant unknown_fields not drop or refuse": {strings.Replace(checkBase, "requests: 10}", "requests: 10, unknown_fields: keep}", 1), `tenants[0].unknown_fields: must be drop or refuse, not "keep"`},
		"pool unknown_fields not drop or refuse":   {strings.Replace(checkBase, "kind: vllm\n", "kind: vllm\n    unknown_fields: pass\n", 1), `pools[0].unknown_fields: must be drop or refuse, not "pass"`},
		"pool field the gateway writes":            {strings.Replace(checkBase, "kind: vllm\n", "kind: vllm\n    fields: [guided_json, cache_salt]\n", 1), `pools[0].fields[1]: field "cache_salt" is written by the gateway`},
		"store backend unknown":                    {checkBase + "store: {backend: mongo}\n", `store.backend: must be memory or redis, not "mongo"`},
		"store backend unknown, limiter's old key": {checkBase + "limiter: {store: mongo}\n", `limiter.store: must be memory or redis, not "mongo"`},
		"redis store without its url":              {checkBase + "store: {backend: redis}\n", "store.redis_url_env: required"},
		"a store setting under both names":         {checkBase + "store: {key_prefix: a:}\nlimiter: {key_prefix: b:}\n", "limiter.key_prefix: deprecated alias of store.key_prefix"},
		"azure-cli with a client":                  {strings.Replace(strings.Replace(checkBase, "kind: vllm", "kind: azure-openai", 1), `{url: "http://127.0.0.1:9"}`, `{url: "http://127.0.0.1:9", auth: entra, entra: {credential: azure-cli, client_id: x}}`, 1), "pools[0].endpoints[0].entra.client_id"},
	}
}

// TestCheckAndStartAgree: -check and start-up run the same validation, so
// both refuse each bad config with the same field path and config.Problems
// (which main maps to exit status 2), and start-up never listens.
func TestCheckAndStartAgree(t *testing.T) {
	for name, tc := range badConfigs(t) {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := writeFile(path, tc.cfg); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"gateway", "-check", "-config", path}, {"gateway", "-config", path}} {
				var out syncbuf.Buffer
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := run(ctx, args, func(string) string { return "" }, &out, &out)
				cancel()
				var p config.Problems
				if !errors.As(err, &p) {
					t.Fatalf("%v: want config.Problems, got %v", args, err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%v: error does not name %q:\n%v", args, tc.want, err)
				}
				if strings.Contains(out.String(), "listening") || strings.Contains(out.String(), "config ok") {
					t.Fatalf("%v: went on with a bad config:\n%s", args, out.String())
				}
			}
		})
	}
}

// TestCheckExitStatus runs main itself (the test binary, re-executed) on a
// bad config: exit status 2, the field path on stderr.
func TestCheckExitStatus(t *testing.T) {
	if path := os.Getenv("GATEWAY_CHECK_TEST_CONFIG"); path != "" {
		os.Args = []string{"gateway", "-check", "-config", path}
		main()
		os.Exit(0)
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := writeFile(path, checkBase+"upstream: {connect_timeout: -1s}\n"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckExitStatus$")
	cmd.Env = append(os.Environ(), "GATEWAY_CHECK_TEST_CONFIG="+path)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit = %v, want status 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "upstream.connect_timeout: must not be negative") {
		t.Fatalf("output lacks the field path:\n%s", out)
	}
}

// TestAcceptedConfigsWire: configs at the edge of what -check accepts (zero
// meaning default, the smallest weights and intervals, the optional endpoint
// fields) are accepted by every constructor start-up calls too.
func TestAcceptedConfigsWire(t *testing.T) {
	caFile := testCAFile(t)
	edges := map[string]string{
		"zero durations mean default": checkBase + "shutdown_grace: 0s\nidle_timeout: 0s\nupstream: {connect_timeout: 0s, header_timeout: 0s}\nlimiter: {timeout: 0s}\n",
		"explicit weight 1 and max":   strings.Replace(checkBase, `[{url: "http://127.0.0.1:9"}]`, `[{url: "http://127.0.0.1:9", weight: 1}, {url: "http://127.0.0.1:11", weight: 1000000}]`, 1),
		"openai organization, project, ca_file": strings.Replace(checkBase, `[{url: "https://127.0.0.1:10"}]`,
			fmt.Sprintf(`[{url: "https://127.0.0.1:10/v1", organization: org-1, project: proj-1, ca_file: %q}]`, caFile), 1),
		"features and betas":           strings.Replace(checkBase, "requests: 10}", "requests: 10, features: [{name: web_search, cost_per_use: 2000}, {name: file_id, account_owner: true}], anthropic_beta: [files-api-2025-04-14]}", 1),
		"listen on every interface":    strings.Replace(checkBase, "listen: 127.0.0.1:0", `listen: ":0"`, 1),
		"auth limits":                  strings.Replace(checkBase, "audiences: [gw]", "audiences: [gw, other], algorithms: [EdDSA, PS512], jwks_refresh_min: 1m, jwks_refresh_max: 1m, leeway: 1ns", 1),
		"redis store, interval in µs":  strings.Replace(checkBase, "requests: 10}", "requests: 10, interval: 1500us}", 1) + "limiter: {store: redis, redis_url_env: R}\n",
		"store section":                strings.Replace(checkBase, "requests: 10}", "requests: 10, tokens_per_minute: 1000}", 1) + "store: {backend: redis, redis_url_env: R, key_prefix: k:, dial_timeout: 2s}\n",
		"managed identity with client": strings.Replace(strings.Replace(checkBase, "kind: vllm", "kind: azure-openai", 1), `{url: "http://127.0.0.1:9"}`, `{url: "http://127.0.0.1:9", auth: entra, entra: {credential: managed-identity, client_id: x}}`, 1),
	}
	getenv := func(k string) string { return map[string]string{"R": "redis://127.0.0.1:1"}[k] }
	for name, cfg := range edges {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := writeFile(path, cfg); err != nil {
				t.Fatal(err)
			}
			var out syncbuf.Buffer
			// -offline: the Redis these configs name is not there
			// (TestCheckAsksTheStore asks one that is).
			if err := run(context.Background(), []string{"gateway", "-check", "-offline", "-config", path}, getenv, &out, &out); err != nil {
				t.Fatalf("-check: %v", err)
			}
			c, err := assemble.Load(path, "", getenv)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			gw, err := wire(ctx, c, getenv, slog.New(slog.DiscardHandler), io.Discard, 0)
			if err != nil {
				t.Fatalf("-check accepted a config start-up refuses: %v", err)
			}
			gw.close()
		})
	}
}

// TestCheckAsksTheStore: with a Redis store -check asks it whether it is
// reachable and of the kind store.redis_cluster says, as start-up does:
// a kind that does not match is a config problem naming the setting (as
// the file wrote it), a store that does not answer an error naming the
// URL's setting, which -offline skips; a store that matches passes.
func TestCheckAsksTheStore(t *testing.T) {
	t.Parallel()
	node := redistest.Start(t)
	clusterNode := redistest.StartWith(t, redistest.Options{Cluster: true})
	tests := []struct {
		name    string
		section string
		url     string
		offline bool
		want    string // "" = config ok
		problem bool   // config.Problems (exit status 2)
	}{
		{"a single node as one", "store: {backend: redis, redis_url_env: R}", node.URL(), false, "", false},
		{"a single node as a cluster", "store: {backend: redis, redis_url_env: R, redis_cluster: true}", node.URL(), false, "store.redis_cluster: ", true},
		{"a cluster node as one", "store: {backend: redis, redis_url_env: R}", clusterNode.URL(), false, "store.redis_cluster: ", true},
		{"the limiter's old keys", "limiter: {store: redis, redis_url_env: R}\nstore: {redis_cluster: true}", node.URL(), false, "store.redis_cluster: ", true},
		{"nobody there", "store: {backend: redis, redis_url_env: R}", "redis://127.0.0.1:1", false, "store.redis_url_env: store not reachable", false},
		{"nobody there, the old key", "limiter: {store: redis, redis_url_env: R}", "redis://127.0.0.1:1", false, "limiter.redis_url_env: store not reachable", false},
		{"nobody there, offline", "store: {backend: redis, redis_url_env: R}", "redis://127.0.0.1:1", true, "", false},
		{"the memory store", "store: {backend: memory}", "", false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := writeFile(path, checkBase+tt.section+"\n"); err != nil {
				t.Fatal(err)
			}
			args := []string{"gateway", "-check", "-config", path}
			if tt.offline {
				args = append(args, "-offline")
			}
			getenv := func(k string) string { return map[string]string{"R": tt.url}[k] }
			var out syncbuf.Buffer
			err := run(t.Context(), args, getenv, &out, &out)
			if tt.want == "" {
				if err != nil || !strings.Contains(out.String(), "config ok") {
					t.Fatalf("-check: %v\n%s", err, out.String())
				}
				return
			}
			var p config.Problems
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.As(err, &p) != tt.problem {
				t.Fatalf("-check: %v; want an error with %q (a config problem: %v)", err, tt.want, tt.problem)
			}
			if strings.Contains(out.String(), "config ok") {
				t.Fatalf("-check said config ok with %v", err)
			}
			t.Logf("-check: %v", err)
		})
	}
}

// testCAFile is a PEM file holding one certificate.
func testCAFile(t *testing.T) string {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return writeCertPEM(t, srv)
}

// TestDeprecatedKeysLogged: a config that still writes the limiter's
// store settings of old starts, and says at start which keys to move.
func TestDeprecatedKeysLogged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := writeFile(path, checkBase+"limiter: {store: memory, key_prefix: k:}\n"); err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"gateway", "-config", path}, func(string) string { return "" }, &out, &out)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "gateway listening") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the gateway did not start:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"limiter.store is deprecated: write store.backend", "limiter.key_prefix is deprecated: write store.key_prefix"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the start's log does not say %q:\n%s", want, out.String())
		}
	}
}
