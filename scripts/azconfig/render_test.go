// Package azconfig tests the gateway config that bicep/modules/gateway.bicep
// generates for Azure Container Apps: it fills the same template
// (gateway-config.json) with the same replace() pairs the bicep applies,
// feeds the result to the real config loader, and runs the real gateway
// binary on it against loopback stand-ins for Microsoft Entra ID, the
// managed-identity endpoint and Azure OpenAI.
package azconfig

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository root.
var root = filepath.Join("..", "..")

// loginEndpoint is environment().authentication.loginEndpoint in Azure's
// public cloud.
const loginEndpoint = "https://login.microsoftonline.com/"

// tenantParam is one row of the bicep tenants parameter.
type tenantParam struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Models   []string `json:"models"`
	Requests int      `json:"requests"`
	Interval string   `json:"interval"`
}

// model is one entry of the bicep models object, in the order given.
type model struct{ Public, Deployment string }

// params are the bicep parameters (and the deployment's own values) that
// the generated config depends on.
type params struct {
	EntraTenantID string
	APIClientID   string
	APIAppIDURI   string
	Tenants       []tenantParam
	Models        []model
	EnableRedis   bool
	// Values the deployment makes: the account's endpoint (openai-access
	// output) and the identity's client and object IDs.
	OpenAIEndpoint      string
	IdentityClientID    string
	IdentityPrincipalID string
}

// bicepJSON is ARM's string() of an array or object: compact JSON, keys in
// the order written, no HTML escaping.
func bicepJSON(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// orderedModels marshals the models object in its given order.
type orderedModels []model

func (m orderedModels) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.Public)
		v, _ := json.Marshal(e.Deployment)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// The bicep vars that compute the values, as written in gateway.bicep;
// values() below computes the same. TestBicepIsWhatIsMirrored fails when
// either side changes alone.
var mirroredVars = map[string]string{
	"authIssuer":    `'${environment().authentication.loginEndpoint}${entraTenantId}/v2.0'`,
	"authAudiences": `[apiClientId, empty(apiAppIdUri) ? 'api://${apiClientId}' : apiAppIdUri]`,
	"tenantTable":   `empty(tenants) ? [{ id: entraTenantId, name: 'home', models: map(items(models), m => m.key), requests: 600, interval: '1m' }] : tenants`,
	"tenantRows":    `map(tenantTable, t => { id: t.id, models: t.models, requests: t.requests, interval: t.interval })`,
	"limiter":       `enableRedis ? { store: 'redis' redis_url_env: 'REDIS_URL' redis_entra: { credential: 'managed-identity' client_id: identity.properties.clientId username: identity.properties.principalId } } : { store: 'memory' }`,
}

// values is what each replace() in gateway.bicep puts in, keyed by the
// value's bicep source text.
func values(t *testing.T, p params) map[string]string {
	t.Helper()
	appIDURI := p.APIAppIDURI
	if appIDURI == "" {
		appIDURI = "api://" + p.APIClientID
	}
	table := p.Tenants
	if len(table) == 0 {
		var all []string
		for _, m := range p.Models {
			all = append(all, m.Public)
		}
		table = []tenantParam{{ID: p.EntraTenantID, Name: "home", Models: all, Requests: 600, Interval: "1m"}}
	}
	type row struct {
		ID       string   `json:"id"`
		Models   []string `json:"models"`
		Requests int      `json:"requests"`
		Interval string   `json:"interval"`
	}
	rows := make([]row, 0, len(table))
	for _, r := range table {
		rows = append(rows, row{r.ID, r.Models, r.Requests, r.Interval})
	}
	var limiter any = struct {
		Store string `json:"store"`
	}{"memory"}
	if p.EnableRedis {
		type entra struct {
			Credential string `json:"credential"`
			ClientID   string `json:"client_id"`
			Username   string `json:"username"`
		}
		limiter = struct {
			Store       string `json:"store"`
			RedisURLEnv string `json:"redis_url_env"`
			RedisEntra  entra  `json:"redis_entra"`
		}{"redis", "REDIS_URL", entra{"managed-identity", p.IdentityClientID, p.IdentityPrincipalID}}
	}
	return map[string]string{
		"authIssuer":                    loginEndpoint + p.EntraTenantID + "/v2.0",
		"openAiAccess.outputs.endpoint": p.OpenAIEndpoint,
		"identity.properties.clientId":  p.IdentityClientID,
		"string(authAudiences)":         bicepJSON(t, []string{p.APIClientID, appIDURI}),
		"string(limiter)":               bicepJSON(t, limiter),
		"string(tenantRows)":            bicepJSON(t, rows),
		"string(models)":                bicepJSON(t, orderedModels(p.Models)),
	}
}

// replacePair is one replace(text, placeholder, value) in gateway.bicep.
type replacePair struct{ placeholder, value string }

// bicepReplaces reads the replace() chains of configWithText and
// generatedConfig from gateway.bicep, in the order ARM applies them.
func bicepReplaces(t *testing.T) []replacePair {
	t.Helper()
	src := readFile(t, filepath.Join(root, "bicep", "modules", "gateway.bicep"))
	var pairs []replacePair
	for _, v := range []string{"configWithText", "generatedConfig"} {
		line := regexp.MustCompile(`(?m)^var ` + v + ` = (.*)$`).FindStringSubmatch(src)
		if line == nil {
			t.Fatalf("gateway.bicep has no one-line var %s", v)
		}
		for _, m := range regexp.MustCompile(`'("?__[A-Z_]+__"?)', ((?:string\()?[A-Za-z.]+\)?)\)`).FindAllStringSubmatch(line[1], -1) {
			pairs = append(pairs, replacePair{m[1], m[2]})
		}
	}
	return pairs
}

// render is the generated config for p: the template with every replace()
// of gateway.bicep applied (ARM's replace replaces every occurrence).
func render(t *testing.T, p params) []byte {
	t.Helper()
	text := readFile(t, filepath.Join(root, "bicep", "modules", "gateway-config.json"))
	vals := values(t, p)
	for _, r := range bicepReplaces(t) {
		v, ok := vals[r.value]
		if !ok {
			t.Fatalf("gateway.bicep fills %s with %s, which this test does not compute", r.placeholder, r.value)
		}
		text = strings.ReplaceAll(text, r.placeholder, v)
	}
	return []byte(text)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBicepIsWhatIsMirrored: the replace() pairs and the vars behind them are
// the ones this package computes, so that render is the bicep's output.
func TestBicepIsWhatIsMirrored(t *testing.T) {
	pairs := bicepReplaces(t)
	var got []string
	for _, p := range pairs {
		got = append(got, p.value)
	}
	var want []string
	for k := range values(t, params{}) {
		want = append(want, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("gateway.bicep fills the template with %v; this test computes %v", got, want)
	}
	src := readFile(t, filepath.Join(root, "bicep", "modules", "gateway.bicep"))
	for name, want := range mirroredVars {
		m := regexp.MustCompile(`(?ms)^var ` + name + ` = (.*?)\n(?:var |resource |module |output |//|\n)`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("gateway.bicep has no var %s", name)
			continue
		}
		if got := strings.Join(strings.Fields(m[1]), " "); got != want {
			t.Errorf("var %s changed; update values() and this table:\n got %s\nwant %s", name, got, want)
		}
	}
	tmpl := readFile(t, filepath.Join(root, "bicep", "modules", "gateway-config.json"))
	for _, p := range pairs {
		if !strings.Contains(tmpl, p.placeholder) {
			t.Errorf("placeholder %s is not in gateway-config.json", p.placeholder)
		}
	}
	if left := regexp.MustCompile(`__[A-Z_]+__`).FindAllString(string(render(t, testParams(false, nil))), -1); len(left) > 0 {
		t.Errorf("placeholders left unfilled: %v", left)
	}
}
