package billing

import (
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/tenant"
)

// Service tiers: CheckTier runs after the body is resolved (a tier the
// tenant may not use is refused before anything is spent); Plan prices
// the request at the dearest tier it may be served at (the worst case in
// money, reserved in the same store operation as its tokens); Settle
// bills the usage at the tier the answer says it was served at. The
// money is micro-units of the catalogue's currency.

// TierAsk is the service tier a request asked for.
type TierAsk struct {
	// tier is the tier asked; explicit is false for "auto" or none,
	// which the backend resolves (the bill is then the answer's tier).
	tier     price.Tier
	explicit bool
	// may is the tiers the request may be served at: the standard tier
	// when it asked for it by name (the backend serves none dearer), else
	// every tier the tenant may use.
	may price.Tiers
	// allowed is the tenant's tiers.
	allowed price.Tiers
}

// CheckTier reads a body's service_tier: what was asked, and the tiers
// the request may be served at; a tier the tenant may not use is
// refused (param service_tier). Every tenant is held to its tiers, with
// or without a spend limit: a dearer tier is money on the account every
// tenant shares. "standard_only" is Anthropic's spelling of "standard,
// never priority"; "" and "auto" leave the tier to the backend. A
// request that names a tier other than the standard one may still be
// served dearer (flex asked, priority served, billed at 3.9 times its
// reservation): it is reserved at the dearest of the tenant's tiers.
func CheckTier(t *tenant.Tenant, serviceTier string) (TierAsk, error) {
	allowed := t.Tiers.OrStandard()
	ask := TierAsk{may: allowed, allowed: allowed}
	switch serviceTier {
	case "", "auto":
		return ask, nil
	case "standard_only":
		ask.tier, ask.explicit = price.TierStandard, true
	default:
		tier, ok := price.ParseTier([]byte(serviceTier))
		if !ok {
			return ask, tierNotAllowed(serviceTier, allowed)
		}
		ask.tier, ask.explicit = tier, true
	}
	if !allowed.Has(ask.tier) {
		return ask, tierNotAllowed(serviceTier, allowed)
	}
	if ask.tier == price.TierStandard {
		ask.may = price.Tiers(0).With(ask.tier)
	}
	return ask, nil
}

// StandardOnly reports whether the request left its tier to the backend
// ("" or "auto") and its tenant may use only the standard tier: the
// backend is then told the standard tier (request.Changes.ServiceTier),
// so it serves none dearer than was reserved and billed.
func (a TierAsk) StandardOnly() bool {
	return !a.explicit && a.allowed == price.Tiers(0).OrStandard()
}

// Bill is a usage's tokens priced: its money and the tier it was billed
// at.
type Bill struct {
	Money int64
	// Tier is the tier billed: the answer's, or the one asked when the
	// answer names none (for "auto", the dearest the request may be
	// served at).
	Tier price.Tier
	// Disputed: the answer's tier (Served) is not the one asked (Asked),
	// or one the tenant may not use: Tier is the dearer of the two. The
	// caller logs it.
	Disputed      bool
	Asked, Served price.Tier
}

// bill prices u with m, at least floor output tokens, for a request that
// asked ask and was reserved for a prompt of bound tokens.
func bill(u Usage, floor int64, m *price.Model, ask TierAsk, bound int64) Bill {
	out := max(u.Completion, floor)
	cached := min(max(u.Cached, 0), u.Prompt)
	writes := min(max(u.CacheWrite, 0), u.Prompt-cached)
	hour := min(max(u.CacheWrite1h, 0), writes)
	pu := price.Usage{Input: u.Prompt - cached - writes, CacheRead: cached, CacheWrite: writes - hour, CacheWrite1h: hour, Output: out}
	asked := ask.tier
	if !ask.explicit {
		asked = m.Dearest(ask.may, bound, out)
	}
	served := asked
	if u.TierReported {
		served = u.Tier
	}
	b := Bill{Money: m.Cost(served, pu), Tier: served, Asked: asked, Served: served}
	if u.TierReported && (!ask.allowed.Has(served) || (ask.explicit && served != asked)) {
		b.Disputed = true
		if alt := m.Cost(asked, pu); alt > b.Money {
			b.Money, b.Tier = alt, asked
		}
	}
	return b
}
