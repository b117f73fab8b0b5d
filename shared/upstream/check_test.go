package upstream

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/problem"
)

// TestCheck: the kind-dependent rules, by config field path, and the
// azure-openai api-version default.
func TestCheck(t *testing.T) {
	var p []string
	at := problem.Into(&p, "pools[0]")
	CheckPool(at, "bedrock", []string{"X-Feature", "Authorization"}, []string{"guided_json", "cache_salt"}, "keep")
	TargetSpec{Kind: "vllm", Organization: "org", Project: "proj"}.Check(at.Item("endpoints", 0), true)
	TargetSpec{Kind: "azure-openai", AzureAPI: "v2"}.Check(at.Item("endpoints", 1), true)
	TargetSpec{Kind: "openai", Organization: "org"}.Check(at.Item("endpoints", 2), false)
	want := []string{
		`pools[0].kind: must be ` + orList(Kinds()) + `, not "bedrock"`,
		"pools[0].forward_headers[1]: Authorization is never forwarded from a caller",
		`pools[0].fields[1]: field "cache_salt" is written by the gateway or gated per tenant (features), never allowed per pool`,
		`pools[0].unknown_fields: must be drop or refuse, not "keep"`,
		"pools[0].endpoints[0].auth: entra is only for azure-openai and anthropic pools",
		"pools[0].endpoints[0].organization: only for openai pools, not vllm",
		"pools[0].endpoints[0].project: only for openai pools, not vllm",
		`pools[0].endpoints[1].azure_api: must be deployments or v1, not "v2"`,
	}
	if strings.Join(p, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(p, "\n"), strings.Join(want, "\n"))
	}
	if v := (TargetSpec{Kind: "azure-openai"}).WithDefaults().APIVersion; v != DefaultAzureAPIVersion {
		t.Fatalf("api-version default %q", v)
	}
	if v := (TargetSpec{Kind: "openai"}).WithDefaults().APIVersion; v != "" {
		t.Fatalf("openai api-version %q", v)
	}
}
