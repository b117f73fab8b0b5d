package billing

import (
	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/sse"
	"github.com/llmgw/gateway/shared/tenant"
)

// Usage is the backend's bill as the relay read it (sse.Usage), in the
// counts settling prices.
type Usage struct {
	// Tokens is the tokens billed: prompt plus completion, or the total
	// when larger; Trusted is false when a count cannot be true (negative,
	// or above what a store keeps exactly), and Tokens is then 0.
	Tokens  int64
	Trusted bool
	// Prompt and Completion are the input and output tokens; Cached,
	// CacheWrite and CacheWrite1h the prompt's shares read from and
	// written to a cache (the last for an hour), priced apart.
	Prompt, Completion               int64
	Cached, CacheWrite, CacheWrite1h int64
	// Tier is the service tier the answer says it was served at, when
	// TierReported.
	Tier         price.Tier
	TierReported bool
	// WebSearches and WebFetches are the server tools' uses the backend
	// counted (Anthropic's usage.server_tool_use), when ToolsReported.
	WebSearches, WebFetches int64
	ToolsReported           bool
	// Calls counts the Responses API's hosted tool call items in the
	// answer's output, when it was read (Calls.Counted).
	Calls sse.ToolCalls
}

// Observed is what the request path saw of a request by its end.
type Observed struct {
	// Usage is the answer's usage, when HasUsage; Final when it was read
	// from the answer's bill (a JSON answer's top-level usage, a stream's
	// last), not from a stream's input counts or running total.
	Usage           Usage
	HasUsage, Final bool
	// OutputFloor is the least output a true usage of the stream reports
	// (one token for each token event of the operation's meter).
	OutputFloor int64
	// TokenEvents is the events relayed that may carry generated tokens;
	// AnswerBytes a whole successful JSON answer's size.
	TokenEvents, AnswerBytes int64
	// Remembered: the request's stored response was recorded (with the
	// reservation's id, for a background response).
	Remembered bool
	// Strict is the ledger's mode (budget.Ledger.Strict).
	Strict bool
	// MaySpend: a backend may have spent tokens on the request (the
	// transport notes it per attempt); Cut: the relay ended the stream at
	// its reservation.
	MaySpend, Cut bool
	// Stopped: the stream ended before its terminal event for a reason
	// other than its cap (the client left, the gateway shut down, the
	// backend died or went silent, a deadline passed): the backend was
	// cancelled mid-answer, so what it generated is what was relayed plus
	// what was in flight (StoppedAllowance).
	Stopped bool
}

// StoppedAllowance is the output, per choice, a stopped stream is charged
// beyond what was relayed: the tokens a backend may have generated
// between the last event the gateway read and its cancel reaching the
// backend (a read buffer and a network round trip, a few events at a
// decode rate of tens to hundreds of tokens a second).
const StoppedAllowance = 16

// Settlement is how a reservation settles.
type Settlement struct {
	// Charge is what the store is to charge, once (SettleCharge), unless
	// Deferred.
	Charge budget.Charge
	// Deferred: a background response's reservation stays charged until
	// the response is retrieved; nothing is settled now.
	Deferred bool
	// Why says why the backend's usage is not the bill ("" when it is):
	// Charge is then the larger of the reservation and Counted, what the
	// gateway counted itself (in money, at the worst case).
	Why     string
	Counted int64
	// Bill is the usage's tokens priced, for a tenant with a spend limit
	// whose usage is the bill.
	Bill Bill
}

// Settle decides what the request is charged from what was observed, and
// records its money (Spend.Cost, Spend.Billed) and, for a deferred
// settle, its tokens (Charged): with the usage the relay read; with what
// was sent when the stream was cut at its reservation; for a stream
// stopped mid-answer (Observed.Stopped), with its prompt, its output
// relayed and an allowance for the tokens in flight, within the
// reservation (stopped); with nothing when no backend can have spent
// anything; else (usage never reported, or not to be believed) with the
// larger of the reservation and what the gateway counted. Call it once, for a Held reservation, and record the store's
// answer with Settled.
//
// In estimate mode a background response recorded with its
// reservation's id is deferred: the reservation stays charged until the
// response is retrieved complete, whose usage settles it (Background),
// or its lease ends. Not for a request reserved at levels below its
// tenant: the record names no scope, so its reservation is charged now.
func (r *Reservation) Settle(o Observed) Settlement {
	if r.Background && o.Remembered && !o.Final && !o.Strict && !r.Levels {
		r.Deferred, r.Charged = true, r.Granted
		return Settlement{Deferred: true}
	}
	// counted is what the gateway saw itself: the prompt bound, and one
	// token per token event relayed (a JSON answer's text is at most one
	// token per byte). Charged, with at least the reservation, whenever
	// the backend's own count is missing or cannot be true.
	s := Settlement{Counted: r.Bound + o.TokenEvents}
	if !r.NoOutput && o.AnswerBytes > 0 {
		s.Counted = r.Bound + o.AnswerBytes
	}
	actual, money := int64(0), int64(0)
	switch {
	case o.HasUsage && o.Final:
		switch {
		case !o.Usage.Trusted:
			s.Why = "usage holds a count that cannot be true"
		case o.Usage.Completion < o.OutputFloor:
			// Every floor event of the operation's meter carries at least
			// one token (sse.Meter.OutputFloor).
			s.Why = "usage reports fewer output tokens than the token events relayed"
		}
		// Server tools' uses by the backend's count where it reports one
		// (usage.server_tool_use), else as reserved.
		actual = min(o.Usage.Tokens+r.Features.charge(o.Usage), budget.MaxTokens)
		if s.Why == "" && r.Spend.Model != nil {
			s.Bill = bill(o.Usage, o.OutputFloor, r.Spend.Model, r.Spend.Tier, r.Bound)
			r.Spend.Billed = s.Bill.Tier
			money = min(s.Bill.Money+r.Features.chargeMoney(o.Usage), price.MaxMicros)
		}
	case o.Stopped && !o.Cut:
		// Cancelled mid-answer: what the backend read and what it wrote,
		// as far as the gateway saw them, within the reservation.
		s.Why = "the stream was stopped before the event that carries its usage"
		actual, money = r.stopped(o)
		r.Spend.Cost = money
		s.Charge = budget.Charge{Tokens: actual, Money: money, Scope: r.Scope, ReservedAt: r.ReservedAt}
		return s
	case o.HasUsage:
		// Input counts (message_start) or a running total: the stream
		// ended before the event that carries its bill.
		s.Why = "the stream ended before the event that carries its usage"
	case o.Cut:
		// The backend ignored the cap and reported nothing.
		s.Why = "the stream was cut at its reservation without usage"
	case !o.MaySpend:
	default:
		s.Why = "the backend reported no usage"
	}
	if s.Why != "" {
		actual = max(r.Granted, s.Counted)
		if r.Spend.Model != nil {
			// The same in money: the reservation, or what the gateway
			// counted priced at the worst case.
			money = max(r.Spend.Granted, r.Spend.Worst(r.Bound, max(0, s.Counted-r.Bound)))
		}
	}
	r.Spend.Cost = money
	s.Charge = budget.Charge{Tokens: actual, Money: money, Scope: r.Scope, ReservedAt: r.ReservedAt}
	return s
}

// stopped is what a stopped stream (Observed.Stopped) is charged, in
// tokens and money: its prompt, exact when the backend told it (the
// input counts of Anthropic's message_start, a running usage such as
// vLLM's continuous_usage_stats) or the gateway counted it (the pool's
// count, PromptCounted), else the prompt bound; its output relayed (the
// token events, or the running usage's output when larger); and
// StoppedAllowance per choice for the tokens in flight, which never takes
// the charge past the reservation (in estimate mode, which grants
// nothing, past the prompt and the cap written). What was relayed is
// charged whole, within the reservation or not.
func (r *Reservation) stopped(o Observed) (tokens, money int64) {
	prompt, u := r.Bound, Usage{}
	exact := o.HasUsage && o.Usage.Trusted
	if exact {
		u = o.Usage
		prompt = min(u.Prompt+r.Features.charge(u), budget.MaxTokens)
	} else if r.PromptCounted {
		prompt = min(r.Bound+r.Features.total, budget.MaxTokens)
	}
	out := max(o.TokenEvents, o.OutputFloor, u.Completion)
	allowance := mulTokens(StoppedAllowance, max(r.Choices, 1))
	if r.NoOutput {
		out, allowance = 0, 0
	}
	// The allowance stays within the reservation, or in estimate mode
	// (nothing granted) within the cap written.
	floor, ceiling := min(prompt+out, budget.MaxTokens), r.Granted
	if ceiling == 0 {
		ceiling = floor + allowance
		if r.Cap > 0 {
			ceiling = min(ceiling, prompt+mulTokens(r.Cap, max(r.Choices, 1)))
		}
	}
	tokens = max(floor, min(floor+allowance, ceiling))
	if r.Spend.Model == nil {
		return tokens, 0
	}
	// The same in money: the usage's cache shares priced apart when the
	// backend told them, at the tier the answer would be billed at.
	priced := func(output int64) int64 {
		if !exact {
			return r.Spend.Worst(prompt, output)
		}
		pu := u
		pu.Completion = output
		return min(bill(pu, 0, r.Spend.Model, r.Spend.Tier, r.Bound).Money+r.Features.chargeMoney(u), price.MaxMicros)
	}
	least, most := priced(out), priced(out+tokens-floor)
	if r.Spend.Granted > 0 {
		most = min(most, r.Spend.Granted)
	}
	return tokens, max(least, most)
}

// Settled records the store's answer to the settle: until the store
// confirms it (err nil), nothing counts as charged; the ledger replays
// it meanwhile.
func (r *Reservation) Settled(st budget.Settlement, err error) {
	if err != nil {
		r.Unsettled = true
		return
	}
	r.Charged = st.Actual
}

// Background is what a background response's usage settles once the
// response is retrieved complete (its usage is the bill): its tokens as
// billed, and its money at the tier its answer names, its model priced
// by m; its creating request's tier is not kept, so "auto" at the
// tenant's tiers (t nil: standard). m nil (the model has no price: a
// tenant without a spend limit reserved no money) charges the money
// reserved. ok is false when the usage cannot be true or reports fewer
// output tokens than the token events relayed: the reservation stays
// charged.
func Background(o Observed, m *price.Model, t *tenant.Tenant) (c budget.Charge, b Bill, ok bool) {
	if !o.Usage.Trusted || o.Usage.Completion < o.OutputFloor {
		return budget.Charge{}, Bill{}, false
	}
	c = budget.Charge{Tokens: o.Usage.Tokens, Money: budget.KeepReserved}
	if m == nil {
		return c, Bill{}, true
	}
	tiers := price.Tiers(0).OrStandard()
	if t != nil {
		tiers = t.Tiers.OrStandard()
	}
	b = bill(o.Usage, o.OutputFloor, m, TierAsk{may: tiers, allowed: tiers}, 0)
	c.Money = b.Money
	return c, b, true
}
