package azconfig

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/redistest"
	"github.com/llmgw/gateway/scripts/stub"
	"github.com/llmgw/gateway/scripts/syncbuf"
)

// binDir holds the gateway binary the tests build; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "azconfig-gateway-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildGateway builds functions/gateway once per test binary, as
// `make build` does.
var buildGateway = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "gateway")
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", bin, "./functions/gateway")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./functions/gateway: %v\n%s", err, out)
	}
	return bin, nil
})

// runningGateway is the gateway binary started on a generated config.
type runningGateway struct {
	URL  string
	logs *syncbuf.Buffer
}

// startGateway runs bin as Container Apps would: the config file the secret
// volume mounts, the identity's environment, and nothing else (no inherited
// variables), with Azure's hosts reachable only through az.
func startGateway(t *testing.T, bin string, cfg []byte, az *fakeAzure, identityURL string, extraEnv ...string) *runningGateway {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gateway.yaml")
	caPath := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caPath, az.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	cmd := exec.Command(bin)
	cmd.Env = []string{
		"GATEWAY_CONFIG=" + cfgPath,
		"CONTAINER_APP_PORT=" + strconv.Itoa(port), // what Container Apps sets; the image's PORT is not set here
		"AZURE_CLIENT_ID=" + identityCID,
		"IDENTITY_ENDPOINT=" + identityURL,
		"IDENTITY_HEADER=identity-secret",
		"HTTPS_PROXY=" + az.ProxyURL,
		"SSL_CERT_FILE=" + caPath,
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	g := &runningGateway{URL: "http://127.0.0.1:" + strconv.Itoa(port), logs: &syncbuf.Buffer{}}
	cmd.Stdout, cmd.Stderr = g.logs, g.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("gateway output:\n%s", g.logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(g.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		select {
		case <-exited:
			t.Fatalf("gateway exited before it was healthy:\n%s", g.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway not healthy after 30s:\n%s", g.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *runningGateway) chat(t *testing.T, token, model string) *http.Response {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, model)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// errorCode reads an OpenAI error response's status and code.
func errorCode(t *testing.T, resp *http.Response) (int, string) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("status %d, not OpenAI error JSON: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, e.Error.Code
}

// azure is the Azure a deployed gateway sees, on loopback: the API's
// directory and another one on login.microsoftonline.com, the app's managed
// identity, and the OpenAI account, whose only accepted credential is the
// identity's token.
type azure struct {
	home, other *entraDirectory
	identity    *managedIdentity
	identityURL string
	backend     *stub.Server
	proxy       *fakeAzure
	bin         string
}

func newAzure(t *testing.T) *azure {
	t.Helper()
	bin, err := buildGateway()
	if err != nil {
		t.Fatal(err)
	}
	a := &azure{
		home:     newEntraDirectory(t, homeTenant),
		other:    newEntraDirectory(t, otherTenant),
		identity: &managedIdentity{clientID: identityCID, secret: "identity-secret"},
		bin:      bin,
	}
	miSrv := httptest.NewServer(a.identity)
	t.Cleanup(miSrv.Close)
	a.identityURL = miSrv.URL
	a.backend = stub.New(stub.Options{
		APIKey: a.identity.token("https://cognitiveservices.azure.com"),
		TTFT:   time.Millisecond, Interval: time.Millisecond, Tokens: 4,
	})
	t.Cleanup(a.backend.Close)
	login := http.NewServeMux()
	login.Handle("/"+homeTenant+"/", a.home)
	login.Handle("/"+otherTenant+"/", a.other)
	a.proxy = newFakeAzure(t, map[string]http.Handler{
		"login.microsoftonline.com":         login,
		openAIAccount + ".openai.azure.com": a.backend,
	})
	return a
}

func (a *azure) startGateway(t *testing.T, cfg []byte, extraEnv ...string) *runningGateway {
	t.Helper()
	return startGateway(t, a.bin, cfg, a.proxy, a.identityURL, extraEnv...)
}

// TestEntraTokensThroughTheGateway runs the real gateway on the config the
// bicep generates for one Entra directory and calls it the way a client that
// followed the README does: with a v2.0 access token for the API's app
// registration. The gateway discovers the directory's keys from
// login.microsoftonline.com (a loopback stand-in serving Entra's document
// shapes), gets its backend token from the managed-identity endpoint, and
// streams from "Azure OpenAI" on its real host name.
func TestEntraTokensThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway binary")
	}
	az := newAzure(t)
	home, other, backend := az.home, az.other, az.backend
	cfg := render(t, testParams(false, []tenantParam{
		{ID: homeTenant, Name: "contoso", Models: []string{"gpt-4o-mini"}, Requests: 1000, Interval: "1h"},
	}))
	g := az.startGateway(t, cfg)

	t.Run("v2.0 access tokens of the API's directory stream", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tok  string
		}{
			{"daemon app, app role", home.accessToken(t, apiClientID, false, nil)},
			{"signed-in user, delegated scope", home.accessToken(t, apiClientID, true, nil)},
			{"audience is the application ID URI", home.accessToken(t, "api://"+apiClientID, false, nil)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp := g.chat(t, tc.tok, "gpt-4o-mini")
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
					t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
				}
				if !strings.Contains(string(b), "data: [DONE]") || strings.Count(string(b), "data: ") < 4 {
					t.Fatalf("not a whole stream:\n%s", b)
				}
				last := backend.LastRequest()
				if last.Path != "/openai/deployments/gpt-4o-mini-prod/chat/completions" || last.Auth != stub.AuthBearer {
					t.Fatalf("backend got %s with %q credentials", last.Path, last.Auth)
				}
			})
		}
	})

	t.Run("the same token for a directory not in the table: 403 tenant_not_allowed", func(t *testing.T) {
		tok := home.accessToken(t, apiClientID, false, map[string]any{"tid": otherTenant})
		if status, code := errorCode(t, g.chat(t, tok, "gpt-4o-mini")); status != http.StatusForbidden || code != "tenant_not_allowed" {
			t.Fatalf("got %d %s", status, code)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			tok, model string
			status     int
			code       string
		}{
			// One issuer: a token another directory signed (its own iss and
			// keys) is not this gateway's, even for the same API.
			{"token of another directory", other.accessToken(t, apiClientID, false, nil), "gpt-4o-mini", 401, "invalid_token"},
			{"token for another API", home.accessToken(t, "00000003-0000-0000-c000-000000000000", false, nil), "gpt-4o-mini", 401, "invalid_token"},
			{"v1.0 issuer", home.accessToken(t, apiClientID, false, map[string]any{"iss": "https://sts.windows.net/" + homeTenant + "/", "ver": "1.0"}), "gpt-4o-mini", 401, "invalid_token"},
			{"expired", home.accessToken(t, apiClientID, false, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}), "gpt-4o-mini", 401, "invalid_token"},
			{"model outside the tenant's list", home.accessToken(t, apiClientID, false, nil), "gpt-4o", 404, "model_not_found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if status, code := errorCode(t, g.chat(t, tc.tok, tc.model)); status != tc.status || code != tc.code {
					t.Fatalf("got %d %s, want %d %s", status, code, tc.status, tc.code)
				}
			})
		}
	})

	if n := home.discoveries.Load(); n == 0 {
		t.Error("the gateway never read the directory's OpenID configuration")
	}
	if other.discoveries.Load() != 0 {
		t.Error("the gateway read another directory's configuration")
	}
}

// TestEntraRedisLimiter runs the generated config with Azure Managed Redis
// on: the limiter logs in to a real redis-server as the identity's object id
// with the identity's token for https://redis.azure.com (an ACL user set up
// as the access policy assignment would be), and the tenant's bucket is kept
// there.
func TestEntraRedisLimiter(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway binary")
	}
	az := newAzure(t)
	home, mi := az.home, az.identity
	srv := redistest.Start(t)
	// The access policy assignment: the identity's object id, its token.
	srv.Do("ACL", "SETUSER", identityOID, "on", ">"+mi.token("https://redis.azure.com"), "~*", "+@all")
	srv.Do("ACL", "SETUSER", "default", "off")

	cfg := render(t, testParams(true, []tenantParam{
		{ID: homeTenant, Name: "contoso", Models: []string{"gpt-4o-mini"}, Requests: 2, Interval: "1h"},
	}))
	g := az.startGateway(t, cfg, "REDIS_URL="+srv.URL())
	tok := home.accessToken(t, apiClientID, false, nil)
	for i := range 2 {
		resp := g.chat(t, tok, "gpt-4o-mini")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i+1, resp.StatusCode)
		}
		if resp.Header.Get("x-ratelimit-remaining-requests") != strconv.Itoa(1-i) {
			t.Fatalf("request %d: remaining %q (a degraded limiter would not count)", i+1, resp.Header.Get("x-ratelimit-remaining-requests"))
		}
	}
	if status, code := errorCode(t, g.chat(t, tok, "gpt-4o-mini")); status != http.StatusTooManyRequests || code != "rate_limit_exceeded" {
		t.Fatalf("third request: %d %s, want 429 rate_limit_exceeded", status, code)
	}
	for _, bad := range []string{"failure policy applied", "limiter store not reachable"} {
		if strings.Contains(g.logs.String(), bad) {
			t.Fatalf("the limiter could not use Redis (%q):\n%s", bad, g.logs.String())
		}
	}
}
