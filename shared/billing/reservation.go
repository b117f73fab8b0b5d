package billing

import (
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
)

// Reservation is one request's budget state, from NewReservation to
// Settle. Its methods are nil-safe: a request without a budget has none.
type Reservation struct {
	Tenant string
	// Scope is the levels below the tenant it was reserved at; Levels
	// that there were any.
	Scope  budget.Scope
	Levels bool
	// Held: the store holds a reservation to settle (a tenant with token
	// limits, and the store answered).
	Held bool
	// ReservedAt is the store's time of the reservation
	// (budget.Decision.ReservedAt), carried to the settle's Charge so a
	// settle whose record the store lost is still charged.
	ReservedAt time.Time
	Bound      int64 // the prompt bound reserved for
	Granted    int64
	Cap        int64 // the output cap per choice written into the request (0: none)
	Choices    int64
	NoOutput   bool // embeddings: nothing generated
	Charged    int64
	// Unsettled: the store did not confirm the settle (the ledger keeps
	// it for replay): nothing is logged as charged.
	Unsettled bool
	// PromptCounted: Bound is the pool's exact count of the prompt
	// (Request.PromptCounted), not a bound.
	PromptCounted bool
	// Features is the priced uses of server-side features in Bound: the
	// backend's token usage leaves them out, so the charge adds them.
	Features Priced
	// Spend is the request's pricing for a tenant with a spend limit
	// (Spend.Model nil without one).
	Spend Spending
	// Background: a background response's creating request (budget.Ask
	// Hold); Deferred: its settle waits for the response's retrieval
	// (Background).
	Background, Deferred bool
}

// Spending is a reservation's money: its pricing, what the store
// granted, what it cost.
type Spending struct {
	budget.Spend
	// Tier is what the request asked for.
	Tier    TierAsk
	Granted int64
	Cost    int64
	// Billed is the tier Cost was computed at (the dearer one when the
	// answer's differs from the one asked).
	Billed price.Tier
	// Version is the price catalogue's version.
	Version string
}

// Reserved and ChargedTokens are the access log's budget_reserved and
// budget_charged (0 without a held reservation).
func (r *Reservation) Reserved() int64 {
	if r == nil || !r.Held {
		return 0
	}
	return r.Granted
}

func (r *Reservation) ChargedTokens() int64 {
	if r == nil || !r.Held {
		return 0
	}
	return r.Charged
}

// SettleState is the access log's budget_settle: charged when the store
// confirmed the charge, unsettled when it did not, deferred for a
// background response's ("" without a held reservation).
func (r *Reservation) SettleState() string {
	switch {
	case r == nil || !r.Held:
		return ""
	case r.Unsettled:
		return "unsettled"
	case r.Deferred:
		return "deferred"
	}
	return "charged"
}

// ChoiceCount is the choices reserved for (1 without a reservation).
func (r *Reservation) ChoiceCount() int64 {
	if r == nil {
		return 1
	}
	return max(r.Choices, 1)
}

// OutputCap is the cap to write into the request (0: none).
func (r *Reservation) OutputCap() int64 {
	if r == nil {
		return 0
	}
	return r.Cap
}

// MaxTokenEvents bounds a stream's token events (sse.Options): a backend
// that honours the cap written sends at most cap token events per choice,
// plus each choice's role and finish chunks and Azure's filter chunks; one
// more and it is ignoring the cap, so the stream is cut there. The bound
// is the cap actually written, whichever limit wrote it (the client's,
// the tenant's, the token grant or what a spend limit's money affords),
// never more than the token grant leaves. 0 = no bound: no strict
// reservation, or no output.
func (r *Reservation) MaxTokenEvents() int64 {
	if r == nil || !r.Held || r.Granted == 0 {
		return 0
	}
	out := budget.GrantedOutput(r.Granted, r.Bound, r.Choices)
	if r.Cap > 0 {
		out = min(out, r.Cap)
	}
	if out <= 0 {
		return 0 // embeddings
	}
	return r.Choices*(out+2) + 2
}

// StandardTier reports whether each attempt is to tell the backend the
// standard service tier (dispatch.Call.StandardTier): the request's money
// is metered (a spend limit, a priced model), it left its tier to the
// backend, and its tenant may use only the standard tier, so a backend
// cannot serve a dearer tier than was reserved. Tokens cost the same at
// every tier: a tenant without a spend limit gets nothing written.
func (r *Reservation) StandardTier() bool {
	return r != nil && r.Spend.Model != nil && r.Spend.Tier.StandardOnly()
}

// CostText and PriceVersion are the access log's cost (a decimal amount
// of the catalogue's currency) and price_version ("" without a spend
// limit).
func (r *Reservation) CostText() string {
	if r == nil || r.Spend.Model == nil || !r.Held || r.Unsettled {
		return ""
	}
	return price.Format(r.Spend.Cost)
}

func (r *Reservation) PriceVersion() string {
	if r == nil || r.Spend.Model == nil {
		return ""
	}
	return r.Spend.Version
}
