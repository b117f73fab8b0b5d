package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/route"
	"github.com/llmgw/gateway/shared/telemetry"
)

// Token budgets on the request path, in this order: reserveBudget right
// after the request-rate take (proxy.go), the output cap in every
// attempt's rewrite (outputCap) and the relay's cut (maxTokenEvents), and
// settleBudget once, when the request ends (serve). A tenant without a budget
// costs one map lookup; with no Budgets at all, one nil check.

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

// reservation is one request's budget state, from Reserve to Settle.
type reservation struct {
	tenant string
	// scope is the levels below the tenant it was reserved at; levels
	// that there were any.
	scope  budget.Scope
	levels bool
	// held: the store holds a reservation to settle (a tenant with token
	// limits, and the store answered).
	held     bool
	bound    int64 // the prompt bound reserved for
	granted  int64
	cap      int64 // the output cap per choice written into the request (0: none)
	choices  int64
	maySpend bool // a backend may have spent tokens on the request
	noOutput bool // embeddings: nothing generated
	cut      bool // the relay ended the stream at its reservation
	charged  int64
	// unsettled: the store did not confirm the settle (the ledger keeps
	// it for replay): nothing is logged as charged.
	unsettled bool
	// features is the priced uses of server-side features in bound: the
	// backend's token usage leaves them out, so the charge adds them.
	features priced
	// spend is the request's pricing for a tenant with a spend limit
	// (spend.Model nil without one); tier what it asked for.
	spend spendState
	// background: a background response's creating request (budget.Ask
	// Hold); deferred: its settle waits for the response's retrieval
	// (settleBackground).
	background, deferred bool
}

// reserveBudget reserves the request's tokens for a tenant with a budget
// and sets the x-ratelimit-*-tokens headers, or says why it may not pass.
func (s *Server) reserveBudget(ctx context.Context, w http.ResponseWriter, ex *exchange, in http.Header, pool *route.Pool, tenantID string, op request.Operation, body *request.Body, raw []byte) error {
	if s.Budgets == nil || !op.Billed() { // counting a prompt generates and bills nothing
		return nil
	}
	lim, ok := s.Budgets.Limits(tenantID)
	if !ok {
		return nil
	}
	if tb := body.ThinkingBudget; tb > 0 && lim.MaxOutputTokens > 0 && tb >= lim.MaxOutputTokens {
		// max_tokens would be lowered to the tenant's cap, at or below
		// budget_tokens: a request no backend accepts, refused here.
		return thinkingOverCap(tb, lim.MaxOutputTokens)
	}
	ask := budget.Ask{ClientCap: body.ClientCap(), Choices: body.Choices(), NoOutput: !op.Generates(),
		Hold: body.Background && op.Creates(), Scope: ex.scope}
	switch {
	case op.MinCap() > 0:
		// A budget with less left refuses the request (429) rather than
		// forward a cap the backend answers with 400.
		ask.MinOutput = op.MinCap()
	case body.ThinkingBudget > 0:
		// Extended thinking counts within max_tokens, which must stay
		// above budget_tokens: a smaller grant is refused (429) rather
		// than forwarded as a cap the backend answers with 400.
		ask.MinOutput = body.ThinkingBudget + 1
	}
	if lim.Spends() {
		sp, err := s.priceRequest(ex, body)
		if err != nil {
			return err
		}
		ask.Spend = sp
	}
	if lim.Enforced() {
		a := s.BudgetScanner.Bound(raw, op.Prompt())
		ask.PromptBound, ask.Unbounded = min(a.Tokens, budget.MaxTokens), a.Unbounded
		// Each prompt of a batch gets its own n completions.
		ask.Choices = min(ask.Choices*max(a.Prompts, 1), budget.MaxTokens)
		// Server-side features' uses (web searches, fetches) bill outside
		// the tokens: their priced uses are reserved like prompt tokens.
		ask.PromptBound = min(ask.PromptBound+ex.features.total, budget.MaxTokens)
		if ex.previousTokens > 0 {
			// A continued response's stored context is in no body: its
			// recorded total (input + output) is the bound of what the
			// backend adds to this prompt.
			ask.PromptBound = min(ask.PromptBound+ex.previousTokens, budget.MaxTokens)
		}
	}
	d, err := s.Budgets.Reserve(ctx, tenantID, ex.id, ask)
	if err == nil && !d.Allowed && !d.Held && d.RefusedBy != budget.LimitNone && ask.PromptBound > 0 && !ask.Unbounded {
		// The bound is refused: the pool's count of the prompt may fit
		// where the bound does not. A refused reservation holds nothing,
		// so the same id is asked again, for the exact count and the cap.
		if n, ok := s.exactPrompt(ctx, ex, in, pool, op, body, raw); ok && n < ask.PromptBound {
			s.Log.Info("token budget reserved the backend's input count, not the prompt bound", "request_id", ex.id, "tenant", tenantID, "bound", ask.PromptBound, "count", n)
			ask.PromptBound = n
			d, err = s.Budgets.Reserve(ctx, tenantID, ex.id, ask)
		}
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
	var cat price.Catalogue // currency and version ("" without prices)
	if s.Prices != nil {
		cat = *s.Prices
	}
	if lim.Spends() {
		setSpendHeaders(w.Header(), d, now, cat.Currency)
	}
	if !d.Allowed {
		return budgetRefusal(tenantID, d, now, cat.Currency)
	}
	outCap := d.OutputCap
	if !op.HasCaps() {
		// An API without an output-cap field (the Responses API's
		// compact) gets none written: a backend would refuse the field.
		// Its output is reserved and charged from its usage.
		outCap = 0
	}
	ex.budget = &reservation{tenant: tenantID, scope: ex.scope, levels: len(d.Levels) > 0, held: lim.Enforced() && !d.Degraded, bound: ask.PromptBound, features: ex.features,
		granted: d.Granted, cap: outCap, choices: ask.Choices, noOutput: ask.NoOutput, background: ask.Hold}
	if lim.Spends() {
		ex.budget.spend = spendState{Spend: ask.Spend, tier: ex.tier, granted: d.MoneyGranted, version: cat.Version}
	}
	// The cap is written even when it is the client's own: only the
	// field the backend's kind reads binds it (Target.CapField).
	return nil
}

// reserved and chargedTokens are the access log's budget_reserved and
// budget_charged (0 without a reservation).
func (b *reservation) reserved() int64 {
	if b == nil || !b.held {
		return 0
	}
	return b.granted
}

func (b *reservation) chargedTokens() int64 {
	if b == nil || !b.held {
		return 0
	}
	return b.charged
}

// settleState is the access log's budget_settle: charged when the store
// confirmed the charge, unsettled when it did not ("" without a
// reservation).
func (b *reservation) settleState() string {
	switch {
	case b == nil || !b.held:
		return ""
	case b.unsettled:
		return "unsettled"
	case b.deferred:
		return "deferred"
	}
	return "charged"
}

// choiceCount is the choices reserved for (1 without a reservation).
func (b *reservation) choiceCount() int64 {
	if b == nil {
		return 1
	}
	return max(b.choices, 1)
}

// outputCap is the cap to write into the request (0: none).
func (r *exchange) outputCap() int64 {
	if r.budget == nil {
		return 0
	}
	return r.budget.cap
}

// maxTokenEvents bounds a stream's token events (sse.Options): a backend
// that honours the cap written sends at most cap token events per choice,
// plus each choice's role and finish chunks and Azure's filter chunks; one
// more and it is ignoring the cap, so the stream is cut there. The bound
// follows the grant, which covers a smaller cap the client chose too. 0 =
// no bound: no strict reservation, or no output.
func (r *exchange) maxTokenEvents() int64 {
	b := r.budget
	if b == nil || !b.held || b.granted == 0 {
		return 0
	}
	out := budget.GrantedOutput(b.granted, b.bound, b.choices)
	if out <= 0 {
		return 0 // embeddings
	}
	return b.choices*(out+2) + 2
}

// noteAttempt records whether a backend may have spent tokens on an
// attempt: it accepted the request (2xx), or the attempt failed after the
// request may have reached it (a timeout, a reset, the client leaving).
// A refused connection, or a 429/5xx/4xx answer, spends nothing.
func (r *exchange) noteAttempt(resp *http.Response, err error) {
	if r.budget == nil {
		return
	}
	var op *net.OpError
	switch {
	case err != nil && !(errors.As(err, &op) && op.Op == "dial"):
		r.budget.maySpend = true
	case resp != nil && resp.StatusCode/100 == 2:
		r.budget.maySpend = true
	}
}

// settleBudget settles the request's reservation, once, when the request
// ends (serve): with the usage the relay counted; with what was sent when
// the stream was cut at its reservation; with nothing when no backend can
// have spent anything; else (usage never reported) the reservation
// stands. The client has its answer first: the response is flushed before
// the store round trip.
func (s *Server) settleBudget(w http.ResponseWriter, ex *exchange) {
	b := ex.budget
	if b == nil || !b.held {
		return
	}
	if ex.wroteHeader {
		_ = http.NewResponseController(w).Flush()
	}
	if b.background && ex.remembered && !ex.usageFinal && !s.Budgets.Strict() && !b.levels {
		// Estimate mode, a background response recorded with its
		// reservation's id (Owner.Background): the reservation stays
		// charged until the response is retrieved complete, whose usage
		// settles it (settleBackground), or its lease ends (issue 30).
		// Its money too: the retrieval prices the usage by the record's
		// model at the tier the answer names (backgroundCost). Not for a
		// request reserved at levels below its tenant: the record names no
		// scope, so its reservation (strict: Hold) is charged now.
		b.deferred, b.charged = true, b.granted
		return
	}
	ctx := context.Background() // the ledger bounds it; a client that left is settled too
	// counted is what the gateway saw itself: the prompt bound, and one
	// token per token event relayed (a JSON answer's text is at most one
	// token per byte). Charged, with at least the reservation, whenever
	// the backend's own count is missing or cannot be true.
	counted := b.bound + ex.tokenEvents
	if !b.noOutput && ex.answerBytes > 0 {
		counted = b.bound + ex.answerBytes
	}
	actual, why := int64(0), ""
	switch {
	case ex.hasUsage && ex.usageFinal:
		billed, ok := ex.usage.Billed()
		switch {
		case !ok:
			why = "usage holds a count that cannot be true"
		case ex.usage.CompletionTokens < ex.outputFloor:
			// Every floor event of the operation's meter carries at least
			// one token (sse.Meter.OutputFloor).
			why = "usage reports fewer output tokens than the token events relayed"
		}
		// Server tools' uses by the backend's count where it reports one
		// (usage.server_tool_use), else as reserved.
		actual = min(billed+b.features.charge(ex.usage.ServerTools), budget.MaxTokens)
	case ex.hasUsage:
		// Input counts (message_start) or a running total: the stream
		// ended before the event that carries its bill (issue 30).
		why = "the stream ended before the event that carries its usage"
	case b.cut:
		// The backend ignored the cap and reported nothing.
		why = "the stream was cut at its reservation without usage"
	case !b.maySpend:
	default:
		why = "the backend reported no usage"
	}
	money := int64(0)
	if why == "" && ex.hasUsage && ex.usageFinal {
		money = s.cost(ex, b)
	}
	if why != "" {
		actual = max(b.granted, counted)
		if b.spend.Model != nil {
			// The same in money: the reservation, or what the gateway
			// counted priced at the worst case.
			money = max(b.spend.granted, b.spend.Worst(b.bound, max(0, counted-b.bound)))
		}
		s.Log.Warn("token budget settled without the backend's usage: charged the larger of the reservation and what the gateway counted",
			"request_id", ex.id, "tenant", b.tenant, "why", why, "charged", actual, "reserved", b.granted, "counted", counted)
	}
	b.spend.cost = money
	st, err := s.Budgets.SettleCharge(ctx, b.tenant, ex.id, budget.Charge{Tokens: actual, Money: money, Scope: b.scope})
	if err != nil {
		// The ledger replays the settle when the store answers again;
		// until then (and if it never does, after its lease) the
		// reservation stands: an overcharge for a while, never an
		// overshoot. Nothing was charged that the store confirmed.
		s.Log.Warn("token budget not settled: kept for replay, the reservation stands meanwhile", "request_id", ex.id, "tenant", b.tenant, "actual", actual, "err", err)
		b.unsettled = true
		return
	}
	if !st.Found && !st.Recreated {
		s.Log.Warn("token budget settle found no reservation (the store lost it, or its lease ended twice over)", "request_id", ex.id, "tenant", b.tenant, "actual", actual)
	}
	b.charged = st.Actual
}

// settleBackground settles a background response's creating request
// once the response is retrieved complete (GET /v1/responses/{id}, JSON
// or resumed stream) and its usage is the bill: in estimate mode the
// reservation its creation left charged is settled at that usage (the
// difference refunded or charged), and the record forgets the
// reservation, so it is settled once; in strict mode, which charged the
// reservation at creation and capped the output by it, the usage is
// logged (issue 30 section 5).
func (s *Server) settleBackground(ex *exchange, id string, o affinity.Owner) {
	if o.Background == "" || s.Budgets == nil || !ex.hasUsage || !ex.usageFinal {
		return
	}
	billed, ok := ex.usage.Billed()
	if !ok || ex.usage.CompletionTokens < ex.outputFloor {
		// A count that cannot be true, or below the token events a
		// resumed stream relayed: the reservation stays charged.
		s.Log.Warn("background response retrieved with a usage that cannot be true: its reservation stays charged", "request_id", ex.id, "response_id", id, "reservation", o.Background)
		return
	}
	if s.Budgets.Strict() {
		s.Log.Info("background response retrieved complete: strict mode charged its reservation at creation", "request_id", ex.id, "response_id", id, "reservation", o.Background, "usage", billed)
		return
	}
	ctx := context.Background()
	// Its money at its usage's price, the tokens' as for tokens.
	st, err := s.Budgets.SettleCharge(ctx, o.Tenant, o.Background, budget.Charge{Tokens: billed, Money: s.backgroundCost(ex, o)})
	if err != nil {
		s.Log.Warn("background response's usage not settled: kept for replay", "request_id", ex.id, "response_id", id, "reservation", o.Background, "usage", billed, "err", err)
		return
	}
	s.Log.Info("background response retrieved complete: its reservation settled at its usage", "request_id", ex.id, "response_id", id,
		"reservation", o.Background, "usage", billed, "reserved", st.Reserved, "found", st.Found)
	o.Background, o.Tokens = "", billed
	actx, cancel := context.WithTimeout(ctx, affinityTimeout)
	defer cancel()
	if err := s.Affinity.Put(actx, id, o, s.ResponseTTL); err != nil {
		s.Log.Warn("background response's record not updated: a later retrieval settles nothing more (settles are once per id)", "response_id", id, "err", err)
	}
}

// setTokenHeaders sets OpenAI's x-ratelimit-*-tokens headers from the
// limit that refused, or else the configured limit with the least left
// at any level (tokens per minute on a tie, the tenant's before its
// levels'): what decides the next request. Nothing
// when the store did not answer (a degraded decision knows no window).
func setTokenHeaders(h http.Header, d budget.Decision, now time.Time) {
	win := d.Refusal()
	if win.Limit == 0 {
		// The tightest level: the least left at any level.
		for i := 0; i <= len(d.Levels); i++ {
			l := d.Level(i)
			for _, w := range [2]budget.Window{l.TPM, l.Quota} {
				if w.Limit > 0 && (win.Limit == 0 || w.Remaining < win.Remaining) {
					win = w
				}
			}
		}
	}
	if win.Limit == 0 {
		return
	}
	h["X-Ratelimit-Limit-Tokens"] = []string{strconv.FormatInt(win.Limit, 10)}
	h["X-Ratelimit-Remaining-Tokens"] = []string{strconv.FormatInt(win.Remaining, 10)}
	h["X-Ratelimit-Reset-Tokens"] = []string{max(win.Reset.Sub(now), 0).Round(time.Millisecond).String()}
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
