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

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/internal/testing/syncbuf"
	"github.com/llmgw/gateway/scripts/stub"
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
// volume mounts, the app's identity's environment (clientID), and nothing
// else (no inherited variables), with Azure's hosts reachable only through
// az.
func startGateway(t *testing.T, bin string, cfg []byte, az *fakeAzure, identityURL, clientID string, extraEnv ...string) *runningGateway {
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
		"AZURE_CLIENT_ID=" + clientID,
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

// azure is the Azure a deployment's gateways see, on loopback: every
// directory (the API's, the tenants', one more) on login.microsoftonline.com
// with the common keys, the apps' managed identities, and the OpenAI
// accounts, each accepting only the identities that have their role on it
// (as the deployment grants: each app's identity on the account its config
// calls).
type azure struct {
	login       *entraLogin
	identity    *managedIdentity
	identityURL string
	accounts    map[string]*fakeAccount
	proxy       *fakeAzure
	bin         string
}

func newAzure(t *testing.T, p params) *azure {
	t.Helper()
	bin, err := buildGateway()
	if err != nil {
		t.Fatal(err)
	}
	a := &azure{
		login:    &entraLogin{dirs: map[string]*entraDirectory{}},
		identity: &managedIdentity{secret: "identity-secret", clientIDs: map[string]bool{}},
		accounts: map[string]*fakeAccount{},
		bin:      bin,
	}
	for _, tid := range []string{homeTenant, otherTenant, fabrikamTenant, northwindTenant, woodgroveTenant} {
		a.login.dirs[tid] = newEntraDirectory(t, tid)
	}
	miSrv := httptest.NewServer(a.identity)
	t.Cleanup(miSrv.Close)
	a.identityURL = miSrv.URL
	hosts := map[string]http.Handler{"login.microsoftonline.com": a.login}
	for _, app := range append([]app{sharedApp(p)}, tenantApps(p)...) {
		a.identity.clientIDs[app.Identity.ClientID] = true
		acct := a.accounts[app.Account]
		if acct == nil {
			key := "backend-key-" + app.Account
			acct = &fakeAccount{granted: map[string]string{}, key: key, backend: stub.New(stub.Options{
				APIKey: key, Name: app.Account, TTFT: time.Millisecond, Interval: time.Millisecond, Tokens: 4,
			})}
			t.Cleanup(acct.backend.Close)
			a.accounts[app.Account] = acct
			hosts[app.Account+".openai.azure.com"] = acct
		}
		acct.granted[a.identity.token(app.Identity.ClientID, "https://cognitiveservices.azure.com")] = app.Identity.ClientID
	}
	a.proxy = newFakeAzure(t, hosts)
	return a
}

func (a *azure) dir(tid string) *entraDirectory { return a.login.dirs[tid] }

// start runs the gateway on app's generated config, as app's identity.
func (a *azure) start(t *testing.T, app app, extraEnv ...string) *runningGateway {
	t.Helper()
	return startGateway(t, a.bin, render(t, app), a.proxy, a.identityURL, app.Identity.ClientID, extraEnv...)
}

// streams asserts a whole SSE stream answered the request.
func streams(t *testing.T, resp *http.Response) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if !strings.Contains(string(b), "data: [DONE]") || strings.Count(string(b), "data: ") < 4 {
		t.Fatalf("not a whole stream:\n%s", b)
	}
}

// TestEntraTokensThroughTheGateway runs the real gateway on the config the
// bicep generates for the shared gateway and calls it the way a client that
// followed the README does: with a v2.0 access token for the API's app
// registration. The gateway fetches Entra's common keys from
// login.microsoftonline.com (a loopback stand-in serving Entra's document
// shapes), gets its backend token from the managed-identity endpoint, and
// streams from "Azure OpenAI" on its real host name.
func TestEntraTokensThroughTheGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway binary")
	}
	p := testParams(false, []tenantParam{
		{ID: homeTenant, Name: "contoso", Models: []string{"gpt-4o-mini"}, Requests: 1000, Interval: "1h"},
	})
	az := newAzure(t, p)
	home, other, acct := az.dir(homeTenant), az.dir(otherTenant), az.accounts[openAIAccount]
	g := az.start(t, sharedApp(p))

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
				streams(t, g.chat(t, tc.tok, "gpt-4o-mini"))
				last := acct.backend.LastRequest()
				if last.Path != "/openai/deployments/gpt-4o-mini-prod/chat/completions" || last.Auth != stub.AuthBearer {
					t.Fatalf("backend got %s with %q credentials", last.Path, last.Auth)
				}
				if c := acct.accepted(); c[len(c)-1].ClientID != identityCID {
					t.Fatalf("the account was called by %s, want the shared identity", c[len(c)-1].ClientID)
				}
			})
		}
		if !strings.Contains(g.logs.String(), `"tenant_name":"contoso"`) {
			t.Errorf("the access log has no tenant_name:\n%s", g.logs.String())
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			tok, model string
			status     int
			code       string
		}{
			// Any directory's token passes authentication; the table decides.
			{"a valid token of a directory not in the table", other.accessToken(t, apiClientID, false, nil), "gpt-4o-mini", 403, "tenant_not_allowed"},
			// Forged combinations: the tid and the iss must name one directory.
			{"tid of another directory, iss of this one", home.accessToken(t, apiClientID, false, map[string]any{"tid": otherTenant}), "gpt-4o-mini", 401, "invalid_token"},
			{"tid of this directory, iss of another", other.accessToken(t, apiClientID, false, map[string]any{"tid": homeTenant}), "gpt-4o-mini", 401, "invalid_token"},
			{"tid climbing out of the issuer", home.accessToken(t, apiClientID, false, map[string]any{"tid": "..", "iss": loginEndpoint + "../v2.0"}), "gpt-4o-mini", 401, "invalid_token"},
			{"no tid", home.accessToken(t, apiClientID, false, map[string]any{"tid": nil}), "gpt-4o-mini", 401, "invalid_token"},
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

	if az.login.commonKeys.Load() == 0 {
		t.Error("the gateway never read Entra's common keys")
	}
	for tid, d := range az.login.dirs {
		if d.discoveries.Load() != 0 {
			t.Errorf("the gateway read directory %s's OpenID configuration; it has its keys URL", tid)
		}
	}
}

// TestRequiredRoles: with GATEWAY_REQUIRED_ROLES, a valid token of a
// directory in the table without the app role is refused with 403.
func TestRequiredRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway binary")
	}
	p := testParams(false, nil)
	p.RequiredRoles = []string{"Gateway.Invoke"}
	az := newAzure(t, p)
	home := az.dir(homeTenant)
	g := az.start(t, sharedApp(p))
	streams(t, g.chat(t, home.accessToken(t, apiClientID, false, nil), "gpt-4o-mini"))
	noRole := home.accessToken(t, apiClientID, false, map[string]any{"roles": []string{"Gateway.Read"}})
	if status, code := errorCode(t, g.chat(t, noRole, "gpt-4o-mini")); status != http.StatusForbidden || code != "insufficient_permissions" {
		t.Fatalf("a token without the role: %d %s", status, code)
	}
	// A delegated token carries scp, no roles: refused unless scopes allow.
	if status, code := errorCode(t, g.chat(t, home.accessToken(t, apiClientID, true, nil), "gpt-4o-mini")); status != http.StatusForbidden || code != "insufficient_permissions" {
		t.Fatalf("a delegated token: %d %s", status, code)
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
	p := testParams(true, []tenantParam{
		{ID: homeTenant, Name: "contoso", Models: []string{"gpt-4o-mini"}, Requests: 2, Interval: "1h"},
	})
	az := newAzure(t, p)
	home, mi := az.dir(homeTenant), az.identity
	srv := redistest.Start(t)
	// The access policy assignment: the identity's object id, its token.
	srv.Do("ACL", "SETUSER", identityOID, "on", ">"+mi.token(identityCID, "https://redis.azure.com"), "~*", "+@all")
	srv.Do("ACL", "SETUSER", "default", "off")

	g := az.start(t, sharedApp(p), "REDIS_URL="+srv.URL())
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
	// No request was decided by the failure policy. The start's warm-up
	// of the store's pool ("limiter store not reachable yet") may time
	// out on some of its connections on a busy machine: it is a warning
	// in the background, not a request the store failed, and the counts
	// above already prove the bucket is kept in Redis.
	if strings.Contains(g.logs.String(), "failure policy applied") {
		t.Fatalf("the limiter could not use Redis:\n%s", g.logs.String())
	}
}
