package infra

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/tenant"
)

// entraLogin stands in for login.microsoftonline.com: every request the
// verifier makes is sent to one loopback server that serves the common keys
// at Entra's path and nothing else, so the shipped issuer and jwks_url stay
// exactly as they ship.
type entraLogin struct {
	iss  *devissuer.Issuer
	srv  *httptest.Server
	host string // the host the config names
}

func newEntraLogin(t *testing.T, jwksURL string) *entraLogin {
	t.Helper()
	iss, err := devissuer.New(devissuer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /common/discovery/v2.0/keys", http.StripPrefix("/common/discovery/v2.0/keys", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/jwks.json"
		iss.Handler().ServeHTTP(w, r)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(jwksURL, "https://")
	host = host[:strings.IndexByte(host, '/')]
	return &entraLogin{iss: iss, srv: srv, host: host}
}

// RoundTrip sends a request for the login host to the loopback server.
func (l *entraLogin) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != l.host {
		return nil, fmt.Errorf("unexpected request to %s", r.URL.Host)
	}
	r = r.Clone(r.Context())
	r.URL.Scheme, r.URL.Host = "http", strings.TrimPrefix(l.srv.URL, "http://")
	return http.DefaultTransport.RoundTrip(r)
}

// v2Token mints what Entra ID issues as a v2.0 access token for the API: aud
// the API's client ID, iss the directory's v2.0 issuer, tid and oid,
// azp the calling client, ver "2.0", an app role.
func (l *entraLogin) v2Token(t *testing.T, tid, aud string) string {
	t.Helper()
	tok, err := l.iss.Mint(devissuer.Claims{
		Tenant:   tid,
		Subject:  "b7c1d2e3-f4a5-4b6c-8d7e-9f0a1b2c3d4e",
		Audience: []string{aud},
		Issuer:   "https://" + l.host + "/" + tid + "/v2.0",
		Extra: map[string]any{
			"oid": "b7c1d2e3-f4a5-4b6c-8d7e-9f0a1b2c3d4e", "azp": "0d9e8f7a-6b5c-4d3e-2f1a-0b9c8d7e6f5a",
			"azpacr": "1", "ver": "2.0", "roles": []string{"Gateway.Invoke"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// verifierFor builds the verifier the function builds from cfg's auth
// section (functions/gateway's newVerifier), fetching keys through login.
func verifierFor(t *testing.T, a auth.Config, login *entraLogin) *auth.Verifier {
	t.Helper()
	v, err := auth.New(a, &http.Client{Transport: login, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestShippedConfigAcceptsEntraV2Tokens: the config a stack runs (the
// shipped gateway.yaml with the stack's overlay) accepts an Entra v2.0
// access token for the API, whose aud is the API's client ID, on the shared
// stack and on a tenant stack, and whatever case the directory ID is written
// in; a token for another audience is refused.
func TestShippedConfigAcceptsEntraV2Tokens(t *testing.T) {
	const shippedTenant = "11111111-1111-1111-1111-111111111111" // gateway.yaml's table
	const fabrikam = "3c4d5e6f-7081-4a2b-9c3d-4e5f60718293"
	for _, tc := range []struct {
		name, tid string
		params    map[string]any
	}{
		{"shared stack", shippedTenant, nil},
		{"tenant stack", fabrikam, tenantStack(fabrikam, "fabrikam", "gpt-4o-mini")},
		{"tenant stack, directory ID in upper case", fabrikam, tenantStack(strings.ToUpper(fabrikam), "fabrikam", "gpt-4o-mini")},
		{"shared stack with an application ID URI", shippedTenant, map[string]any{"ApiAppIdUri": "api://llm-gateway"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := stackConfig(t, tc.params)
			login := newEntraLogin(t, cfg.Auth.JWKSURL)
			v := verifierFor(t, cfg.Auth, login)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := v.Verify(ctx, "Bearer "+login.v2Token(t, tc.tid, apiClientID))
			if err != nil {
				t.Fatalf("an Entra v2.0 token for the API: %v (audiences %v)", err, cfg.Auth.Audiences)
			}
			rows := make([]tenant.Row, 0, len(cfg.Tenants))
			for _, r := range cfg.Tenants {
				rows = append(rows, tenant.Row{ID: r.ID, Name: r.Name, Models: r.Models})
			}
			if tenant.NewTable(rows).Lookup(p.Tenant) == nil {
				t.Fatalf("tenant %q is not in the stack's table %+v", p.Tenant, cfg.Tenants)
			}
			if _, err := v.Verify(ctx, "Bearer "+login.v2Token(t, tc.tid, "api://llm-gateway-other")); err == nil {
				t.Fatal("a token for another audience was accepted")
			}
		})
	}
}

// TestSecretRotationReachesTheFunction: CloudFormation resolves a dynamic
// reference again only when the reference changes, so the rotation step
// is a new *SecretVersion: the reference then names that version (AWS's
// form secret-id:SecretString:json-key:version-stage:version-id, stage
// empty with an id), and it differs from the one before. Without a version
// each stack keeps its original reference.
func TestSecretRotationReachesTheFunction(t *testing.T) {
	const v1, v2 = "EXAMPLE1-90ab-cdef-fedc-ba987EXAMPLE", "EXAMPLE2-90ab-cdef-fedc-ba987EXAMPLE"
	for _, s := range []struct{ env, secret, version string }{
		{"OPENAI_API_KEY", "OpenAIKeySecret", "OpenAIKeySecretVersion"},
		{"AZURE_OPENAI_API_KEY", "AzureOpenAIKeySecret", "AzureOpenAIKeySecretVersion"},
		{"REDIS_URL", "RedisUrlSecret", "RedisUrlSecretVersion"},
	} {
		t.Run(s.env, func(t *testing.T) {
			ref := func(version string) string {
				p := map[string]any{}
				if version != "" {
					p[s.version] = version
				}
				return function(t, must(open(t, p))).Environment.Variables[s.env]
			}
			name := secretParams[s.secret]
			if got, want := ref(""), fmt.Sprintf("{{resolve:secretsmanager:%s}}", name); got != want {
				t.Errorf("unpinned: %s, want %s", got, want)
			}
			first, rotated := ref(v1), ref(v2)
			if want := fmt.Sprintf("{{resolve:secretsmanager:%s:SecretString:::%s}}", name, v1); first != want {
				t.Errorf("pinned: %s, want %s", first, want)
			}
			if first == rotated {
				t.Error("a new version leaves the reference as it was: CloudFormation would not read the secret again")
			}
			if !patternAllows(t, s.version, v1) || !patternAllows(t, s.version, "") || patternAllows(t, s.version, "AWSCURRENT}}") {
				t.Errorf("%s's pattern: want a VersionId or empty", s.version)
			}
		})
	}
}

// TestTenantStackRules evaluates the template's Rules as CloudFormation does
// before it creates anything: a tenant stack needs a name and models (an
// empty TenantModels would deploy a function that refuses every request);
// the shared stack needs neither.
func TestTenantStackRules(t *testing.T) {
	_, raw := open(t, nil)
	rules, _ := raw["Rules"].(map[string]any)
	if len(rules) == 0 {
		t.Fatal("template.yaml has no Rules")
	}
	for _, tc := range []struct {
		name   string
		params map[string]any
		ok     bool
	}{
		{"shared stack", map[string]any{"TenantId": "", "TenantName": "", "TenantModels": []any{""}}, true},
		{"tenant stack", map[string]any{"TenantId": "t1", "TenantName": "fabrikam", "TenantModels": []any{"gpt-4o"}}, true},
		{"tenant stack without models", map[string]any{"TenantId": "t1", "TenantName": "fabrikam", "TenantModels": []any{""}}, false},
		{"tenant stack with an empty model", map[string]any{"TenantId": "t1", "TenantName": "fabrikam", "TenantModels": []any{"gpt-4o", ""}}, false},
		{"tenant stack without a name", map[string]any{"TenantId": "t1", "TenantName": "", "TenantModels": []any{"gpt-4o"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := true
			for name := range rules {
				if !ruleHolds(t, name, tc.params) {
					ok = false
				}
			}
			if ok != tc.ok {
				t.Errorf("rules hold: %v, want %v", ok, tc.ok)
			}
		})
	}
	// A tenant's function name stays within Lambda's 64 characters for the
	// longest name TenantName allows.
	longest := strings.Repeat("a", 29)
	if !patternAllows(t, "TenantName", longest) || maxLength(t, "TenantName") != len(longest) {
		t.Fatal("TenantName's length bound is not the README's 29")
	}
	for _, a := range architectures {
		params := tenantStack("t1", longest, "gpt-4o")
		params["Architecture"] = a.param
		fn := function(t, must(open(t, params)))
		if n := len(str(fn.FunctionName)); n > 64 {
			t.Errorf("%s: function name %s is %d characters", a.param, str(fn.FunctionName), n)
		}
	}
}

// ruleHolds evaluates rule name's condition and assertions from the raw
// template with params over the defaults, supporting the rule functions
// the template uses (Fn::Not, Fn::Equals, Fn::Contains, Ref).
func ruleHolds(t *testing.T, name string, params map[string]any) bool {
	t.Helper()
	doc := source(t)
	rule := doc["Rules"].(map[string]any)[name].(map[string]any)
	defaults := map[string]any{}
	for k, p := range doc["Parameters"].(map[string]any) {
		if d, ok := p.(map[string]any)["Default"]; ok {
			defaults[k] = d
		}
	}
	ref := func(k string) any {
		if v, ok := params[k]; ok {
			return v
		}
		return defaults[k]
	}
	var eval func(v any) any
	eval = func(v any) any {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		for fn, arg := range m {
			args, _ := arg.([]any)
			switch fn {
			case "Ref":
				return ref(arg.(string))
			case "Fn::Not":
				return !eval(args[0]).(bool)
			case "Fn::Equals":
				return fmt.Sprint(eval(args[0])) == fmt.Sprint(eval(args[1]))
			case "Fn::Contains":
				list, _ := eval(args[0]).([]any)
				for _, e := range list {
					if fmt.Sprint(e) == fmt.Sprint(eval(args[1])) {
						return true
					}
				}
				return false
			}
			t.Fatalf("rule function %s is not evaluated here", fn)
		}
		return v
	}
	if c, ok := rule["RuleCondition"]; ok && !eval(c).(bool) {
		return true
	}
	for _, a := range rule["Assertions"].([]any) {
		if !eval(a.(map[string]any)["Assert"]).(bool) {
			return false
		}
	}
	return true
}

func maxLength(t *testing.T, name string) int {
	t.Helper()
	_, raw := open(t, nil)
	p, _ := raw["Parameters"].(map[string]any)[name].(map[string]any)
	n, _ := p["MaxLength"].(float64)
	return int(n)
}

// TestCfnLint runs cfn-lint, which also runs the SAM translator on the
// template, when it is installed (it is a PyPI package: the machine image
// carries it, `make` cannot install it).
func TestCfnLint(t *testing.T) {
	if testing.Short() {
		t.Skip("cfn-lint takes seconds")
	}
	bin, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Skip("cfn-lint is not installed (pip install cfn-lint; not installable from this project's registries)")
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, templateFile)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("cfn-lint %s: %v\n%s", templateFile, err, out.String())
	}
}
