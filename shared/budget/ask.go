package budget

import "github.com/llmgw/gateway/shared/price"

// Ask is what one request asks of a budget: its prompt bound, read from
// its body by package prompt's Scanner, and its choices and output cap, which the caller
// takes from its body decoder (the reading the backend gets).
type Ask struct {
	// PromptBound is a bound provably at least the prompt tokens the
	// backend will count (see prompt.Scanner.Bound for the proof and its premises).
	PromptBound int64
	// Choices is the number of completions generated (n, or best_of for
	// /v1/completions, whichever is larger); 0 means 1. Every choice may
	// produce the output cap.
	Choices int64
	// ClientCap is the client's output cap per choice, the largest of
	// max_completion_tokens, max_tokens and max_output_tokens present; 0
	// when none is.
	ClientCap int64
	// MinOutput is the least output cap per choice the backend accepts
	// (OpenAI's Responses API refuses a max_output_tokens below 16); 0 is
	// Config.MinOutputTokens. A request with less left is refused rather
	// than forwarded with a cap its backend rejects. Set by the caller.
	MinOutput int64
	// NoOutput marks a request without output tokens (embeddings).
	NoOutput bool
	// Hold reserves and caps the request as strict mode does, in either
	// mode: a background response goes on generating after its creating
	// request ends, so that request is charged its reservation rather
	// than what its answer showed (in estimate mode it was once
	// charged its JSON bytes, with no cap). Set by the caller.
	Hold bool
	// Unbounded marks a prompt that includes content the body does not
	// hold: a file, an earlier response or conversation, a hosted tool's
	// results. PromptBound covers only the body; the rest is charged when
	// the request settles, so such a request can overshoot a strict budget
	// by its hidden prompt.
	Unbounded bool
	// Scope is who below the tenant the request is charged to (its
	// project and user, from the verified token): the levels of the
	// tenant's Limits.Levels it reserves at.
	Scope Scope
	// Spend prices the request for the tenant's spend limits;
	// its zero value prices the tokens at nothing.
	Spend Spend
}

// Spend is how a request is priced for the spend limits: its model's
// prices at the tiers it may be served at, plus money outside the tokens
// (server features' uses, as reserved).
type Spend struct {
	Model *price.Model
	// Tiers are the tiers the request may be served at: the one it asks,
	// or every tier its tenant may use for "auto" or none given.
	Tiers price.Tiers
	// Fixed is money the request costs besides its tokens, in
	// micro-units.
	Fixed int64
}

// Worst is the most input prompt tokens and output tokens may cost, in
// micro-units, saturating at MaxTokens.
func (s Spend) Worst(input, output int64) int64 {
	w := int64(0)
	if s.Model != nil {
		w = s.Model.Worst(s.Tiers, input, output)
	}
	return satAdd(w, max(s.Fixed, 0))
}

// affordable is the largest output per choice in [lo, hi] whose worst
// case for choices choices fits money (lo when none does): the output cap
// a spend grant leaves. Worst is monotone in the output, so a binary
// search finds it.
func (s Spend) affordable(money, bound, choices, lo, hi int64) int64 {
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if s.Worst(bound, satMul(choices, mid)) <= money {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

func (a Ask) choices() int64 { return max(a.Choices, 1) }
