package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/billing"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/telemetry"
	"github.com/llmgw/gateway/shared/tenant"
)

// Billing on the request path, in this order: checkFeatures and
// billing.CheckTier after the body is resolved, reserveBudget right after the request-rate
// take (proxy.go), the output cap in every attempt's rewrite and the
// relay's cut (billing.Reservation's OutputCap and MaxTokenEvents), and
// settle once, when the request ends (deferred in serveProxy). Package billing
// decides each step; this file makes the store's calls, writes the
// headers and logs. A tenant without a budget costs one map lookup; with
// no Budgets at all, one nil check.

// Budgets reserves and settles tenants' token budgets: budget.Ledger.
type Budgets interface {
	// Limits returns a tenant's budget; ok is false for a tenant without.
	Limits(tenant string) (lim budget.Limits, ok bool)
	// Reserve decides a request before it is forwarded (budget.Ledger.Reserve).
	Reserve(ctx context.Context, tenant, id string, ask budget.Ask) (budget.Decision, error)
	// SettleCharge charges what the request used, tokens and money,
	// exactly once per id.
	SettleCharge(ctx context.Context, tenant, id string, actual budget.Charge) (budget.Settlement, error)
	// Windows reads a tenant's windows as they stand (the spend view).
	Windows(ctx context.Context, tenant string, scope budget.Scope, id string) (budget.Decision, error)
	// Keep settles charging the reservation: no usage was reported.
	Keep(ctx context.Context, tenant, id string) (budget.Settlement, error)
	// Strict reports strict mode (budget.Ledger.Strict).
	Strict() bool
}

// reserveBudget reserves the request's tokens for a tenant with a budget
// (billing.Plan decides what to ask) and sets the x-ratelimit-*-tokens
// headers, or says why it may not pass.
func (s *Server) reserveBudget(ctx context.Context, w http.ResponseWriter, ex *exchange, in http.Header, pool *route.Pool, tenantID string, op request.Operation, body *request.Body, raw []byte) error {
	if s.Budgets == nil || !op.Billed() { // counting a prompt generates and bills nothing
		return nil
	}
	lim, ok := s.Budgets.Limits(tenantID)
	if !ok {
		return nil
	}
	q := &ex.bill
	q.Tenant, q.Op, q.Body, q.Raw, q.Scanner, q.Limits, q.Prices = tenantID, op, body, raw, s.BudgetScanner, lim, s.Prices
	ask, err := billing.Plan(q)
	if err != nil {
		return err
	}
	// The pool's exact count of the prompt (dispatch.Count), made at
	// most once per request and taking no request token: first, for a
	// bound so large that reserving it would hold about four times the
	// prompt (countFirst); else when a limit refuses the bound, since the
	// prompt itself may fit.
	count := func() bool {
		cctx, cancel := context.WithTimeout(ctx, s.CountTimeout)
		n, ok := s.backends.Count(cctx, ex.id, pool, op, body.Model, raw, in)
		cancel()
		if !ok || n >= ask.PromptBound {
			return false
		}
		s.Log.Info("token budget reserved the backend's input count, not the prompt bound", "request_id", ex.id, "tenant", tenantID, "bound", ask.PromptBound, "count", n)
		ask.PromptBound, q.PromptCounted = n, true
		return true
	}
	counted := s.countFirst(ask) && count()
	d, err := s.Budgets.Reserve(ctx, tenantID, ex.id, ask)
	if err == nil && !counted && billing.Recount(ask, d) && count() {
		d, err = s.Budgets.Reserve(ctx, tenantID, ex.id, ask)
	}
	ex.budgetDecision = budgetDecision(d, err)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return contextError(ctx)
		case errors.Is(err, budget.ErrUnavailable):
			return budgetUnavailable()
		}
		return budgetFailed("the token budget failed")
	}
	now := s.Now()
	setTokenHeaders(w.Header(), d, now)
	currency := "" // the catalogue's ("" without prices)
	if s.Prices != nil {
		currency = s.Prices.Currency
	}
	if lim.Spends() {
		setSpendHeaders(w.Header(), d, now, currency)
	}
	if !d.Allowed {
		return billing.Refuse(tenantID, d, now, currency)
	}
	ex.budget = billing.NewReservation(q, ask, d)
	return nil
}

// countsAbove is Budgets that asks for a prompt's exact count before
// reserving a bound above CountAbove (budget.Ledger).
type countsAbove interface{ CountAbove() int64 }

// countFirst reports whether ask's prompt bound is large enough to be
// counted before it is reserved: strict mode, a bound above the
// ledger's count_above, a body that holds its whole prompt.
func (s *Server) countFirst(ask budget.Ask) bool {
	ca, ok := s.Budgets.(countsAbove)
	if !ok || !s.Budgets.Strict() || ask.Unbounded {
		return false
	}
	return ask.PromptBound > ca.CountAbove()
}

// observed is what the request path saw of ex by its end, for billing.
func (s *Server) observed(ex *exchange) billing.Observed {
	o := billing.Observed{HasUsage: ex.HasUsage, Final: ex.UsageFinal, OutputFloor: ex.OutputFloor,
		TokenEvents: ex.TokenEvents, AnswerBytes: ex.AnswerBytes, Remembered: ex.stored.remembered, Strict: s.Budgets.Strict(),
		MaySpend: ex.MaySpend, Cut: ex.Cut, Stopped: ex.Stopped}
	if ex.HasUsage {
		u := ex.Usage
		o.Usage = billing.Usage{Prompt: u.PromptTokens, Completion: u.CompletionTokens,
			Cached: u.CachedTokens, CacheWrite: u.CacheWriteTokens, CacheWrite1h: u.CacheWrite1hTokens,
			Tier: u.Tier, TierReported: u.TierReported,
			WebSearches: u.ServerTools.WebSearches, WebFetches: u.ServerTools.WebFetches, ToolsReported: u.ServerTools.Reported,
			Calls: u.Calls}
		o.Usage.Tokens, o.Usage.Trusted = u.Billed()
	}
	return o
}

// settle is the request path's last step (serveProxy defers it right
// after the reservation): it answers *errp, the error the path ends in,
// through errors.go as serve would have (and clears it), so the client
// has its answer before the store round trip, then settles the
// reservation, even when that answer aborts the response.
func (s *Server) settle(w http.ResponseWriter, ex *exchange, errp *error) {
	defer s.settleBudget(w, ex)
	if err := *errp; err != nil {
		*errp = nil
		answerError(w, ex, err)
	}
}

// settleBudget settles the request's reservation, once, with what
// billing decides it is charged (billing.Reservation.Settle). The client
// has its answer first: the response is flushed before the store round
// trip.
func (s *Server) settleBudget(w http.ResponseWriter, ex *exchange) {
	b := ex.budget
	if b == nil || !b.Held {
		return
	}
	if ex.WroteHeader {
		_ = http.NewResponseController(w).Flush()
	}
	st := b.Settle(s.observed(ex))
	if st.Deferred {
		// Its usage settles it when the response is retrieved
		// (settleBackground), or its lease ends.
		return
	}
	s.logDisputedTier(ex.id, b.Tenant, st.Bill)
	if st.Why != "" {
		s.Log.Warn("token budget settled without the backend's usage: charged by the rule for how the request ended (docs/metering.md)",
			"request_id", ex.id, "tenant", b.Tenant, "why", st.Why, "charged", st.Charge.Tokens, "reserved", b.Granted, "counted", st.Counted)
	}
	ctx := context.Background() // the ledger bounds it; a client that left is settled too
	res, err := s.Budgets.SettleCharge(ctx, b.Tenant, ex.id, st.Charge)
	b.Settled(res, err)
	if err != nil {
		// The ledger replays the settle when the store answers again;
		// until then (and if it never does, after its lease) the
		// reservation stands: an overcharge for a while, never an
		// overshoot.
		s.Log.Warn("token budget not settled: kept for replay, the reservation stands meanwhile", "request_id", ex.id, "tenant", b.Tenant, "actual", st.Charge.Tokens, "err", err)
		return
	}
	if !res.Found && !res.Recreated {
		s.Log.Warn("token budget settle found no reservation (the store lost it, or its lease ended twice over)", "request_id", ex.id, "tenant", b.Tenant, "actual", st.Charge.Tokens)
	}
}

// logDisputedTier logs a bill whose answer's service tier is not the one
// asked, or not one the tenant may use (billing.Bill.Disputed).
func (s *Server) logDisputedTier(id, tenantID string, b billing.Bill) {
	if b.Disputed {
		s.Log.Warn("spend: the answer's service tier is not the one asked, or not one the tenant may use: billed at the dearer of the two",
			"request_id", id, "tenant", tenantID, "asked", b.Asked.String(), "served", b.Served.String(), "charged", price.Format(b.Money))
	}
}

// settleBackground settles a background response's creating request
// once the response is retrieved complete (GET /v1/responses/{id}, JSON
// or resumed stream) and its usage is the bill (billing.Background): in
// estimate mode the reservation its creation left charged is settled at
// that usage (the difference refunded or charged), and the record
// forgets the reservation, so it is settled once; in strict mode, which
// charged the reservation at creation and capped the output by it, the
// usage is logged.
func (s *Server) settleBackground(ex *exchange, id string, o affinity.Owner) {
	if o.Background == "" || s.Budgets == nil || !ex.HasUsage || !ex.UsageFinal {
		return
	}
	m, _ := s.Prices.Model(o.Model)
	c, bill, ok := billing.Background(s.observed(ex), m, s.Tenants.Lookup(o.Tenant))
	if !ok {
		s.Log.Warn("background response retrieved with a usage that cannot be true: its reservation stays charged", "request_id", ex.id, "response_id", id, "reservation", o.Background)
		return
	}
	if s.Budgets.Strict() {
		s.Log.Info("background response retrieved complete: strict mode charged its reservation at creation", "request_id", ex.id, "response_id", id, "reservation", o.Background, "usage", c.Tokens)
		return
	}
	s.logDisputedTier(ex.id, o.Tenant, bill)
	ctx := context.Background()
	st, err := s.Budgets.SettleCharge(ctx, o.Tenant, o.Background, c)
	if err != nil {
		s.Log.Warn("background response's usage not settled: kept for replay", "request_id", ex.id, "response_id", id, "reservation", o.Background, "usage", c.Tokens, "err", err)
		return
	}
	s.Log.Info("background response retrieved complete: its reservation settled at its usage", "request_id", ex.id, "response_id", id,
		"reservation", o.Background, "usage", c.Tokens, "reserved", st.Reserved, "found", st.Found)
	o.Background, o.Tokens = "", c.Tokens
	actx, cancel := context.WithTimeout(ctx, affinityTimeout)
	defer cancel()
	if err := s.Affinity.Put(actx, id, o, s.ResponseTTL); err != nil {
		s.Log.Warn("background response's record not updated: a later retrieval settles nothing more (settles are once per id)", "response_id", id, "err", err)
	}
}

// setTokenHeaders sets OpenAI's x-ratelimit-*-tokens headers from the
// window billing.TokenWindow picks; nothing when there is none (a
// degraded decision knows no window).
func setTokenHeaders(h http.Header, d budget.Decision, now time.Time) {
	win := billing.TokenWindow(d)
	if win.Limit == 0 {
		return
	}
	h["X-Ratelimit-Limit-Tokens"] = []string{strconv.FormatInt(win.Limit, 10)}
	h["X-Ratelimit-Remaining-Tokens"] = []string{strconv.FormatInt(win.Remaining, 10)}
	h["X-Ratelimit-Reset-Tokens"] = []string{max(win.Reset.Sub(now), 0).Round(time.Millisecond).String()}
}

// setSpendHeaders sets the spend limit headers beside OpenAI's
// x-ratelimit-* ones, from the window billing.SpendWindow picks:
// x-ratelimit-limit-spend, -remaining-spend (decimal amounts of the
// currency, named in x-ratelimit-spend-currency) and -reset-spend.
func setSpendHeaders(h http.Header, d budget.Decision, now time.Time, currency string) {
	win := billing.SpendWindow(d)
	if win.Limit == 0 {
		return
	}
	h["X-Ratelimit-Limit-Spend"] = []string{price.Format(win.Limit)}
	h["X-Ratelimit-Remaining-Spend"] = []string{price.Format(win.Remaining)}
	h["X-Ratelimit-Reset-Spend"] = []string{max(win.Reset.Sub(now), 0).Round(time.Millisecond).String()}
	h["X-Ratelimit-Spend-Currency"] = []string{currency}
}

// checkFeatures refuses the server-side features and Anthropic-Beta
// values the tenant may not use, and prices the rest into ex.bill.Features
// (billing.Features, billing.Betas).
func (s *Server) checkFeatures(ex *exchange, t *tenant.Tenant, op request.Operation, raw []byte, h http.Header) error {
	if op.Anthropic() {
		if err := s.filterBetas(ex, t, raw, h); err != nil {
			return err
		}
	}
	budgeted := func() bool { // any of the tenant's limits is enforced, tokens or money
		if s.Budgets == nil {
			return false
		}
		lim, ok := s.Budgets.Limits(t.ID)
		return ok && lim.Enforced()
	}
	p, err := billing.Features(t, op, raw, budgeted, s.Prices)
	if err != nil {
		return err
	}
	ex.bill.Features = p
	return nil
}

// filterBetas keeps, of the request's Anthropic-Beta values, those
// billing.Betas passes, and logs the ones it drops; it refuses a body
// (raw) that carries a field a dropped beta gates.
func (s *Server) filterBetas(ex *exchange, t *tenant.Tenant, raw []byte, h http.Header) error {
	kept, dropped, err := billing.Betas(t, h["Anthropic-Beta"], raw)
	if err != nil || len(dropped) == 0 {
		return err
	}
	if len(kept) == 0 {
		delete(h, "Anthropic-Beta")
	} else {
		h["Anthropic-Beta"] = []string{strings.Join(kept, ",")}
	}
	s.Log.Warn("anthropic-beta values dropped: not on the default list nor the tenant's anthropic_beta",
		"request_id", ex.id, "tenant", ex.tenant, "dropped", dropped)
	return nil
}

// budgetDecision names a budget's answer for telemetry.
func budgetDecision(d budget.Decision, err error) string {
	switch {
	case errors.Is(err, budget.ErrUnavailable):
		return telemetry.Unavailable
	case err != nil:
		return "failed"
	case d.Degraded && d.Allowed:
		return telemetry.Degraded
	case d.Allowed:
		return telemetry.Reserved
	}
	return telemetry.Refused
}
