package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/tenant"
)

// Spend limits and service tiers on the request path (issue 35), in
// this order: checkTier after the body is resolved (a tier the tenant may
// not use is refused 400 before anything is spent), priceRequest in
// reserveBudget (the worst case in money, at the dearest tier the request
// may be served at, reserved in the same store operation as its tokens),
// cost in settleBudget (the usage at the tier the answer says it was
// served at, reserved in the same settle). The money is micro-units of
// the catalogue's currency.

// tierAsk is the service tier a request asked for.
type tierAsk struct {
	// tier is the tier asked; explicit is false for "auto" or none,
	// which the backend resolves (the bill is then the answer's tier).
	tier     price.Tier
	explicit bool
	// may is the tiers the request may be served at: the one asked, or
	// every tier the tenant may use.
	may price.Tiers
	// allowed is the tenant's tiers.
	allowed price.Tiers
}

// checkTier refuses a service_tier the tenant may not use (400, param
// service_tier) and records what was asked in ex.tier. Every tenant is
// held to its tiers, with or without a spend limit: a dearer tier is
// money on the account every tenant shares.
func checkTier(ex *exchange, t *tenant.Tenant, body *request.Body) error {
	allowed := t.Tiers.OrStandard()
	ex.tier = tierAsk{may: allowed, allowed: allowed}
	switch body.ServiceTier {
	case "", "auto":
		return nil
	case "standard_only": // Anthropic's spelling of "standard, never priority"
		ex.tier.tier, ex.tier.explicit = price.TierStandard, true
	default:
		tier, ok := price.ParseTier([]byte(body.ServiceTier))
		if !ok {
			return tierNotAllowed(body.ServiceTier, allowed)
		}
		ex.tier.tier, ex.tier.explicit = tier, true
	}
	if !allowed.Has(ex.tier.tier) {
		return tierNotAllowed(body.ServiceTier, allowed)
	}
	ex.tier.may = price.Tiers(0).With(ex.tier.tier)
	return nil
}

// spendState is a reservation's money: its pricing, what the store
// granted, what it cost.
type spendState struct {
	budget.Spend
	tier    tierAsk
	granted int64
	cost    int64
	// billed is the tier the cost was computed at (the dearer one when
	// the answer's differs from the one asked).
	billed  price.Tier
	version string
}

// priceRequest prices a request for the spend limits: its model's prices
// at the tiers it may be served at, and its server features' money.
func (s *Server) priceRequest(ex *exchange, body *request.Body) (budget.Spend, error) {
	m, ok := s.Prices.Model(body.Model)
	if !ok {
		// The config check prices every model of a tenant with a spend
		// limit; a model without a price is a bug, refused.
		return budget.Spend{}, budgetFailed(fmt.Sprintf("model %q has no price in the catalogue", body.Model))
	}
	return budget.Spend{Model: m, Tiers: ex.tier.may, Fixed: ex.features.money}, nil
}

// cost is what the answer's usage costs: its tokens by kind at the tier
// the answer says it was served at, and the server features' uses. A
// tier the answer does not name is the one asked, or for "auto" the
// dearest the tenant may use; a tier cheaper than the one asked, or one
// the tenant may not use, is billed at the dearer of it and the one the
// request was reserved at, and logged.
func (s *Server) cost(ex *exchange, b *reservation) int64 {
	sp := &b.spend
	if sp.Model == nil {
		return 0
	}
	c := s.bill(ex, b.tenant, sp.Model, sp.tier, b.bound, &sp.billed)
	return min(c+b.features.chargeMoney(ex.usage.ServerTools), price.MaxMicros)
}

// bill prices ex's usage with m for a request that asked ask and was
// reserved for a prompt of bound tokens, and says in billed at which
// tier: the answer's tier, or the one asked when the answer names none
// (for "auto", the dearest the tenant may use); the dearer of the two,
// logged, when the answer's is cheaper than the one asked or one the
// tenant may not use.
func (s *Server) bill(ex *exchange, tenantID string, m *price.Model, ask tierAsk, bound int64, billed *price.Tier) int64 {
	u := ex.usage
	out := max(u.CompletionTokens, ex.outputFloor)
	cached := min(max(u.CachedTokens, 0), u.PromptTokens)
	writes := min(max(u.CacheWriteTokens, 0), u.PromptTokens-cached)
	hour := min(max(u.CacheWrite1hTokens, 0), writes)
	pu := price.Usage{Input: u.PromptTokens - cached - writes, CacheRead: cached, CacheWrite: writes - hour, CacheWrite1h: hour, Output: out}
	asked := ask.tier
	if !ask.explicit {
		asked = m.Dearest(ask.may, bound, out)
	}
	served := asked
	if u.TierReported {
		served = u.Tier
	}
	c := m.Cost(served, pu)
	*billed = served
	if u.TierReported && (!ask.allowed.Has(served) || (ask.explicit && served != asked)) {
		if alt := m.Cost(asked, pu); alt > c {
			c, *billed = alt, asked
		}
		s.Log.Warn("spend: the answer's service tier is not the one asked, or not one the tenant may use: billed at the dearer of the two",
			"request_id", ex.id, "tenant", tenantID, "asked", asked.String(), "served", served.String(), "charged", price.Format(c))
	}
	return c
}

// backgroundCost is what a background response's usage costs, at the
// tier its answer names (its creating request's tier is not kept: "auto"
// at the tenant's tiers); KeepReserved when its model has no price (a
// tenant without a spend limit reserved no money).
func (s *Server) backgroundCost(ex *exchange, o affinity.Owner) int64 {
	m, ok := s.Prices.Model(o.Model)
	if !ok {
		return budget.KeepReserved
	}
	tiers := price.Tiers(0).OrStandard()
	if t := s.Tenants.Lookup(o.Tenant); t != nil {
		tiers = t.Tiers.OrStandard()
	}
	var billed price.Tier
	return s.bill(ex, o.Tenant, m, tierAsk{may: tiers, allowed: tiers}, 0, &billed)
}

// costText and priceVersion are the access log's cost (a decimal amount
// of the catalogue's currency) and price_version ("" without a spend
// limit).
func (b *reservation) costText() string {
	if b == nil || b.spend.Model == nil || !b.held || b.unsettled {
		return ""
	}
	return price.Format(b.spend.cost)
}

func (b *reservation) priceVersion() string {
	if b == nil || b.spend.Model == nil {
		return ""
	}
	return b.spend.version
}

// setSpendHeaders sets the spend limit headers beside OpenAI's
// x-ratelimit-* ones, from the limit that refused or else the one with
// the least left at any level: x-ratelimit-limit-spend, -remaining-spend (decimal
// amounts of the currency, named in x-ratelimit-spend-currency) and
// -reset-spend.
func setSpendHeaders(h http.Header, d budget.Decision, now time.Time, currency string) {
	win := budget.Window{}
	if d.RefusedBy.Money() {
		win = d.Refusal()
	} else {
		// The tightest level: the least left at any level.
		for i := 0; i <= len(d.Levels); i++ {
			for _, w := range d.Level(i).Spend {
				if w.Limit > 0 && (win.Limit == 0 || w.Remaining < win.Remaining) {
					win = w
				}
			}
		}
	}
	if win.Limit == 0 {
		return
	}
	h["X-Ratelimit-Limit-Spend"] = []string{price.Format(win.Limit)}
	h["X-Ratelimit-Remaining-Spend"] = []string{price.Format(win.Remaining)}
	h["X-Ratelimit-Reset-Spend"] = []string{max(win.Reset.Sub(now), 0).Round(time.Millisecond).String()}
	h["X-Ratelimit-Spend-Currency"] = []string{currency}
}

// periodText names a spend limit's period in a refusal.
func periodText(k budget.Limit) string {
	switch k {
	case budget.LimitSpendMinute:
		return "this minute"
	case budget.LimitSpendDay:
		return "today (UTC)"
	}
	return "this month (UTC)"
}

// spendView answers GET /v1/llmgw/spend: the caller's own tenant's spend
// and token windows, read from the ledger, with the caller's JWT (no admin
// credential). Nothing of another tenant is reachable: the tenant is the
// token's.
func (s *Server) spendView(w http.ResponseWriter, r *http.Request, ex *exchange) error {
	t, err := s.principalTenant(r, ex)
	if err != nil {
		return err
	}
	v := spendReport{Object: "llmgw.spend", Tenant: t.ID, Levels: []spendLevel{}}
	if s.Prices != nil {
		v.Currency, v.PriceVersion = s.Prices.Currency, s.Prices.Version
	}
	if s.Budgets == nil {
		return writeJSON(w, ex, v)
	}
	lim, ok := s.Budgets.Limits(t.ID)
	if !ok || !lim.Enforced() {
		return writeJSON(w, ex, v)
	}
	// Two store operations: taken from the tenant's prompt-count bucket,
	// so a tenant polling its spend floods nobody's store but its own
	// share.
	ctx := ex.context(r)
	if err := s.take(ctx, w, ex, t.ID, true); err != nil {
		return err
	}
	d, err := s.Budgets.Windows(ctx, t.ID, ex.scope, "spend-view/"+ex.id)
	if err != nil {
		if errors.Is(err, budget.ErrUnavailable) {
			return budgetUnavailable()
		}
		return budgetFailed("the budget store could not be read")
	}
	v.Levels = append(v.Levels, viewLevel("tenant", t.ID, d.Tenant(), lim.QuotaPeriod))
	// The levels below the tenant the caller's token names, in the order
	// they are reserved at (its project, then its user).
	for i, l := range lim.Levels.Of(ex.scope) {
		if i < len(d.Levels) {
			kind, name, _ := strings.Cut(l.Name, ":")
			v.Levels = append(v.Levels, viewLevel(kind, name, d.Levels[i], l.Limits.QuotaPeriod))
		}
	}
	return writeJSON(w, ex, v)
}

// viewLevel is one level's windows in the spend view.
func viewLevel(kind, name string, d budget.Windows, quota budget.Period) spendLevel {
	lv := spendLevel{Level: kind, Name: name, Spend: []spendWindow{}, Tokens: []spendWindow{}}
	for i, win := range d.Spend {
		if win.Limit > 0 {
			lv.Spend = append(lv.Spend, spendWindow{Period: [3]string{"minute", "day", "month"}[i],
				Limit: price.Format(win.Limit), Used: price.Format(win.Used), Remaining: price.Format(win.Remaining), Resets: win.Reset.UTC().Format(time.RFC3339)})
		}
	}
	for _, tw := range []struct {
		period string
		win    budget.Window
	}{{"minute", d.TPM}, {quota.String(), d.Quota}} {
		if tw.win.Limit > 0 {
			lv.Tokens = append(lv.Tokens, spendWindow{Period: tw.period, Limit: strconv.FormatInt(tw.win.Limit, 10),
				Used: strconv.FormatInt(tw.win.Used, 10), Remaining: strconv.FormatInt(tw.win.Remaining, 10), Resets: tw.win.Reset.UTC().Format(time.RFC3339)})
		}
	}
	return lv
}

// spendReport is GET /v1/llmgw/spend's answer.
type spendReport struct {
	Object       string       `json:"object"`
	Tenant       string       `json:"tenant"`
	Currency     string       `json:"currency,omitempty"`
	PriceVersion string       `json:"price_version,omitempty"`
	Levels       []spendLevel `json:"levels"`
}

// spendLevel is one level's windows (tenant, project or user): money as
// decimal amounts of the currency, tokens as counts.
type spendLevel struct {
	Level  string        `json:"level"`
	Name   string        `json:"name"`
	Spend  []spendWindow `json:"spend"`
	Tokens []spendWindow `json:"tokens"`
}

type spendWindow struct {
	Period    string `json:"period"`
	Limit     string `json:"limit"`
	Used      string `json:"used"`
	Remaining string `json:"remaining"`
	Resets    string `json:"resets_at"`
}
