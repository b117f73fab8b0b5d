// Package infra holds the AWS SAM template that deploys the gateway to
// Lambda, the config it ships, and the test that checks both against what
// the binary reads.
package infra

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/cloudformation/serverless"
	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/config"
)

const (
	templateFile = "template.yaml"
	configFile   = "gateway.yaml" // shipped in the package as /var/task/gateway.yaml
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

// unmodelled lists, per resource type, the properties goformation v7.14.9
// does not model yet (it rejects unknown fields): they are checked in the
// raw form and left out of what goformation parses. Any other unknown
// property still fails the parse.
var unmodelled = map[string][]string{
	"AWS::Serverless::Function": {"LoggingConfig"},
}

// holdsKey is where open keeps a resource's evaluated Condition while the
// intrinsic functions are resolved: goformation's processor evaluates a
// "Condition" key in place of the whole object that holds it.
const holdsKey = "x-condition-holds"

// open is not safe to call from parallel tests: goformation's YAML
// processor registers its tag resolvers in a package-level map on every
// call. These tests take milliseconds, so none is parallel.
//
// open resolves the template as CloudFormation would deploy it for params
// over the defaults: SAM's Globals merged into each function (applyGlobals),
// intrinsic functions resolved and conditions evaluated (goformation's
// processor), and the resources whose Condition is false left out. It
// parses the result with goformation and returns the parsed template and
// the resolved raw form, which still holds the unmodelled properties.
func open(t *testing.T, params map[string]any) (*cloudformation.Template, map[string]any) {
	t.Helper()
	all := map[string]any{}
	for k, v := range secretParams {
		all[k] = v
	}
	for k, v := range params {
		all[k] = v
	}
	doc := source(t)
	applyGlobals(doc)
	// Each resource's Condition becomes a value to resolve like any other.
	for _, r := range sectionObjects(doc, "Resources") {
		if c, ok := r["Condition"]; ok {
			delete(r, "Condition")
			r[holdsKey] = map[string]any{"Fn::If": []any{c, true, false}}
		}
	}
	src, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	js, err := intrinsics.ProcessJSON(src, &intrinsics.ProcessorOptions{
		ParameterOverrides:        all,
		EvaluateConditions:        true,
		IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{"Ref": refOrResource, "Fn::GetAtt": getAtt},
	})
	if err != nil {
		t.Fatalf("resolving intrinsic functions: %v", err)
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	for id, r := range sectionObjects(raw, "Resources") {
		if holds, ok := r[holdsKey]; ok {
			delete(r, holdsKey)
			if holds != true {
				delete(raw["Resources"].(map[string]any), id)
			}
		}
	}
	// A property set to AWS::NoValue is removed (goformation leaves null).
	dropNoValue(raw)
	var stripped map[string]any
	if js, err = json.Marshal(raw); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(js, &stripped)
	for id, r := range sectionObjects(stripped, "Resources") {
		typ, _ := r["Type"].(string)
		for _, k := range unmodelled[typ] {
			p := rawProps(t, stripped, id)
			if _, ok := p[k]; !ok {
				t.Errorf("%s.%s is gone: drop it from unmodelled", id, k)
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

// source returns the template as written, its YAML tags as the Fn::
// objects they stand for and nothing resolved.
func source(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(templateFile)
	if err != nil {
		t.Fatal(err)
	}
	js, err := intrinsics.ProcessYAML(b, &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// sectionObjects returns the entries of a top-level section (Resources,
// Outputs) by logical ID.
func sectionObjects(doc map[string]any, section string) map[string]map[string]any {
	s, _ := doc[section].(map[string]any)
	out := make(map[string]map[string]any, len(s))
	for id, v := range s {
		if m, ok := v.(map[string]any); ok {
			out[id] = m
		}
	}
	return out
}

// applyGlobals merges the Globals section's Function properties into every
// AWS::Serverless::Function and removes the section, as the SAM transform
// does (samtranslator/plugins/globals): a property only one side has is
// kept, two objects merge key by key, two lists are concatenated, and
// otherwise the function's own value wins. TestSAMTranslation checks the
// result against the transform itself where it is installed.
func applyGlobals(doc map[string]any) {
	globals, _ := doc["Globals"].(map[string]any)
	delete(doc, "Globals")
	fn, _ := globals["Function"].(map[string]any)
	if fn == nil {
		return
	}
	for _, r := range sectionObjects(doc, "Resources") {
		if r["Type"] != "AWS::Serverless::Function" {
			continue
		}
		local, _ := r["Properties"].(map[string]any)
		r["Properties"] = mergeGlobal(fn, local)
	}
}

func mergeGlobal(global, local any) any {
	switch g := global.(type) {
	case map[string]any:
		l, ok := local.(map[string]any)
		if !ok {
			break
		}
		out := make(map[string]any, len(g)+len(l))
		for k, v := range g {
			out[k] = v
		}
		for k, v := range l {
			if gv, ok := g[k]; ok {
				v = mergeGlobal(gv, v)
			}
			out[k] = v
		}
		return out
	case []any:
		if l, ok := local.([]any); ok {
			return append(append([]any{}, g...), l...)
		}
	}
	if local == nil {
		return global
	}
	return local
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

// getAtt resolves Fn::GetAtt, which goformation drops, as
// "GetAtt:<logical id>.<attribute>", so a test can check what points where.
func getAtt(_ string, input, _ any) any {
	switch v := input.(type) {
	case string:
		return "GetAtt:" + v
	case []any:
		if len(v) == 2 {
			return fmt.Sprintf("GetAtt:%v.%v", v[0], v[1])
		}
	}
	return nil
}

// function returns the stack's function: the one AWS::Serverless::Function
// the conditions keep (one definition per architecture).
func function(t *testing.T, tmpl *cloudformation.Template) *serverless.Function {
	t.Helper()
	_, fn := onlyFunction(t, tmpl)
	return fn
}

// onlyFunction returns the stack's one function and its logical ID.
func onlyFunction(t *testing.T, tmpl *cloudformation.Template) (string, *serverless.Function) {
	t.Helper()
	fns := tmpl.GetAllServerlessFunctionResources()
	if len(fns) != 1 {
		ids := make([]string, 0, len(fns))
		for id := range fns {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		t.Fatalf("the stack has functions %v, want exactly one", ids)
	}
	for id, fn := range fns {
		return id, fn
	}
	panic("unreachable")
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

// TestFunctionShape renders the stack for each Architecture and checks the
// one function it deploys, its URL, log group and invoke permission.
func TestFunctionShape(t *testing.T) {
	for _, arch := range architectures {
		t.Run(arch.param, func(t *testing.T) {
			tmpl, raw := open(t, map[string]any{"Architecture": arch.param})
			id, fn := onlyFunction(t, tmpl)
			functionShape(t, tmpl, raw, id, fn, arch)
		})
	}
}

func functionShape(t *testing.T, tmpl *cloudformation.Template, raw map[string]any, id string, fn *serverless.Function, arch architecture) {
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
		{"definition", id, arch.id},
		{"runtime", str(fn.Runtime), "provided.al2023"},
		{"handler", str(fn.Handler), "bootstrap"},
		{"architectures", strings.Join(fn.Architectures, ","), arch.param},
		// The zip `make package-lambda` builds for that architecture.
		{"code", code, arch.zip()},
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
		if fn.Timeout == nil || *fn.Timeout > 900 || float64(*fn.Timeout) <= cfg.Lambda.DeadlineMargin.Seconds() {
			t.Errorf("Timeout %v", fn.Timeout)
		}
	})
	t.Run("log group with retention", func(t *testing.T) {
		lg, err := tmpl.GetLogsLogGroupWithName("GatewayLogGroup")
		if err != nil || lg.RetentionInDays == nil || *lg.RetentionInDays <= 0 {
			t.Fatalf("log group %+v %v", lg, err)
		}
		lc, _ := rawProps(t, raw, id)["LoggingConfig"].(map[string]any)
		if lc["LogGroup"] != "Ref:GatewayLogGroup" {
			t.Errorf("the function logs to %v, not GatewayLogGroup", lc["LogGroup"])
		}
	})
	t.Run("the access log outlives the stack", func(t *testing.T) {
		// sam delete of a tenant stack keeps its access log, so its
		// requests' record outlives it, and a replacement keeps the old one.
		lg := sectionObjects(source(t), "Resources")["GatewayLogGroup"]
		if lg["DeletionPolicy"] != "Retain" || lg["UpdateReplacePolicy"] != "Retain" {
			t.Errorf("GatewayLogGroup DeletionPolicy %v, UpdateReplacePolicy %v: want Retain for both", lg["DeletionPolicy"], lg["UpdateReplacePolicy"])
		}
	})
	t.Run("outputs", func(t *testing.T) {
		outs := sectionObjects(raw, "Outputs")
		// SAM names a function's URL resource <logical id>Url.
		if got, want := outs["FunctionUrl"]["Value"], "GetAtt:"+id+"Url.FunctionUrl"; got != want {
			t.Errorf("FunctionUrl output %v, want %s", got, want)
		}
		if got := outs["LogGroup"]["Value"]; got != "Ref:GatewayLogGroup" {
			t.Errorf("LogGroup output %v", got)
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
// validates (assemble.Load reports every env var it names that is unset)
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
	cfg, err := assemble.Load(configFile, vars["GATEWAY_CONFIG_OVERLAY"], func(k string) string { return vars[k] })
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
	if cfg.Store.Backend != "redis" {
		t.Errorf("store.backend %q: on Lambda a memory store is per execution environment", cfg.Store.Backend)
	}
}

// shippedConfig loads the config the package ships, with getenv as its
// environment, failing the test on any problem.
func shippedConfig(t *testing.T, getenv func(string) string) *config.Config {
	t.Helper()
	cfg, err := assemble.Load(configFile, "", getenv)
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
	if cfg.Store.Backend == "redis" {
		add(cfg.Store.RedisURLEnv)
		add(cfg.Store.RedisPasswordEnv)
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
