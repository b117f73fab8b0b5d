package assemble

import (
	"strings"

	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/tenant"
)

// Grants is a tenant's features section as the table's grants, by
// feature name.
func Grants(fs []config.Feature) map[string]tenant.Grant {
	g := make(map[string]tenant.Grant, len(fs))
	for _, f := range fs {
		g[f.Name] = tenant.Grant{CostPerUse: f.CostPerUse, DefaultUses: f.DefaultUses}
	}
	return g
}

// accountWide are the features that name backend-account state by id
// (config.Feature.AccountOwner).
var accountWide = map[string]bool{"file_id": true, "container": true, "file_search": true,
	"data_sources": true, "kv_transfer_params": true}

// CheckFeatures reports the problems with a tenant's features and
// anthropic_beta under at (the tenant): each feature a known name, named
// once, its cost and default uses not negative; each beta a header token.
func CheckFeatures(at problem.At, t config.Tenant) {
	seen := map[string]bool{}
	for i, f := range t.Features {
		fat := at.Item("features", i)
		if _, ok := request.ParseFeature(f.Name); !ok {
			fat.Add("name", "must be one of %s, not %q", strings.Join(request.FeatureNames(), ", "), f.Name)
		} else if seen[f.Name] {
			fat.Add("name", "feature %q is listed twice", f.Name)
		}
		seen[f.Name] = true
		if accountWide[f.Name] && !f.AccountOwner {
			fat.Add("account_owner", "must be true to enable %q: it names files, containers, vector stores, search indexes or KV cache blocks of the backend account by id, which the gateway cannot record to a tenant, so only a tenant that has the backend account to itself may use it (docs/ownership.md)", f.Name)
		}
		problem.NotNegative(fat, "cost_per_use", f.CostPerUse)
		problem.NotNegative(fat, "default_uses", f.DefaultUses)
	}
	for i, b := range t.AnthropicBeta {
		if b == "" || strings.ContainsFunc(b, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ',' }) {
			at.Item("anthropic_beta", i).Add("", "must be one anthropic-beta value (printable, no spaces or commas), not %q", b)
		}
	}
}
