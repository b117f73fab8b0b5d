package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/tenant"
)

// Server-side features on the request path (issue 31): what a backend
// runs, stores or connects to beyond generating tokens, under the one
// account every tenant shares, is the operator's allow-list per tenant.
// checkFeatures runs after the body is resolved and before any backend
// call: a feature the tenant's config does not list is refused, 400 with
// the param that asks for it; one it lists adds its cost per use to the
// request's budget reservation (reserveBudget) and its charge
// (settleBudget): by the backend's count of uses where it reports one.
// Anthropic-Beta values pass only from the default list or the tenant's.

// checkFeatures refuses what the tenant may not use and prices the rest
// into ex.features.
func (s *Server) checkFeatures(ex *exchange, t *tenant.Tenant, op request.Operation, raw []byte, h http.Header) error {
	if op.Anthropic() {
		s.filterBetas(ex, t, h)
	}
	u := request.FeaturesOf(raw, op)
	if !u.Any() {
		return nil
	}
	if u.Unknown != "" {
		return unknownTool(u.Unknown)
	}
	var p priced
	for _, f := range request.Features() {
		if !u.Asked(f) {
			continue
		}
		name := f.String()
		g, ok := t.Grant(name)
		if !ok {
			return featureNotEnabled(u.Param[f], name)
		}
		if u.Unbounded[f] != "" && g.CostPerUse > 0 && s.budgeted(ex, t) {
			// A priced use the backend may repeat without bound would
			// overshoot a budget: the tool must say how many it may run.
			return unboundedUses(u.Unbounded[f], name)
		}
		uses := u.Bound(f)
		if uses <= 0 {
			uses = g.DefaultUses
		}
		reserved := mulTokens(uses, g.CostPerUse)
		p.total = min(p.total+reserved, budget.MaxTokens)
		// In money: the catalogue's price per use (prices.features).
		per := s.Prices.Feature(name)
		money := price.MulUses(uses, per)
		p.money = min(p.money+money, price.MaxMicros)
		switch f {
		case request.WebSearch:
			p.search = pricedUse{reserved: reserved, perUse: g.CostPerUse, money: money, moneyPerUse: per}
		case request.WebFetch:
			p.fetch = pricedUse{reserved: reserved, perUse: g.CostPerUse, money: money, moneyPerUse: per}
		}
	}
	ex.features = p
	return nil
}

// budgeted reports whether the tenant's token budget is enforced.
func (s *Server) budgeted(_ *exchange, t *tenant.Tenant) bool {
	if s.Budgets == nil {
		return false
	}
	lim, ok := s.Budgets.Limits(t.ID)
	return ok && lim.Enforced()
}

// priced is what a request's server-side features were reserved at.
type priced struct {
	// total is the token-equivalent reserved for every feature asked;
	// money the same in money (micro-units, prices.features).
	total, money int64
	// search and fetch are the features whose uses the backend counts
	// (Anthropic's usage.server_tool_use): their share of total and
	// price, so the charge follows the count.
	search, fetch pricedUse
}

type pricedUse struct{ reserved, perUse, money, moneyPerUse int64 }

// charge is what the features cost, given the usage's count of server
// tool uses: each counted feature at its price per use counted (more than
// reserved when the backend ran more), the rest as reserved.
func (p priced) charge(st sse.ServerToolUse) int64 {
	if !st.Reported {
		return p.total
	}
	c := p.total - p.search.reserved - p.fetch.reserved
	c += mulTokens(st.WebSearches, p.search.perUse) + mulTokens(st.WebFetches, p.fetch.perUse)
	return min(c, budget.MaxTokens)
}

// chargeMoney is charge in money.
func (p priced) chargeMoney(st sse.ServerToolUse) int64 {
	if !st.Reported {
		return p.money
	}
	c := p.money - p.search.money - p.fetch.money
	c += price.MulUses(st.WebSearches, p.search.moneyPerUse) + price.MulUses(st.WebFetches, p.fetch.moneyPerUse)
	return min(c, price.MaxMicros)
}

// mulTokens is a×b for counts of at most budget.MaxTokens, at most
// budget.MaxTokens.
func mulTokens(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > budget.MaxTokens/b {
		return budget.MaxTokens
	}
	return a * b
}

// filterBetas keeps, of the request's Anthropic-Beta values, those on
// request.DefaultAnthropicBetas or the tenant's anthropic_beta, and logs
// the ones it drops: a beta may switch on account state (files-api,
// mcp-client, code-execution) or another price (context-1m).
func (s *Server) filterBetas(ex *exchange, t *tenant.Tenant, h http.Header) {
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
		"request_id", ex.id, "tenant", ex.tenant, "dropped", dropped)
}
