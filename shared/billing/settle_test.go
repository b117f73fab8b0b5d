package billing

import (
	"errors"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
)

// usage is a trusted final bill of prompt and completion tokens.
func usage(prompt, completion int64) Usage {
	return Usage{Tokens: prompt + completion, Trusted: true, Prompt: prompt, Completion: completion}
}

// TestSettle: what each ending of a request is charged. The reservation
// granted 1,000 tokens for a prompt bound of 200.
func TestSettle(t *testing.T) {
	searches, err := Features(tenants().Lookup("searcher"), request.Messages, search("4"), func() bool { return true }, prices(t))
	if err != nil {
		t.Fatal(err)
	}
	final := func(u Usage) Observed { return Observed{Usage: u, HasUsage: true, Final: true} }
	for _, c := range []struct {
		name string
		r    Reservation
		o    Observed
		// the tokens charged, and whether the backend's usage was the bill.
		tokens int64
		why    bool
	}{
		{"the backend's usage", Reservation{}, final(usage(150, 300)), 450, false},
		{"a usage that cannot be true", Reservation{}, final(Usage{Prompt: -1}), 1000, true},
		{"fewer output tokens than the events relayed", Reservation{}, Observed{Usage: usage(150, 3), HasUsage: true, Final: true, OutputFloor: 40, TokenEvents: 40}, 1000, true},
		{"a stream that ended before its bill", Reservation{}, Observed{MaySpend: true, Usage: usage(150, 0), HasUsage: true, TokenEvents: 10}, 1000, true},
		{"counted past the reservation", Reservation{}, Observed{MaySpend: true, Usage: usage(150, 0), HasUsage: true, TokenEvents: 1500}, 1700, true},
		{"cut at its reservation without usage", Reservation{}, Observed{Cut: true, MaySpend: true, TokenEvents: 900}, 1100, true},
		{"no backend can have spent anything", Reservation{}, Observed{}, 0, false},
		{"the backend reported nothing", Reservation{}, Observed{MaySpend: true}, 1000, true},
		{"a JSON answer's bytes are counted", Reservation{}, Observed{MaySpend: true, AnswerBytes: 5000}, 5200, true},
		{"embeddings count no answer bytes", Reservation{NoOutput: true}, Observed{MaySpend: true, AnswerBytes: 5000}, 1000, true},
		{"features by the backend's count", Reservation{Features: searches},
			final(Usage{Tokens: 15, Trusted: true, Prompt: 10, Completion: 5, ToolsReported: true, WebSearches: 2}), 215, false},
		{"features as reserved when not counted", Reservation{Features: searches}, final(usage(10, 5)), 415, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			r.Held, r.Granted, r.Bound, r.Choices = true, 1000, 200, 1
			s := r.Settle(c.o)
			if s.Deferred || s.Charge.Tokens != c.tokens || (s.Why != "") != c.why {
				t.Fatalf("settled %+v, want %d tokens (why given: %v)", s, c.tokens, c.why)
			}
			if s.Charge.Money != 0 || r.Spend.Cost != 0 {
				t.Fatalf("money %d without a spend limit", s.Charge.Money)
			}
		})
	}
}

// TestSettleBackground: a background response's reservation waits for
// its retrieval only in estimate mode, for a request recorded without
// its bill and reserved at its tenant alone.
func TestSettleBackground(t *testing.T) {
	for _, c := range []struct {
		name     string
		levels   bool
		o        Observed
		deferred bool
	}{
		{"estimate mode", false, Observed{Remembered: true}, true},
		{"strict mode", false, Observed{Remembered: true, Strict: true}, false},
		{"not recorded", false, Observed{}, false},
		{"its bill came with it", false, Observed{Remembered: true, HasUsage: true, Final: true, Usage: usage(1, 1)}, false},
		{"reserved at levels", true, Observed{Remembered: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Reservation{Held: true, Background: true, Levels: c.levels, Granted: 1000}
			o := c.o
			o.MaySpend = true
			s := r.Settle(o)
			if s.Deferred != c.deferred || r.Deferred != c.deferred {
				t.Fatalf("deferred %v, want %v", s.Deferred, c.deferred)
			}
			if c.deferred && (r.Charged != 1000 || r.SettleState() != "deferred") {
				t.Fatalf("a deferred reservation stays charged: %+v", r)
			}
		})
	}
}

// TestSettleMoney: a tenant with a spend limit is charged its usage at
// the tier the answer was served at (the dearer of it and the one asked
// when they differ), or without a usage to trust, the larger of the
// money reserved and what was counted at the worst case.
func TestSettleMoney(t *testing.T) {
	cat := prices(t)
	m := mustModel(t, cat)
	searcher := tenants().Lookup("searcher")
	auto, _ := CheckTier(searcher, "")
	standard, _ := CheckTier(searcher, "default")
	tiered := func(u Usage, tier price.Tier) Usage { u.Tier, u.TierReported = tier, true; return u }
	for _, c := range []struct {
		name     string
		ask      TierAsk
		o        Observed
		money    int64
		billed   price.Tier
		disputed bool
	}{
		{"auto: at the dearest it may be served at", auto, Observed{Usage: usage(100, 10), HasUsage: true, Final: true}, 400, price.TierPriority, false},
		{"auto: at the tier served", auto, Observed{Usage: tiered(usage(100, 10), price.TierStandard), HasUsage: true, Final: true}, 200, price.TierStandard, false},
		{"at the tier asked", standard, Observed{Usage: usage(100, 10), HasUsage: true, Final: true}, 200, price.TierStandard, false},
		{"served dearer than asked", standard, Observed{Usage: tiered(usage(100, 10), price.TierPriority), HasUsage: true, Final: true}, 400, price.TierPriority, true},
		{"served cheaper than asked", func() TierAsk { a, _ := CheckTier(searcher, "priority"); return a }(),
			Observed{Usage: tiered(usage(100, 10), price.TierFlex), HasUsage: true, Final: true}, 400, price.TierPriority, true},
		{"at least the output floor", standard, Observed{Usage: usage(100, 10), HasUsage: true, Final: true, OutputFloor: 10}, 200, price.TierStandard, false},
		{"no usage: the money reserved", standard, Observed{}, 5000, price.TierStandard, false},
		{"no usage: counted at the worst case", standard, Observed{AnswerBytes: 2000}, 200 + 10*2000, price.TierStandard, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Reservation{Held: true, Granted: 1000, Bound: 200, Choices: 1,
				Spend: Spending{Spend: budget.Spend{Model: m, Tiers: c.ask.may}, Tier: c.ask, Granted: 5000}}
			o := c.o
			o.MaySpend = true
			s := r.Settle(o)
			if s.Charge.Money != c.money || r.Spend.Cost != c.money || r.Spend.Billed != c.billed || s.Bill.Disputed != c.disputed {
				t.Fatalf("money %d at %s (disputed %v), want %d at %s (%v)", s.Charge.Money, r.Spend.Billed, s.Bill.Disputed, c.money, c.billed, c.disputed)
			}
		})
	}
}

// TestSettled: nothing counts as charged until the store confirms it.
func TestSettled(t *testing.T) {
	r := Reservation{Held: true, Granted: 1000}
	r.Settled(budget.Settlement{Found: true, Actual: 420}, nil)
	if r.ChargedTokens() != 420 || r.SettleState() != "charged" {
		t.Fatalf("%+v", r)
	}
	r = Reservation{Held: true, Granted: 1000, Spend: Spending{Spend: budget.Spend{Model: mustModel(t, prices(t))}, Cost: 7}}
	r.Settled(budget.Settlement{}, errors.New("store down"))
	if !r.Unsettled || r.SettleState() != "unsettled" || r.CostText() != "" {
		t.Fatalf("%+v", r)
	}
}

// TestBackground: a background response's usage settles its tokens, and
// its money at the tier its answer names, unless the usage cannot be
// true.
func TestBackground(t *testing.T) {
	m := mustModel(t, prices(t))
	plain := tenants().Lookup("plain")
	for _, c := range []struct {
		name          string
		o             Observed
		m             bool
		tokens, money int64
		ok            bool
	}{
		{"priced", Observed{Usage: usage(100, 10)}, true, 110, 200, true},
		{"no price: the money reserved", Observed{Usage: usage(100, 10)}, false, 110, budget.KeepReserved, true},
		{"a usage that cannot be true", Observed{Usage: Usage{}}, true, 0, 0, false},
		{"below the events relayed", Observed{Usage: usage(100, 10), OutputFloor: 11}, true, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pm := m
			if !c.m {
				pm = nil
			}
			ch, _, ok := Background(c.o, pm, plain)
			if ok != c.ok || ch.Tokens != c.tokens || ch.Money != c.money {
				t.Fatalf("charged %+v (ok %v), want %d tokens, %d micros (ok %v)", ch, ok, c.tokens, c.money, c.ok)
			}
		})
	}
}

// TestReservationNil: a request without a budget reads as none.
func TestReservationNil(t *testing.T) {
	var r *Reservation
	if r.Reserved() != 0 || r.ChargedTokens() != 0 || r.SettleState() != "" || r.ChoiceCount() != 1 ||
		r.OutputCap() != 0 || r.MaxTokenEvents() != 0 || r.CostText() != "" || r.PriceVersion() != "" {
		t.Fatal("a nil reservation reads as one")
	}
}

// TestMaxTokenEvents: the relay's bound follows the grant per choice,
// plus each choice's role and finish chunks.
func TestMaxTokenEvents(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Reservation
		want int64
	}{
		{"one choice", Reservation{Held: true, Granted: 1200, Bound: 200, Choices: 1}, 1*(1000+2) + 2},
		{"two choices", Reservation{Held: true, Granted: 1200, Bound: 200, Choices: 2}, 2*(500+2) + 2},
		{"not held", Reservation{Granted: 1200, Bound: 200, Choices: 1}, 0},
		{"no output", Reservation{Held: true, Granted: 200, Bound: 200, Choices: 1}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.r.MaxTokenEvents(); got != c.want {
				t.Fatalf("%d, want %d", got, c.want)
			}
		})
	}
}
