// Package infra holds the AWS SAM template that deploys the gateway to
// Lambda, the config it ships, and the test that checks both against what
// the binary reads.
package infra

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/cloudformation/serverless"
	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/llmgw/gateway/shared/config"
)

const (
	templateFile = "template.yaml"
	configFile   = "gateway.yaml" // shipped in the package as /var/task/gateway.yaml
	functionName = "Gateway"
	// secretRef is how every secret must reach the function: a Secrets
	// Manager dynamic reference, resolved by CloudFormation at deploy time.
	secretRef = "{{resolve:secretsmanager:"
)

// apiClientID is the API's application (client) ID a deployer passes as
// ApiClientId: the aud of its Entra v2.0 access tokens.
const apiClientID = "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b"

// Parameters every stack needs, as a deployer would give them: the API and
// the secrets.
var secretParams = map[string]any{
	"ApiClientId":          apiClientID,
	"OpenAIKeySecret":      "arn:aws:secretsmanager:us-east-1:123456789012:secret:openai-AbCdEf",
	"AzureOpenAIKeySecret": "azure-openai-key",
	"RedisUrlSecret":       "gateway/redis-url",
}

// unmodelled lists, per resource, the properties goformation v7.14.9 does
// not model yet (it rejects unknown fields): they are checked in the raw
// form and left out of what goformation parses. Any other unknown
// property still fails the parse.
var unmodelled = map[string][]string{
	functionName:                 {"LoggingConfig"},
	"GatewayUrlInvokePermission": {"InvokedViaFunctionUrl"},
}

// open is not safe to call from parallel tests: goformation's YAML
// processor registers its tag resolvers in a package-level map on every
// call. These tests take milliseconds, so none is parallel.
//
// open resolves the template's intrinsic functions (goformation's
// processor: parameter defaults overridden by params, conditions
// evaluated) and parses it with goformation. It returns the parsed
// template and the resolved raw form, which still holds the unmodelled
// properties.
func open(t *testing.T, params map[string]any) (*cloudformation.Template, map[string]any) {
	t.Helper()
	all := map[string]any{}
	for k, v := range secretParams {
		all[k] = v
	}
	for k, v := range params {
		all[k] = v
	}
	b, err := os.ReadFile(templateFile)
	if err != nil {
		t.Fatal(err)
	}
	js, err := intrinsics.ProcessYAML(b, &intrinsics.ProcessorOptions{
		ParameterOverrides:        all,
		EvaluateConditions:        true,
		IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{"Ref": refOrResource},
	})
	if err != nil {
		t.Fatalf("resolving intrinsic functions: %v", err)
	}
	var raw, stripped map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(js, &stripped)
	// A property set to AWS::NoValue is removed (goformation leaves null).
	dropNoValue(raw)
	dropNoValue(stripped)
	for name, props := range unmodelled {
		p := rawProps(t, stripped, name)
		for _, k := range props {
			if _, ok := p[k]; !ok {
				t.Errorf("%s.%s is gone: drop it from unmodelled", name, k)
			}
			delete(p, k)
		}
	}
	js, err = json.Marshal(stripped)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := goformation.ParseJSON(js)
	if err != nil {
		t.Fatalf("goformation: %v", err)
	}
	return tmpl, raw
}

// dropNoValue removes the object properties whose value resolved to
// AWS::NoValue (null), as CloudFormation does.
func dropNoValue(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
				continue
			}
			dropNoValue(e)
		}
	case []any:
		for _, e := range x {
			dropNoValue(e)
		}
	}
}

// refOrResource resolves Ref as goformation does (parameters, pseudo
// parameters) and a Ref to a resource, which goformation drops, as
// "Ref:<logical id>", so a test can check what points where.
func refOrResource(name string, input, template any) any {
	if v := intrinsics.Ref(name, input, template); v != nil {
		return v
	}
	if id, ok := input.(string); ok && id != "AWS::NoValue" {
		return "Ref:" + id
	}
	return nil
}

func function(t *testing.T, tmpl *cloudformation.Template) *serverless.Function {
	t.Helper()
	fn, err := tmpl.GetServerlessFunctionWithName(functionName)
	if err != nil {
		t.Fatalf("no AWS::Serverless::Function %s: %v", functionName, err)
	}
	return fn
}

// rawProps returns a resource's resolved Properties.
func rawProps(t *testing.T, raw map[string]any, name string) map[string]any {
	t.Helper()
	res, _ := raw["Resources"].(map[string]any)
	r, _ := res[name].(map[string]any)
	p, _ := r["Properties"].(map[string]any)
	if p == nil {
		t.Fatalf("resource %s has no properties", name)
	}
	return p
}

func str(p *string) string {
	if p == nil {
		return "<unset>"
	}
	return *p
}

func TestFunctionShape(t *testing.T) {
	tmpl, raw := open(t, nil)
	fn := function(t, tmpl)
	url := fn.FunctionUrlConfig
	if url == nil {
		t.Fatal("no FunctionUrlConfig")
	}
	code := ""
	if fn.CodeUri != nil && fn.CodeUri.String != nil {
		code = *fn.CodeUri.String
	}
	tests := []struct {
		name, got, want string
	}{
		{"runtime", str(fn.Runtime), "provided.al2023"},
		{"handler", str(fn.Handler), "bootstrap"},
		{"architectures", strings.Join(fn.Architectures, ","), "arm64"},
		// The zip `make package-lambda` builds for that architecture.
		{"code", code, "../bin/lambda/gateway-lambda-arm64.zip"},
		{"URL auth type", url.AuthType, "NONE"},
		{"URL invoke mode", str(url.InvokeMode), "RESPONSE_STREAM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
			}
		})
	}
	t.Run("memory is one vCPU", func(t *testing.T) {
		if fn.MemorySize == nil || *fn.MemorySize != 1769 {
			t.Errorf("MemorySize %v, want 1769", fn.MemorySize)
		}
	})
	t.Run("timeout within Lambda's 15 minutes and above the deadline margin", func(t *testing.T) {
		cfg := shippedConfig(t, func(string) string { return "set" })
		if fn.Timeout == nil || *fn.Timeout > 900 || float64(*fn.Timeout) <= cfg.Lambda.DeadlineMargin.D().Seconds() {
			t.Errorf("Timeout %v", fn.Timeout)
		}
	})
	t.Run("log group with retention", func(t *testing.T) {
		lg, err := tmpl.GetLogsLogGroupWithName("GatewayLogGroup")
		if err != nil || lg.RetentionInDays == nil || *lg.RetentionInDays <= 0 {
			t.Fatalf("log group %+v %v", lg, err)
		}
		lc, _ := rawProps(t, raw, functionName)["LoggingConfig"].(map[string]any)
		if lc["LogGroup"] != "Ref:GatewayLogGroup" {
			t.Errorf("the function logs to %v, not GatewayLogGroup", lc["LogGroup"])
		}
	})
	t.Run("public URL invoke permission", func(t *testing.T) {
		p := rawProps(t, raw, "GatewayUrlInvokePermission")
		if p["Action"] != "lambda:InvokeFunction" || p["Principal"] != "*" || p["InvokedViaFunctionUrl"] != true || p["FunctionName"] != "Ref:"+functionName {
			t.Errorf("permission %v, want lambda:InvokeFunction for * only via the Function URL", p)
		}
	})
}

func TestReservedConcurrency(t *testing.T) {
	tests := []struct {
		name  string
		param any
		want  *int
	}{
		{"default: unreserved", "", nil},
		{"set", 20, ptr(20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := function(t, must(open(t, map[string]any{"ReservedConcurrency": tt.param})))
			got := fn.ReservedConcurrentExecutions
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("ReservedConcurrentExecutions %v, want %v", deref(got), deref(tt.want))
			}
		})
	}
}

// TestEnvironmentMatchesConfig checks the template against what the binary
// reads: GATEWAY_CONFIG names the shipped config, the config loads and
// validates (config.Load reports every env var it names that is unset)
// with exactly the template's environment, every secret it names comes
// from Secrets Manager, and the template sets nothing the config does not
// read.
func TestEnvironmentMatchesConfig(t *testing.T) {
	fn := function(t, must(open(t, nil)))
	if fn.Environment == nil {
		t.Fatal("no Environment")
	}
	vars := fn.Environment.Variables
	if got := vars["GATEWAY_CONFIG"]; got != "/var/task/"+configFile {
		t.Fatalf("GATEWAY_CONFIG = %q, want /var/task/%s (the config in the package)", got, configFile)
	}
	cfg, err := config.LoadOverlay(configFile, vars["GATEWAY_CONFIG_OVERLAY"], func(k string) string { return vars[k] })
	if err != nil {
		t.Fatalf("the stack's config does not load: %v", err)
	}

	secrets := secretEnv(cfg)
	for _, name := range secrets {
		t.Run(name, func(t *testing.T) {
			v := vars[name]
			if !strings.HasPrefix(v, secretRef) || !strings.HasSuffix(v, "}}") || v == secretRef+"}}" {
				t.Errorf("%s = %q, want a Secrets Manager dynamic reference, never an inline value", name, v)
			}
		})
	}
	want := map[string]bool{"GATEWAY_CONFIG": true, "GATEWAY_CONFIG_OVERLAY": true}
	for _, n := range secrets {
		want[n] = true
	}
	for name := range vars {
		if !want[name] {
			t.Errorf("the template sets %s, which the shipped config does not read", name)
		}
	}
	if cfg.Limiter.Store != "redis" {
		t.Errorf("limiter.store %q: on Lambda a memory store is per execution environment", cfg.Limiter.Store)
	}
}

// shippedConfig loads the config the package ships, with getenv as its
// environment, failing the test on any problem.
func shippedConfig(t *testing.T, getenv func(string) string) *config.Config {
	t.Helper()
	cfg, err := config.Load(configFile, getenv)
	if err != nil {
		t.Fatalf("the shipped config does not load with the template's environment: %v", err)
	}
	return cfg
}

// secretEnv lists the env vars the config reads secrets from.
func secretEnv(cfg *config.Config) []string {
	set := map[string]bool{}
	add := func(n string) {
		if n != "" {
			set[n] = true
		}
	}
	if cfg.Limiter.Store == "redis" {
		add(cfg.Limiter.RedisURLEnv)
		add(cfg.Limiter.RedisPasswordEnv)
	}
	for _, p := range cfg.Pools {
		for _, e := range p.Endpoints {
			add(e.APIKeyEnv)
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func must(tmpl *cloudformation.Template, _ map[string]any) *cloudformation.Template { return tmpl }

func ptr(i int) *int { return &i }

func deref(p *int) any {
	if p == nil {
		return "<unset>"
	}
	return *p
}
