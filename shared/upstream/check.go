package upstream

import (
	"slices"
	"strings"

	"github.com/llmgw/gateway/shared/problem"
)

// CheckPool reports the problems with a pool's kind and the caller headers
// it forwards, under at (the pool, whose fields are kind and
// forward_headers). The gateway's config check calls it for each pool.
func CheckPool(at problem.At, kind string, forward []string) {
	if kinds := Kinds(); !slices.Contains(kinds, kind) {
		at.Add("kind", "must be %s, not %q", orList(kinds), kind)
	}
	for i, h := range forward {
		if err := CheckForward(h); err != nil {
			at.Item("forward_headers", i).Add("", "%v", err)
		}
	}
}

// Check reports the problems with s's settings that depend on its kind,
// under at (the endpoint, whose fields are auth, azure_api, organization
// and project); entra says the endpoint authenticates with Entra ID. The
// gateway's config check calls it for each endpoint.
func (s TargetSpec) Check(at problem.At, entra bool) {
	if entra && s.Kind != "azure-openai" && s.Kind != "anthropic" { // Claude in Microsoft Foundry takes Entra ID too
		at.Add("auth", "entra is only for azure-openai and anthropic pools")
	}
	if s.Kind == "azure-openai" && s.AzureAPI != "" && s.AzureAPI != "deployments" && s.AzureAPI != "v1" {
		at.Add("azure_api", "must be deployments or v1, not %q", s.AzureAPI)
	}
	for _, h := range []struct{ field, value string }{{"organization", s.Organization}, {"project", s.Project}} {
		if h.value != "" && s.Kind != "openai" {
			at.Add(h.field, "only for openai pools, not %s", s.Kind)
		}
	}
}

// WithDefaults returns s with its zero settings replaced by their
// defaults: an azure-openai endpoint's api-version is
// DefaultAzureAPIVersion.
func (s TargetSpec) WithDefaults() TargetSpec {
	if s.Kind == "azure-openai" && s.APIVersion == "" {
		s.APIVersion = DefaultAzureAPIVersion
	}
	return s
}

// orList writes a, b or c.
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
