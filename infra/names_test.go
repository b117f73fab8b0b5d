package infra

import (
	"fmt"
	"strings"
	"testing"
)

// nameLimits are the physical-name properties of the resource types the
// template (or SAM for it) declares, with each service's length limit.
var nameLimits = map[string]struct {
	prop string
	max  int
}{
	"AWS::Serverless::Function": {"FunctionName", 64},
	"AWS::Lambda::Function":     {"FunctionName", 64},
	"AWS::Logs::LogGroup":       {"LogGroupName", 512},
	"AWS::IAM::Role":            {"RoleName", 64},
}

// physicalNames resolves the template for a stack named stack with params
// and returns the names it gives resources itself, by resource; a resource
// it leaves unnamed is named by CloudFormation from the stack name, the
// logical ID and a random suffix, within the service's limit (AWS
// documents this for every type with a Name property), and is absent here.
// goformation resolves AWS::StackName to "goformation-stack"; that is
// replaced by stack.
func physicalNames(t *testing.T, stack string, params map[string]any) map[string]string {
	t.Helper()
	_, raw := open(t, params)
	out := map[string]string{}
	for id, r := range sectionObjects(raw, "Resources") {
		typ, _ := r["Type"].(string)
		lim, ok := nameLimits[typ]
		if !ok {
			continue
		}
		props, _ := r["Properties"].(map[string]any)
		if n, ok := props[lim.prop].(string); ok {
			n = strings.ReplaceAll(n, "goformation-stack", stack)
			if len(n) > lim.max {
				t.Errorf("stack %s: %s.%s %q is %d characters, the service allows %d", stack, id, lim.prop, n, len(n), lim.max)
			}
			out[id] = n
		}
	}
	return out
}

// TestStackNames: two environments' stacks for the same
// tenant deploy side by side in one account and region, and so does a
// stack of any name CloudFormation accepts (up to 128 characters), for
// either architecture: no physical name repeats across stacks or passes
// its service's limit. The old template named a tenant's function
// llmgw-tenant-NAME whatever the stack, and the shared one
// STACK-gateway-x86, over 64 characters beyond a 52-character stack name.
func TestStackNames(t *testing.T) {
	fabrikam := func(arch string) map[string]any {
		p := tenantStack("3c4d5e6f-7081-4a2b-9c3d-4e5f60718293", "fabrikam", "gpt-4o-mini")
		p["Architecture"] = arch
		return p
	}
	for _, arch := range []string{"arm64", "x86_64"} {
		t.Run(arch, func(t *testing.T) {
			seen := map[string]string{}
			for _, st := range []struct {
				stack  string
				params map[string]any
			}{
				{"gateway-fabrikam", fabrikam(arch)},
				{"staging-fabrikam", fabrikam(arch)},
				{"gateway", map[string]any{"Architecture": arch}},
				{"s" + strings.Repeat("x", 63), map[string]any{"Architecture": arch}},
				{"t" + strings.Repeat("y", 127), fabrikam(arch)},
			} {
				for id, n := range physicalNames(t, st.stack, st.params) {
					where := fmt.Sprintf("stack %s's %s", st.stack, id)
					if prev, ok := seen[n]; ok {
						t.Errorf("%s and %s are both named %s: the second stack fails with \"already exists\"", prev, where, n)
					}
					seen[n] = where
				}
			}
		})
	}
}
