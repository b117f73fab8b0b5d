package billing

import (
	"cmp"
	"slices"
	"strings"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/tenant"
)

// Server-side features: what a backend runs, stores or connects to beyond
// generating tokens, under the one account every tenant shares, is the
// operator's allow-list per tenant. Features runs after the body is
// resolved and before any backend call: a feature the tenant's config
// does not list is refused, with the param that asks for it; one it
// lists adds its cost per use to the request's reservation (Plan) and
// its charge (Reservation.Settle): by the backend's count of uses where
// it reports one. Anthropic-Beta values pass only from the default list
// or the tenant's (Betas).

// Priced is what a request's server-side features were reserved at.
type Priced struct {
	// total is the token-equivalent reserved for every feature asked;
	// money the same in money (micro-units, prices.features).
	total, money int64
	// counted is each counted feature's share of total and price
	// (countedFeatures' order), so the charge follows the answer's count.
	counted [len(countedFeatures)]pricedUse
	// toolCalls is the Responses API's max_tool_calls to write (0: none):
	// the fewest uses reserved for a priced hosted tool when the body
	// bounds none, so the backend runs no more than was reserved.
	toolCalls int64
}

// ToolCalls is the max_tool_calls to write into a Responses request
// whose body bounds no built-in tool calls (0: none to write).
func (p Priced) ToolCalls() int64 { return p.toolCalls }

type pricedUse struct{ reserved, perUse, money, moneyPerUse int64 }

// countedFeatures are the features whose uses an answer tells: the
// backend's count (Anthropic's usage.server_tool_use: web search and
// fetch), or the call items of the Responses API's hosted tools in the
// answer's output (callItems).
var countedFeatures = [...]request.Feature{request.WebSearch, request.WebFetch, request.FileSearch,
	request.CodeExecution, request.MCP, request.ImageGeneration, request.ComputerUse}

// callItems is the hosted tool whose call items count each of
// countedFeatures' uses (-1: none).
var callItems = [len(countedFeatures)]int{int(sse.WebSearchCall), -1, int(sse.FileSearchCall),
	int(sse.CodeInterpreterCall), int(sse.MCPCall), int(sse.ImageGenerationCall), int(sse.ComputerCall)}

// uses is what u tells of countedFeatures[i]'s uses: the larger of the
// backend's count and the answer's call items (a backend may report
// fewer than it ran, or list fewer than it billed); ok is false when it
// tells nothing (charged as reserved).
func (u Usage) uses(i int) (n int64, ok bool) {
	if u.ToolsReported {
		switch countedFeatures[i] {
		case request.WebSearch:
			n, ok = u.WebSearches, true
		case request.WebFetch:
			n, ok = u.WebFetches, true
		}
	}
	if t := callItems[i]; t >= 0 && u.Calls.Counted {
		n, ok = max(n, u.Calls.N[t]), true
	}
	return n, ok
}

// Features refuses the server-side features of raw the tenant may not use
// (unknown tool types too: they may be server tools; a tool key read twice
// or a max_uses that is not a count, which decoders would read
// differently) and prices the
// rest, per use, from the tenant's grants (tokens) and prices (money;
// nil prices them at nothing). budgeted says whether any of the tenant's
// limits is enforced, tokens or money (asked only of a use priced in
// either without a bound, which is then refused: the backend may repeat
// it without bound).
func Features(t *tenant.Tenant, op request.Operation, raw []byte, budgeted func() bool, prices *price.Catalogue) (Priced, error) {
	u, err := request.FeaturesOf(raw, op)
	if err != nil {
		return Priced{}, unreadable(err)
	}
	if !u.Any() {
		return Priced{}, nil
	}
	if u.Unknown != "" {
		return Priced{}, unknownTool(u.Unknown)
	}
	var p Priced
	for _, f := range request.Features() {
		if !u.Asked(f) {
			continue
		}
		name := f.String()
		g, ok := t.Grant(name)
		if !ok {
			return Priced{}, featureNotEnabled(u.Param[f], name)
		}
		// In money: the catalogue's price per use (prices.features).
		per := prices.Feature(name)
		if u.Unbounded[f] != "" && (g.CostPerUse > 0 || per > 0) && budgeted() {
			// A use priced in tokens or in money that the backend may
			// repeat without bound would overshoot a limit of either: the
			// tool must say how many it may run.
			return Priced{}, unboundedUses(u.Unbounded[f], name)
		}
		uses := u.Bound(f)
		if uses <= 0 {
			uses = g.DefaultUses
		}
		if u.MaxToolCalls == 0 && uses > 0 && op.Shape() == request.ShapeResponses && (g.CostPerUse > 0 || per > 0) {
			// max_tool_calls bounds every built-in tool's calls together:
			// the fewest any priced tool was reserved for.
			p.toolCalls = min(uses, cmp.Or(p.toolCalls, uses))
		}
		reserved := mulTokens(uses, g.CostPerUse)
		p.total = min(p.total+reserved, budget.MaxTokens)
		money := price.MulUses(uses, per)
		p.money = min(p.money+money, price.MaxMicros)
		if i := slices.Index(countedFeatures[:], f); i >= 0 {
			p.counted[i] = pricedUse{reserved: reserved, perUse: g.CostPerUse, money: money, moneyPerUse: per}
		}
	}
	return p, nil
}

// charge is what the features cost, given what the usage tells of their
// uses (Usage.uses): each counted feature at its price per use counted
// (more than reserved when the backend ran more), the rest as reserved.
func (p Priced) charge(u Usage) int64 {
	c := p.total
	for i, pu := range p.counted {
		if n, ok := u.uses(i); ok {
			c = min(max(c-pu.reserved, 0)+mulTokens(n, pu.perUse), budget.MaxTokens)
		}
	}
	return c
}

// chargeMoney is charge in money.
func (p Priced) chargeMoney(u Usage) int64 {
	c := p.money
	for i, pu := range p.counted {
		if n, ok := u.uses(i); ok {
			c = min(max(c-pu.money, 0)+price.MulUses(n, pu.moneyPerUse), price.MaxMicros)
		}
	}
	return c
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

// Betas splits a request's Anthropic-Beta header values (each a comma
// list) into those that pass, the defaults of request.AnthropicBetas or
// the tenant's anthropic_beta, and those dropped: a beta may switch on
// account state (files-api, mcp-client, code-execution) or another
// price (context-1m). Both are nil when nothing is dropped. A body that
// carries a field a dropped beta gates is refused (raw is the body):
// dropping the header and forwarding the field would change what was
// asked.
func Betas(t *tenant.Tenant, values []string, raw []byte) (kept, dropped []string, err error) {
	for _, v := range values {
		for _, b := range strings.Split(v, ",") {
			b = strings.TrimSpace(b)
			switch {
			case b == "":
			case request.DefaultBeta(b) || t.AllowsBeta(b):
				kept = append(kept, b)
			default:
				dropped = append(dropped, b)
			}
		}
	}
	if len(dropped) == 0 {
		return nil, nil, nil
	}
	if field, beta := request.GatedField(kept, dropped, raw); field != "" {
		return nil, nil, betaNotEnabled(field, beta)
	}
	return kept, dropped, nil
}
