package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/tenant"
)

// Server-side features on the request path (issue 31): what a backend
// runs, stores or connects to beyond generating tokens, under the one
// account every tenant shares, is the operator's allow-list per tenant.
// checkFeatures runs after the body is resolved and before any backend
// call: a feature the tenant's config does not list is refused, 400 with
// the param that asks for it; one it lists adds its cost per use to the
// request's budget reservation (reserveBudget) and its charge
// (settleBudget). Anthropic-Beta values pass only from the default list
// or the tenant's.

// checkFeatures refuses what the tenant may not use and prices the rest
// into rec.featureCost.
func (s *Server) checkFeatures(rec *exchange, t *tenant.Tenant, op request.Operation, raw []byte, h http.Header) error {
	if op.Anthropic() {
		s.filterBetas(rec, t, h)
	}
	u := request.FeaturesOf(raw, op)
	if !u.Any() {
		return nil
	}
	if u.Unknown != "" {
		return unknownTool(u.Unknown)
	}
	var cost int64
	for _, name := range request.FeatureNames() {
		f, _ := request.ParseFeature(name)
		if !u.Asked(f) {
			continue
		}
		g, ok := t.Grant(name)
		if !ok {
			return featureNotEnabled(u.Param[f], name)
		}
		uses := u.Bound(f)
		if uses <= 0 {
			uses = g.DefaultUses
		}
		cost = min(cost+min(uses, budget.MaxTokens)*g.CostPerUse, budget.MaxTokens)
	}
	rec.featureCost = cost
	return nil
}

// filterBetas keeps, of the request's Anthropic-Beta values, those on
// request.DefaultAnthropicBetas or the tenant's anthropic_beta, and logs
// the ones it drops: a beta may switch on account state (files-api,
// mcp-client, code-execution) or another price (context-1m).
func (s *Server) filterBetas(rec *exchange, t *tenant.Tenant, h http.Header) {
	vs := h["Anthropic-Beta"]
	if len(vs) == 0 {
		return
	}
	var kept, dropped []string
	for _, v := range vs {
		for _, b := range strings.Split(v, ",") {
			b = strings.TrimSpace(b)
			switch {
			case b == "":
			case slices.Contains(request.DefaultAnthropicBetas, b) || t.AllowsBeta(b):
				kept = append(kept, b)
			default:
				dropped = append(dropped, b)
			}
		}
	}
	if len(dropped) == 0 {
		return
	}
	if len(kept) == 0 {
		delete(h, "Anthropic-Beta")
	} else {
		h["Anthropic-Beta"] = []string{strings.Join(kept, ",")}
	}
	s.Log.Warn("anthropic-beta values dropped: not on the default list nor the tenant's anthropic_beta",
		"request_id", rec.id, "tenant", rec.tenant, "dropped", dropped)
}
