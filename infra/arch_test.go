package infra

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// architecture is one value of the template's Architecture parameter: the
// function definition its condition keeps and the GOARCH of the zip that
// definition deploys.
type architecture struct {
	param, condition, id, goarch string
}

// zip is the CodeUri of the architecture's definition: the zip `make
// package-lambda` writes, relative to the template.
func (a architecture) zip() string { return "../bin/lambda/gateway-lambda-" + a.goarch + ".zip" }

var architectures = []architecture{
	{param: "arm64", condition: "IsArm64", id: "Gateway", goarch: "arm64"},
	{param: "x86_64", condition: "IsX86", id: "GatewayX86", goarch: "amd64"},
}

// perArchitecture is all a function definition may set itself: the rest
// comes from Globals.Function, so the definitions cannot drift apart. The
// collector layer is per architecture (a layer is built for one).
var perArchitecture = []string{"Architectures", "CodeUri", "Layers"}

// TestArchitectureParameter: Architecture offers exactly the values with a
// definition, arm64 by default (the function's architecture before the
// parameter existed), and each value keeps exactly one definition.
func TestArchitectureParameter(t *testing.T) {
	doc := source(t)
	p, _ := doc["Parameters"].(map[string]any)["Architecture"].(map[string]any)
	if p["Default"] != "arm64" {
		t.Errorf("Architecture defaults to %v, want arm64", p["Default"])
	}
	var want []any
	for _, a := range architectures {
		want = append(want, a.param)
	}
	if !reflect.DeepEqual(p["AllowedValues"], want) {
		t.Errorf("Architecture's AllowedValues %v, want %v", p["AllowedValues"], want)
	}
	conditions, _ := doc["Conditions"].(map[string]any)
	for _, a := range architectures {
		t.Run(a.param, func(t *testing.T) {
			want := map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "Architecture"}, a.param}}
			if !reflect.DeepEqual(conditions[a.condition], want) {
				t.Errorf("condition %s is %v, want %v", a.condition, conditions[a.condition], want)
			}
			tmpl, _ := open(t, map[string]any{"Architecture": a.param})
			if id, _ := onlyFunction(t, tmpl); id != a.id {
				t.Errorf("Architecture=%s deploys %s, want %s", a.param, id, a.id)
			}
		})
	}
}

// TestArchitectureDefinitions: the template has one function definition per
// architecture, each under its own condition and setting nothing but its
// zip, instruction set and collector layer, and the two resolve to the
// same function but for those, on the shared stack and on a tenant stack.
func TestArchitectureDefinitions(t *testing.T) {
	doc := source(t)
	defs := map[string]map[string]any{}
	for id, r := range sectionObjects(doc, "Resources") {
		if r["Type"] == "AWS::Serverless::Function" {
			defs[id] = r
		}
	}
	if len(defs) != len(architectures) {
		t.Fatalf("%d function definitions, want one per architecture (%d)", len(defs), len(architectures))
	}
	for _, a := range architectures {
		r := defs[a.id]
		if r == nil {
			t.Fatalf("no definition %s", a.id)
		}
		if r["Condition"] != a.condition {
			t.Errorf("%s's Condition is %v, want %s", a.id, r["Condition"], a.condition)
		}
		var attrs, props []string
		for k := range r {
			attrs = append(attrs, k)
		}
		for k := range r["Properties"].(map[string]any) {
			props = append(props, k)
		}
		sort.Strings(attrs)
		sort.Strings(props)
		if !reflect.DeepEqual(attrs, []string{"Condition", "Properties", "Type"}) || !reflect.DeepEqual(props, perArchitecture) {
			t.Errorf("%s sets %v %v: everything but %v belongs in Globals.Function", a.id, attrs, props, perArchitecture)
		}
	}

	for _, stack := range []struct {
		name   string
		params map[string]any
	}{
		{"shared stack", nil},
		{"tenant stack", tenantStack("3c4d5e6f-7081-4a2b-9c3d-4e5f60718293", "fabrikam", "gpt-4o-mini")},
	} {
		t.Run(stack.name, func(t *testing.T) {
			var first map[string]any
			for _, a := range architectures {
				params := map[string]any{"Architecture": a.param}
				for k, v := range stack.params {
					params[k] = v
				}
				tmpl, raw := open(t, params)
				id, fn := onlyFunction(t, tmpl)
				props := rawProps(t, raw, id)
				// Named by CloudFormation after the stack and logical ID
				// (TestStackNames): unique per architecture, too.
				if fn.FunctionName != nil {
					t.Errorf("%s: FunctionName %s: leave it to CloudFormation", a.param, *fn.FunctionName)
				}
				for _, k := range perArchitecture {
					delete(props, k)
				}
				if first == nil {
					first = props
				} else if !reflect.DeepEqual(props, first) {
					t.Errorf("%s's function differs from %s's beyond %v:\n%v\n%v", a.param, architectures[0].param, perArchitecture, props, first)
				}
			}
		})
	}
}

// TestArchitectureZips: each definition's CodeUri is a zip `make
// package-lambda` builds, for its GOARCH.
func TestArchitectureZips(t *testing.T) {
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	i := strings.Index(mk, "\npackage-lambda:")
	if i < 0 {
		t.Fatal("the Makefile has no package-lambda target")
	}
	target := mk[i+1:]
	if j := strings.Index(target, "\n\n"); j >= 0 {
		target = target[:j]
	}
	for _, a := range architectures {
		for _, want := range []string{
			"GOARCH=" + a.goarch + " $(BUILD) -o bin/lambda/" + a.goarch + "/bootstrap",
			"cd bin/lambda/" + a.goarch + " && ",
			"-o ../gateway-lambda-" + a.goarch + ".zip bootstrap gateway.yaml=",
		} {
			if !strings.Contains(target, want) {
				t.Errorf("%s: package-lambda lacks %q (the template deploys %s)", a.param, want, a.zip())
			}
		}
	}
}

// samTransform turns the template on stdin into what CloudFormation would
// run, with the SAM translator, after `sam package` has replaced each local
// CodeUri with an S3 location.
const samTransform = `
import json, sys
from samtranslator.translator.transform import transform
class NoPolicies:
    def load(self):
        return {}
doc = json.load(sys.stdin)
for r in doc["Resources"].values():
    if r["Type"] == "AWS::Serverless::Function":
        r["Properties"]["CodeUri"] = "s3://packaged/" + r["Properties"]["CodeUri"].rsplit("/", 1)[-1]
json.dump(transform(doc, {}, NoPolicies()), sys.stdout)
`

// TestSAMTranslation runs the SAM translator (the samtranslator package
// that cfn-lint installs) where it is installed: every resource SAM
// generates for a function (role, URL, the URL's permissions) carries that
// function's condition, the two Lambda functions it makes differ only in
// name, code, instruction set and role, and applyGlobals gives the
// function the properties SAM gives it.
func TestSAMTranslation(t *testing.T) {
	if testing.Short() {
		t.Skip("the SAM translator takes seconds")
	}
	py, err := exec.LookPath("python3")
	if err != nil || exec.Command(py, "-c", "import samtranslator").Run() != nil {
		t.Skip("the SAM translator is not installed (pip install aws-sam-translator, or cfn-lint)")
	}
	doc := source(t)
	in, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(py, "-c", samTransform)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &errOut
	// The translator needs a region for its ARNs; nothing is called.
	cmd.Env = append(os.Environ(), "AWS_DEFAULT_REGION=us-east-1")
	if err := cmd.Run(); err != nil {
		t.Fatalf("SAM translator: %v\n%s", err, errOut.String())
	}
	var translated map[string]any
	if err := json.Unmarshal(out.Bytes(), &translated); err != nil {
		t.Fatal(err)
	}
	res := sectionObjects(translated, "Resources")

	merged := source(t)
	applyGlobals(merged)
	var first map[string]any
	for _, a := range architectures {
		for _, suffix := range []string{"", "Role", "Url", "UrlPublicPermissions"} {
			r := res[a.id+suffix]
			if r == nil {
				t.Errorf("SAM generated no %s", a.id+suffix)
				continue
			}
			if r["Condition"] != a.condition {
				t.Errorf("%s has Condition %v, want %s", a.id+suffix, r["Condition"], a.condition)
			}
		}
		fn, _ := res[a.id]["Properties"].(map[string]any)
		if fn == nil {
			continue
		}
		// applyGlobals agrees with SAM on every property SAM passes through.
		want := sectionObjects(merged, "Resources")[a.id]["Properties"].(map[string]any)
		for _, k := range []string{"Description", "Runtime", "Handler", "MemorySize", "Timeout", "ReservedConcurrentExecutions", "LoggingConfig", "Environment", "Architectures", "FunctionName"} {
			if !reflect.DeepEqual(fn[k], want[k]) {
				t.Errorf("%s.%s: SAM made %v, applyGlobals %v", a.id, k, fn[k], want[k])
			}
		}
		url, _ := res[a.id+"Url"]["Properties"].(map[string]any)
		if cfg := want["FunctionUrlConfig"].(map[string]any); url == nil || url["AuthType"] != cfg["AuthType"] || url["InvokeMode"] != cfg["InvokeMode"] {
			t.Errorf("%sUrl %v, want %v", a.id, url, cfg)
		}
		rest := map[string]any{}
		for k, v := range fn {
			switch k {
			case "Code", "Architectures", "FunctionName", "Role", "Layers":
			default:
				rest[k] = v
			}
		}
		if first == nil {
			first = rest
		} else if !reflect.DeepEqual(rest, first) {
			t.Errorf("SAM's %s differs from %s beyond name, code, instruction set, layer and role", a.id, architectures[0].id)
		}
		// The Function URL's two permissions, once each: SAM makes both for
		// AuthType NONE (lambda:InvokeFunction only via the URL, which URLs
		// created since October 2025 need), so the template declares none
		// of its own (one it declared would duplicate SAM's).
		var invoke, invokeURL []string
		for pid, r := range res {
			if r["Type"] != "AWS::Lambda::Permission" {
				continue
			}
			p, _ := r["Properties"].(map[string]any)
			if !reflect.DeepEqual(p["FunctionName"], map[string]any{"Ref": a.id}) {
				continue
			}
			if r["Condition"] != a.condition {
				t.Errorf("%s has Condition %v, want %s", pid, r["Condition"], a.condition)
			}
			switch p["Action"] {
			case "lambda:InvokeFunction":
				if p["InvokedViaFunctionUrl"] != true || p["Principal"] != "*" {
					t.Errorf("%s: %v, want lambda:InvokeFunction for * only via the Function URL", pid, p)
				}
				invoke = append(invoke, pid)
			case "lambda:InvokeFunctionUrl":
				if p["FunctionUrlAuthType"] != "NONE" {
					t.Errorf("%s: %v", pid, p)
				}
				invokeURL = append(invokeURL, pid)
			}
		}
		if len(invoke) != 1 || len(invokeURL) != 1 {
			t.Errorf("%s: lambda:InvokeFunction permissions %v, lambda:InvokeFunctionUrl %v: want one of each", a.id, invoke, invokeURL)
		}
	}
	for id, r := range sectionObjects(doc, "Resources") {
		if r["Type"] == "AWS::Lambda::Permission" {
			t.Errorf("the template declares permission %s: SAM's transform makes the Function URL's", id)
		}
	}
}
