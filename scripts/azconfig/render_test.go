// Package azconfig tests the gateway configs that bicep generates for Azure
// Container Apps, one per app (bicep/modules/app.bicep, deployed by
// gateway.bicep for the shared gateway and for every isolated tenant): it
// fills the same template (gateway-config.json) with the same replace()
// pairs the bicep applies, computes each app's inputs the way gateway.bicep
// does, feeds the result to the real config loader, and runs the real
// gateway binary on it against loopback stand-ins for Microsoft Entra ID,
// the managed-identity endpoint, Azure OpenAI and Azure Managed Redis.
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
	Name     string   `json:"name,omitempty"`
	Models   []string `json:"models"`
	Requests int      `json:"requests"`
	Interval string   `json:"interval"`
}

// isolatedParam is one entry of the bicep isolatedTenants parameter; zero
// fields are left out, so gateway.bicep's defaults apply.
type isolatedParam struct {
	ID                  string
	Name                string
	Models              []string
	Requests            int
	Interval            string
	OpenAIAccountName   string
	OpenAIResourceGroup string
	Deployments         []model
}

// model is one entry of the bicep models object, in the order given.
type model struct{ Public, Deployment string }

// identity is a user-assigned identity the deployment makes.
type identity struct{ ClientID, PrincipalID string }

// params are the bicep parameters (and the deployment's own values) that
// the generated configs depend on.
type params struct {
	EntraTenantID   string
	APIClientID     string
	APIAppIDURI     string
	Tenants         []tenantParam
	IsolatedTenants []isolatedParam
	RequiredRoles   []string
	RequiredScopes  []string
	Models          []model
	OpenAIAccount   string // openAiAccountName
	EnableRedis     bool
	// Cloud is environment().name of the cloud the deployment runs in; ""
	// is the public cloud. OpenAITokenScope and RedisTokenScope are the
	// openAiTokenScope and redisTokenScope parameters ("": by cloud).
	Cloud                             string
	OpenAITokenScope, RedisTokenScope string
	// Values the deployment makes: each account's endpoint (openai-access
	// output) and each app's identity (the shared one, then by tenant name).
	Endpoints        map[string]string // account name → endpoint
	Identity         identity
	TenantIdentities map[string]identity
}

// app is what gateway.bicep passes app.bicep for one app, and what the
// deployment makes for it: everything its generated config depends on.
type app struct {
	Name                string
	AuthIssuer, JWKSURL string
	Audiences           []string
	Roles, Scopes       []string
	Rows                []row
	Models              orderedModels
	Account             string
	Endpoint            string
	EnableRedis         bool
	KeyPrefix           string
	Identity            identity
	// The token scopes of Azure OpenAI and Azure Managed Redis.
	OpenAIScope, RedisScope string
}

// row is one row of a generated tenant table (gateway.bicep's tenantRows).
type row struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Models   []string `json:"models"`
	Requests int      `json:"requests"`
	Interval string   `json:"interval"`
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

// The bicep vars and module parameters that compute each app's inputs, as
// written in gateway.bicep and app.bicep; sharedApp, tenantApp and values
// below compute the same. TestBicepIsWhatIsMirrored fails when either side
// changes alone.
var mirroredVars = map[string]map[string]string{
	"gateway.bicep": {
		"authIssuer":       `'${environment().authentication.loginEndpoint}{tenantid}/v2.0'`,
		"authJwksUrl":      `'${environment().authentication.loginEndpoint}common/discovery/v2.0/keys'`,
		"authAudiences":    `[apiClientId, empty(apiAppIdUri) ? 'api://${apiClientId}' : apiAppIdUri]`,
		"tenantTable":      `empty(tenants) ? [{ id: entraTenantId, name: 'home', models: map(items(models), m => m.key), requests: 600, interval: '1m' }] : tenants`,
		"tenantRows":       `map(tenantTable, t => { id: t.id, name: contains(t, 'name') ? t.name : '', models: t.models, requests: contains(t, 'requests') ? t.requests : 600, interval: contains(t, 'interval') ? t.interval : '1m' })`,
		"isolated":         `map(isolatedTenants, t => union({ requests: 600, interval: '1m', openAiAccountName: openAiAccountName, openAiResourceGroup: openAiResourceGroup, deployments: models }, t))`,
		"isolatedAppNames": `map(isolated, t => 'ca-${t.name}')`,
		"sharedAppName":    `'ca-gateway-${token}'`,
		"image":            `!empty(gatewayImage) ? gatewayImage : liveImage.outputs.image`,
	},
	"app.bicep": {
		"poolModels":   `empty(modelNames) ? models : toObject(modelNames, m => m, m => models[m])`,
		"secrets":      `concat([configSecret], redisSecrets, vaultSecrets)`,
		"configHash":   `uniqueString(string(secrets))`,
		"redisSecrets": `enableRedis ? [{ name: 'redis-url', value: redisUrl }] : []`,
		"sharedStore":  `enableRedis ? { backend: 'redis' redis_url_env: 'REDIS_URL' key_prefix: keyPrefix redis_entra: { credential: 'managed-identity' client_id: identity.properties.clientId username: identity.properties.principalId scope: redisTokenScope } } : { backend: 'memory', key_prefix: keyPrefix }`,
	},
	"main.bicep": {
		"cloudSuffixes": `{ AzureCloud: 'azure.com', AzureUSGovernment: 'azure.us', AzureChinaCloud: 'azure.cn' }`,
		"cloudSuffix":   `contains(cloudSuffixes, environment().name) ? cloudSuffixes[environment().name] : 'azure.com'`,
		"openAiScope":   `empty(openAiTokenScope) ? 'https://cognitiveservices.${cloudSuffix}/.default' : openAiTokenScope`,
		"redisScope":    `empty(redisTokenScope) ? 'https://redis.${cloudSuffix}/.default' : redisTokenScope`,
	},
}

// mirroredParams are the app.bicep parameters each module call in
// gateway.bicep passes, as written: the shared app, then every tenant's.
var mirroredParams = map[string]map[string]string{
	"app": {
		"appName":           `sharedAppName`,
		"identityName":      `identity.name`,
		"openAiAccountName": `openAiAccountName`,
		"authIssuer":        `authIssuer`,
		"authJwksUrl":       `authJwksUrl`,
		"authAudiences":     `authAudiences`,
		"requiredRoles":     `requiredRoles`,
		"requiredScopes":    `requiredScopes`,
		"tenantRows":        `tenantRows`,
		"models":            `models`,
		"modelNames":        ``, // not passed: every model
		"enableRedis":       `enableRedis`,
		"keyPrefix":         `'llmgw:'`,
		"image":             `image`,
		"pullIdentityName":  `pullIdentity.name`,
		"openAiTokenScope":  `openAiTokenScope`,
		"redisTokenScope":   `redisTokenScope`,
	},
	"tenantApps": {
		"appName":           `isolatedAppNames[i]`,
		"identityName":      `tenantIdentities[i].name`,
		"openAiAccountName": `t.openAiAccountName`,
		"authIssuer":        `authIssuer`,
		"authJwksUrl":       `authJwksUrl`,
		"authAudiences":     `authAudiences`,
		"requiredRoles":     `requiredRoles`,
		"requiredScopes":    `requiredScopes`,
		"tenantRows":        `[{ id: t.id, name: t.name, models: t.models, requests: t.requests, interval: t.interval }]`,
		"models":            `t.deployments`,
		"modelNames":        `t.models`,
		"enableRedis":       `enableRedis`,
		"keyPrefix":         `'llmgw:${t.name}:'`,
		"image":             `image`,
		"pullIdentityName":  `pullIdentity.name`,
		"openAiTokenScope":  `openAiTokenScope`,
		"redisTokenScope":   `redisTokenScope`,
	},
}

// cloudSuffixes is main.bicep's cloudSuffixes: environment().name → the DNS
// suffix of the cloud's token audiences.
var cloudSuffixes = map[string]string{"AzureCloud": "azure.com", "AzureUSGovernment": "azure.us", "AzureChinaCloud": "azure.cn"}

// scopes are main.bicep's openAiScope and redisScope.
func scopes(p params) (openAI, redis string) {
	suffix, ok := cloudSuffixes[p.Cloud]
	if !ok {
		suffix = "azure.com"
	}
	openAI, redis = p.OpenAITokenScope, p.RedisTokenScope
	if openAI == "" {
		openAI = "https://cognitiveservices." + suffix + "/.default"
	}
	if redis == "" {
		redis = "https://redis." + suffix + "/.default"
	}
	return openAI, redis
}

// common is what gateway.bicep gives every app.
func common(p params) app {
	appIDURI := p.APIAppIDURI
	if appIDURI == "" {
		appIDURI = "api://" + p.APIClientID
	}
	openAIScope, redisScope := scopes(p)
	return app{
		OpenAIScope: openAIScope,
		RedisScope:  redisScope,
		AuthIssuer:  loginEndpoint + "{tenantid}/v2.0",
		JWKSURL:     loginEndpoint + "common/discovery/v2.0/keys",
		Audiences:   []string{p.APIClientID, appIDURI},
		Roles:       orEmpty(p.RequiredRoles),
		Scopes:      orEmpty(p.RequiredScopes),
		EnableRedis: p.EnableRedis,
	}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// sharedApp is the shared gateway: the tenant table (default: the API's
// directory, every model) on the shared account.
func sharedApp(p params) app {
	a := common(p)
	a.Name, a.Account, a.Identity, a.KeyPrefix, a.Models = "shared", p.OpenAIAccount, p.Identity, "llmgw:", p.Models
	a.Endpoint = p.Endpoints[p.OpenAIAccount]
	table := p.Tenants
	if len(table) == 0 {
		var all []string
		for _, m := range p.Models {
			all = append(all, m.Public)
		}
		table = []tenantParam{{ID: p.EntraTenantID, Name: "home", Models: all, Requests: 600, Interval: "1m"}}
	}
	for _, r := range table {
		// gateway.bicep's tenantRows: a row without requests or interval
		// gets 600 a minute.
		if r.Requests == 0 {
			r.Requests = 600
		}
		if r.Interval == "" {
			r.Interval = "1m"
		}
		a.Rows = append(a.Rows, row(r))
	}
	return a
}

// tenantApp is isolated tenant name's app: a one-row table, its own
// identity, account (default the shared one), deployments (default the
// models parameter) and key prefix.
func tenantApp(p params, name string) app {
	var t isolatedParam
	for _, it := range p.IsolatedTenants {
		if it.Name == name {
			t = it
		}
	}
	if t.Name == "" {
		panic("no isolated tenant " + name)
	}
	if t.Requests == 0 {
		t.Requests = 600
	}
	if t.Interval == "" {
		t.Interval = "1m"
	}
	if t.OpenAIAccountName == "" {
		t.OpenAIAccountName = p.OpenAIAccount
	}
	deployments := t.Deployments
	if deployments == nil {
		deployments = p.Models
	}
	a := common(p)
	a.Name, a.Account, a.Identity, a.KeyPrefix = name, t.OpenAIAccountName, p.TenantIdentities[name], "llmgw:"+name+":"
	a.Endpoint = p.Endpoints[t.OpenAIAccountName]
	a.Rows = []row{{t.ID, t.Name, t.Models, t.Requests, t.Interval}}
	for _, m := range t.Models {
		i := slices.IndexFunc(deployments, func(d model) bool { return d.Public == m })
		if i < 0 {
			panic("tenant " + name + " model " + m + " has no deployment: the deployment would fail")
		}
		a.Models = append(a.Models, deployments[i])
	}
	return a
}

// values is what each replace() in app.bicep puts in for a, keyed by the
// value's bicep source text.
func values(t *testing.T, a app) map[string]string {
	t.Helper()
	type entra struct {
		Credential string `json:"credential"`
		ClientID   string `json:"client_id"`
		Username   string `json:"username"`
		Scope      string `json:"scope"`
	}
	var sharedStore any = struct {
		Backend   string `json:"backend"`
		KeyPrefix string `json:"key_prefix"`
	}{"memory", a.KeyPrefix}
	if a.EnableRedis {
		sharedStore = struct {
			Backend     string `json:"backend"`
			RedisURLEnv string `json:"redis_url_env"`
			KeyPrefix   string `json:"key_prefix"`
			RedisEntra  entra  `json:"redis_entra"`
		}{"redis", "REDIS_URL", a.KeyPrefix, entra{"managed-identity", a.Identity.ClientID, a.Identity.PrincipalID, a.RedisScope}}
	}
	return map[string]string{
		"authIssuer":                    a.AuthIssuer,
		"authJwksUrl":                   a.JWKSURL,
		"openAiAccess.outputs.endpoint": a.Endpoint,
		"identity.properties.clientId":  a.Identity.ClientID,
		"openAiTokenScope":              a.OpenAIScope,
		"string(authAudiences)":         bicepJSON(t, a.Audiences),
		"string(requiredRoles)":         bicepJSON(t, a.Roles),
		"string(requiredScopes)":        bicepJSON(t, a.Scopes),
		"string(sharedStore)":           bicepJSON(t, sharedStore),
		"string(tenantRows)":            bicepJSON(t, a.Rows),
		"string(poolModels)":            bicepJSON(t, a.Models),
	}
}

// replacePair is one replace(text, placeholder, value) in app.bicep.
type replacePair struct{ placeholder, value string }

func bicepSource(t *testing.T, file string) string {
	t.Helper()
	if file == "main.bicep" || file == "main.parameters.json" {
		return readFile(t, filepath.Join(root, "bicep", file))
	}
	return readFile(t, filepath.Join(root, "bicep", "modules", file))
}

// bicepReplaces reads the replace() chains of configWithText and
// generatedConfig from app.bicep, in the order ARM applies them.
func bicepReplaces(t *testing.T) []replacePair {
	t.Helper()
	src := bicepSource(t, "app.bicep")
	var pairs []replacePair
	for _, v := range []string{"configWithText", "generatedConfig"} {
		line := regexp.MustCompile(`(?m)^var ` + v + ` = (.*)$`).FindStringSubmatch(src)
		if line == nil {
			t.Fatalf("app.bicep has no one-line var %s", v)
		}
		for _, m := range regexp.MustCompile(`'("?__[A-Z_]+__"?)', ((?:string\()?[A-Za-z.]+\)?)\)`).FindAllStringSubmatch(line[1], -1) {
			pairs = append(pairs, replacePair{m[1], m[2]})
		}
	}
	return pairs
}

// render is the generated config of a: the template with every replace()
// of app.bicep applied (ARM's replace replaces every occurrence).
func render(t *testing.T, a app) []byte {
	t.Helper()
	text := bicepSource(t, "gateway-config.json")
	vals := values(t, a)
	for _, r := range bicepReplaces(t) {
		v, ok := vals[r.value]
		if !ok {
			t.Fatalf("app.bicep fills %s with %s, which this test does not compute", r.placeholder, r.value)
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

// moduleParams reads the params of `module name 'app.bicep'` in
// gateway.bicep: one "key: value" per line.
func moduleParams(t *testing.T, src, name string) map[string]string {
	t.Helper()
	m := regexp.MustCompile(`(?ms)^module ` + name + ` 'app\.bicep' = .*?\n  params: \{\n(.*?)\n  \}\n`).FindStringSubmatch(src)
	if m == nil {
		t.Fatalf("gateway.bicep has no module %s 'app.bicep' with params", name)
	}
	out := map[string]string{}
	for _, l := range strings.Split(m[1], "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ": ")
		if ok {
			out[k] = v
		}
	}
	return out
}

// TestBicepIsWhatIsMirrored: the replace() pairs, the vars behind them and
// the parameters every module call passes are the ones this package
// computes, so that render is the bicep's output for every app.
func TestBicepIsWhatIsMirrored(t *testing.T) {
	pairs := bicepReplaces(t)
	var got []string
	for _, p := range pairs {
		got = append(got, p.value)
	}
	var want []string
	for k := range values(t, sharedApp(testParams(false, nil))) {
		want = append(want, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("app.bicep fills the template with %v; this test computes %v", got, want)
	}
	for file, vars := range mirroredVars {
		src := bicepSource(t, file)
		for name, want := range vars {
			m := regexp.MustCompile(`(?ms)^var ` + name + ` = (.*?)\n(?:var |resource |module |output |@|//|\n)`).FindStringSubmatch(src)
			if m == nil {
				t.Errorf("%s has no var %s", file, name)
				continue
			}
			if got := strings.Join(strings.Fields(m[1]), " "); got != want {
				t.Errorf("%s: var %s changed; update this package and its table:\n got %s\nwant %s", file, name, got, want)
			}
		}
	}
	gw := bicepSource(t, "gateway.bicep")
	for module, want := range mirroredParams {
		got := moduleParams(t, gw, module)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("module %s passes %s: %s; this package computes it as %s", module, k, got[k], v)
			}
		}
	}
	tmpl := bicepSource(t, "gateway-config.json")
	for _, p := range pairs {
		if !strings.Contains(tmpl, p.placeholder) {
			t.Errorf("placeholder %s is not in gateway-config.json", p.placeholder)
		}
	}
	p := threeTenants(true)
	for _, a := range append([]app{sharedApp(p)}, tenantApps(p)...) {
		if left := regexp.MustCompile(`__[A-Z_]+__`).FindAllString(string(render(t, a)), -1); len(left) > 0 {
			t.Errorf("%s: placeholders left unfilled: %v", a.Name, left)
		}
	}
}

// tenantApps is every isolated tenant's app, in parameter order.
func tenantApps(p params) []app {
	var out []app
	for _, it := range p.IsolatedTenants {
		out = append(out, tenantApp(p, it.Name))
	}
	return out
}
