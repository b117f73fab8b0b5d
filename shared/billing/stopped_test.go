package billing

import (
	"testing"

	"github.com/llmgw/gateway/shared/budget"
)

// TestSettleStopped: what a stream is charged for each way it can end,
// per backend kind. The reservation granted 1,000 tokens for a prompt
// bound of 200 (the backend's prompt is 150); 40 token events were
// relayed. Before, every ending short of the bill was charged at least
// the whole reservation (1,000).
func TestSettleStopped(t *testing.T) {
	allowance := int64(StoppedAllowance)
	// Anthropic's message_start: the input counts (with the cache's
	// shares), an output of 1. vLLM's continuous_usage_stats: the prompt
	// and the output so far, which may outrun the events (several tokens
	// a chunk).
	messageStart := Usage{Tokens: 151, Trusted: true, Prompt: 150, Completion: 1, Cached: 100}
	running := Usage{Tokens: 240, Trusted: true, Prompt: 150, Completion: 90}
	stopped := func(u Usage, has bool) Observed {
		return Observed{Stopped: true, MaySpend: true, TokenEvents: 40, OutputFloor: 38, Usage: u, HasUsage: has}
	}
	for _, c := range []struct {
		name    string
		counted bool  // the gateway counted the prompt (Bound is 120, the count)
		choices int64 // 1 when 0
		// estimate: estimate mode, which grants nothing; the cap written
		// per choice (cap).
		estimate bool
		cap      int64
		o        Observed
		tokens   int64
	}{
		// The endings that stop a stream mid-answer, each alike: the
		// client left, the gateway shut down, the backend died (reset,
		// its own error event, an end without the terminal event), the
		// backend went silent (idle cut), a deadline passed.
		{name: "client gone/openai: the prompt bound", o: stopped(Usage{}, false), tokens: 200 + 40 + allowance},
		{name: "client gone/openai: the prompt counted", counted: true, o: stopped(Usage{}, false), tokens: 120 + 40 + allowance},
		{name: "client gone/anthropic: message_start's input", o: stopped(messageStart, true), tokens: 150 + 40 + allowance},
		{name: "client gone/vllm: the running usage", o: stopped(running, true), tokens: 150 + 90 + allowance},
		{name: "shutdown/anthropic", o: stopped(messageStart, true), tokens: 150 + 40 + allowance},
		{name: "backend died/openai", o: stopped(Usage{}, false), tokens: 200 + 40 + allowance},
		{name: "idle cut/vllm", o: stopped(running, true), tokens: 150 + 90 + allowance},
		{name: "two choices: an allowance each", choices: 2, o: stopped(Usage{}, false), tokens: 200 + 40 + 2*allowance},
		{name: "a running usage that cannot be true: the bound", o: stopped(Usage{Prompt: -1}, true), tokens: 200 + 40 + allowance},
		{name: "the allowance stops at the reservation", o: Observed{Stopped: true, MaySpend: true, TokenEvents: 790}, tokens: 1000},
		{name: "what was relayed is charged whole", o: Observed{Stopped: true, MaySpend: true, TokenEvents: 900}, tokens: 1100},
		{name: "estimate mode: the allowance", estimate: true, cap: 800, o: stopped(Usage{}, false), tokens: 200 + 40 + allowance},
		{name: "estimate mode: within the cap written", estimate: true, cap: 45, o: stopped(Usage{}, false), tokens: 200 + 45},
		// Its bill arrived before the stream stopped (message_delta,
		// then the client left before message_stop): the bill, in
		// strict mode too.
		{name: "stopped after its bill", o: Observed{Stopped: true, MaySpend: true, TokenEvents: 40, HasUsage: true, Final: true,
			Usage: usage(150, 600), Strict: true}, tokens: 750},
		// Not stopped: the relay cut the backend that ignored its cap,
		// or the stream reached its terminal event without a bill.
		{name: "budget cut: at least the reservation", o: Observed{Cut: true, MaySpend: true, TokenEvents: 900}, tokens: 1100},
		{name: "budget cut with message_start: at least the reservation", o: Observed{Cut: true, Stopped: true, MaySpend: true, TokenEvents: 54, Usage: messageStart, HasUsage: true}, tokens: 1000},
		{name: "completed without a bill: the reservation", o: Observed{MaySpend: true, TokenEvents: 40, Usage: messageStart, HasUsage: true}, tokens: 1000},
		{name: "completed: the bill", o: Observed{MaySpend: true, TokenEvents: 40, OutputFloor: 40, HasUsage: true, Final: true, Usage: usage(150, 40)}, tokens: 190},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Reservation{Held: true, Granted: 1000, Bound: 200, Choices: max(c.choices, 1)}
			if c.estimate {
				r.Granted, r.Cap = 0, c.cap
			}
			if c.counted {
				r.Bound, r.PromptCounted = 120, true
			}
			s := r.Settle(c.o)
			if s.Charge.Tokens != c.tokens {
				t.Fatalf("charged %d tokens (%s), want %d", s.Charge.Tokens, s.Why, c.tokens)
			}
			if (s.Why == "") != (c.o.HasUsage && c.o.Final) {
				t.Fatalf("why %q for %+v", s.Why, c.o)
			}
		})
	}
}

// TestSettleStoppedMoney: a stopped stream's money is what its tokens
// cost: the prompt bound at the dearest tier it may be served at, or
// the backend's input counts with the cache's reads at their price, and
// never more than the money reserved but for what was relayed.
func TestSettleStoppedMoney(t *testing.T) {
	cat := prices(t)
	m := mustModel(t, cat)
	standard, _ := CheckTier(tenants().Lookup("searcher"), "default")
	out := int64(40 + StoppedAllowance)
	for _, c := range []struct {
		name  string
		o     Observed
		money int64
	}{
		// 1 an input token, 10 an output token at the standard tier.
		{"the prompt bound", Observed{Stopped: true, MaySpend: true, TokenEvents: 40}, 200 + 10*out},
		{"message_start's input", Observed{Stopped: true, MaySpend: true, TokenEvents: 40, HasUsage: true,
			Usage: Usage{Tokens: 151, Trusted: true, Prompt: 150, Completion: 1}}, 150 + 10*out},
		{"within the money reserved", Observed{Stopped: true, MaySpend: true, TokenEvents: 475}, 5000},
		{"what was relayed past it", Observed{Stopped: true, MaySpend: true, TokenEvents: 600}, 200 + 10*600},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Reservation{Held: true, Granted: 1000, Bound: 200, Choices: 1,
				Spend: Spending{Spend: budget.Spend{Model: m, Tiers: standard.may}, Tier: standard, Granted: 5000}}
			s := r.Settle(c.o)
			if s.Charge.Money != c.money || r.Spend.Cost != c.money {
				t.Fatalf("money %d, want %d", s.Charge.Money, c.money)
			}
		})
	}
}
