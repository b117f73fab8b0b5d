package billing

import (
	"fmt"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// Request is what planning a request's reservation reads.
type Request struct {
	Tenant string
	Op     request.Operation
	Body   *request.Body
	// Raw is the body as the client sent it; Scanner reads its prompt
	// bound, only for a tenant whose token limits are enforced.
	Raw     []byte
	Scanner prompt.Scanner
	Limits  budget.Limits
	// Scope is who below the tenant the request is charged to.
	Scope    budget.Scope
	Features Priced
	Tier     TierAsk
	// PreviousTokens is a continued response's recorded total tokens (0:
	// none known).
	PreviousTokens int64
	// PromptCounted: the ask's prompt bound was replaced by the pool's
	// exact count of the prompt (Recount), so a stopped stream is charged
	// it as the prompt (Reservation.PromptCounted).
	PromptCounted bool
	// Prices prices the request for a tenant with a spend limit, and
	// names the currency and version the reservation was priced in.
	Prices *price.Catalogue
}

// Plan is the reservation q asks of its tenant's budget. The client's cap
// and choices are its body's; the least output is the operation's
// smallest cap, or one above a thinking budget (Extended thinking counts
// within max_tokens, which must stay above budget_tokens): a smaller
// grant is refused (429) rather than forwarded as a cap the backend
// answers with 400. For a tenant whose token limits are enforced, the
// prompt bound is the body's, each prompt of a batch gets its own
// choices, and the features' priced uses and a continued response's
// stored context (in no body: its recorded total bounds what the backend
// adds) are reserved like prompt tokens. For a tenant with a spend
// limit, the request is priced at the tiers it may be served at. A
// thinking budget at or above the tenant's output cap, which would lower
// max_tokens to a request no backend accepts, and a model without a
// price are refused.
func Plan(q *Request) (budget.Ask, error) {
	op, body, lim := q.Op, q.Body, q.Limits
	if tb := body.ThinkingBudget; tb > 0 && lim.MaxOutputTokens > 0 && tb >= lim.MaxOutputTokens {
		return budget.Ask{}, thinkingOverCap(tb, lim.MaxOutputTokens)
	}
	ask := budget.Ask{ClientCap: body.ClientCap(), Choices: body.Choices(), NoOutput: !op.Generates(),
		Hold: body.Background && op.Creates(), Scope: q.Scope}
	switch {
	case op.MinCap() > 0:
		ask.MinOutput = op.MinCap()
	case body.ThinkingBudget > 0:
		ask.MinOutput = body.ThinkingBudget + 1
	}
	if lim.Spends() {
		m, ok := q.Prices.Model(body.Model)
		if !ok {
			// The config check prices every model of a tenant with a
			// spend limit; a model without a price is a bug, refused.
			return budget.Ask{}, failed(fmt.Sprintf("model %q has no price in the catalogue", body.Model))
		}
		ask.Spend = budget.Spend{Model: m, Tiers: q.Tier.may, Fixed: q.Features.money}
	}
	if lim.Enforced() {
		a := q.Scanner.Bound(q.Raw, op.Prompt())
		ask.PromptBound, ask.Unbounded = min(a.Tokens, budget.MaxTokens), a.Unbounded
		ask.Choices = min(ask.Choices*max(a.Prompts, 1), budget.MaxTokens)
		ask.PromptBound = min(ask.PromptBound+q.Features.total, budget.MaxTokens)
		if q.PreviousTokens > 0 {
			ask.PromptBound = min(ask.PromptBound+q.PreviousTokens, budget.MaxTokens)
		}
	}
	return ask, nil
}

// Recount reports whether a reservation the store refused (d) for ask
// may pass with the exact count of the prompt: its bound was refused by
// a limit, and the body holds the whole prompt, so the pool's count may
// fit where the bound does not. A refused reservation holds nothing: the
// same id is asked again, for the count (at most the bound) and the cap.
func Recount(ask budget.Ask, d budget.Decision) bool {
	return !d.Allowed && !d.Held && d.RefusedBy != budget.LimitNone && ask.PromptBound > 0 && !ask.Unbounded
}

// NewReservation is the reservation the store allowed (d) for q's ask,
// kept to the request's end. An API without an output-cap field (the
// Responses API's compact) gets no cap written: a backend would refuse
// the field; its output is reserved and charged from its usage. The cap
// is otherwise kept even when it is the client's own: only the field the
// backend's kind reads binds it.
func NewReservation(q *Request, ask budget.Ask, d budget.Decision) *Reservation {
	outCap := d.OutputCap
	if !q.Op.HasCaps() {
		outCap = 0
	}
	r := &Reservation{Tenant: q.Tenant, Scope: q.Scope, Levels: len(d.Levels) > 0, Held: q.Limits.Enforced() && !d.Degraded,
		Bound: ask.PromptBound, PromptCounted: q.PromptCounted, Features: q.Features, Granted: d.Granted, Cap: outCap, Choices: ask.Choices,
		NoOutput: ask.NoOutput, Background: ask.Hold, ReservedAt: d.ReservedAt}
	if q.Limits.Spends() {
		r.Spend = Spending{Spend: ask.Spend, Tier: q.Tier, Granted: d.MoneyGranted}
		if q.Prices != nil {
			r.Spend.Version = q.Prices.Version
		}
	}
	return r
}

// TokenWindow is the token window a decision's x-ratelimit-*-tokens
// headers report: the limit that refused, or else the configured limit
// with the least left at any level (tokens per minute on a tie, the
// tenant's before its levels'), what decides the next request. Its Limit
// is 0 when there is none to report (a degraded decision knows no
// window).
func TokenWindow(d budget.Decision) budget.Window {
	win := d.Refusal()
	if win.Limit != 0 {
		return win
	}
	for i := 0; i <= len(d.Levels); i++ {
		l := d.Level(i)
		for _, w := range [2]budget.Window{l.TPM, l.Quota} {
			if w.Limit > 0 && (win.Limit == 0 || w.Remaining < win.Remaining) {
				win = w
			}
		}
	}
	return win
}

// SpendWindow is TokenWindow for the spend limits.
func SpendWindow(d budget.Decision) budget.Window {
	if d.RefusedBy.Money() {
		return d.Refusal()
	}
	win := budget.Window{}
	for i := 0; i <= len(d.Levels); i++ {
		for _, w := range d.Level(i).Spend {
			if w.Limit > 0 && (win.Limit == 0 || w.Remaining < win.Remaining) {
				win = w
			}
		}
	}
	return win
}
