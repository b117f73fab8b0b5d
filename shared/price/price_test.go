package price

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/problem"
)

func TestParseMicros(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		bad  string
	}{
		{"2.50", 2_500_000, ""},
		{"0.075", 75_000, ""},
		{"15", 15_000_000, ""},
		{"0.000001", 1, ""},
		{"0.0000001", 0, "more than 6 decimal places"},
		{"-1", 0, "not a decimal"},
		{"1e3", 0, "not a decimal"},
		{"1.", 0, "not a decimal"},
		{".5", 0, "not a decimal"},
		{"1,000", 0, "not a decimal"},
		{"", 0, "empty"},
		{"9007199254.740992", 1 << 53, ""},
		{"9007199254.740993", 0, "largest amount"},
		{"99999999999999999999999", 0, "largest amount"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMicros(tc.in)
			switch {
			case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
				t.Fatalf("ParseMicros(%q) = %d, %v; want an error with %q", tc.in, got, err, tc.bad)
			case tc.bad == "" && (err != nil || got != tc.want):
				t.Fatalf("ParseMicros(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{49_800_000: "49.80", 150: "0.00015", 0: "0.00", 1_234_567: "1.234567", -5_000_000: "-5.00"} {
		if got := Format(in); got != want {
			t.Errorf("Format(%d) = %q, want %q", in, got, want)
		}
	}
}

// spec is a catalogue with OpenAI-like and Anthropic-like models.
func spec() Spec {
	return Spec{Currency: "USD", Version: "2026-12-01", Models: []ModelSpec{
		{Model: "gpt", RateSpec: RateSpec{Input: "2.50", CachedInput: "1.25", Output: "10.00"},
			Tiers: []TierSpec{{Name: "flex", Multiplier: "0.5"}, {Name: "priority", RateSpec: RateSpec{Input: "4.25", CachedInput: "2.125", Output: "17.00"}}}},
		{Model: "claude", RateSpec: RateSpec{Input: "3", CachedInput: "0.30", CacheWrite: "3.75", CacheWrite1h: "6", Output: "15"},
			LongContext: &LongSpec{AboveInputTokens: 200_000, InputMultiplier: "2", OutputMultiplier: "1.5"}},
	}, Features: []FeatureSpec{{Name: "web_search", PerUse: "0.01"}}}
}

func mustNew(t *testing.T, s Spec) *Catalogue {
	t.Helper()
	var p []string
	c := New(s, []string{"web_search", "web_fetch"}, problem.Into(&p, "prices"))
	if len(p) > 0 || c == nil {
		t.Fatalf("New: %v", p)
	}
	return c
}

func TestCost(t *testing.T) {
	t.Parallel()
	c := mustNew(t, spec())
	gpt, _ := c.Model("gpt")
	claude, _ := c.Model("claude")
	for _, tc := range []struct {
		name string
		m    *Model
		tier Tier
		u    Usage
		want Micros
	}{
		// 1000×2.50 + 500×1.25 + 200×10 per million: 2500+625+2000 µ... /1e6 per token
		{"standard", gpt, TierStandard, Usage{Input: 1000, CacheRead: 500, Output: 200}, 2500 + 625 + 2000},
		{"flex is half", gpt, TierFlex, Usage{Input: 1000, CacheRead: 500, Output: 200}, 1250 + 313 + 1000},
		{"priority own prices", gpt, TierPriority, Usage{Input: 1000, Output: 200}, 4250 + 3400},
		{"scale unpriced: dearest priced", gpt, TierScale, Usage{Input: 1000, Output: 200}, 4250 + 3400},
		{"one token rounds up", gpt, TierStandard, Usage{Input: 1}, 3},
		{"cache writes", claude, TierStandard, Usage{Input: 100, CacheRead: 1000, CacheWrite: 1000, CacheWrite1h: 1000, Output: 10}, 300 + 300 + 3750 + 6000 + 150},
		{"at the threshold: standard rates", claude, TierStandard, Usage{Input: 200_000, Output: 1000}, 600_000 + 15_000},
		{"past it: long rates", claude, TierStandard, Usage{Input: 150_000, CacheRead: 50_001, Output: 1000}, 900_000 + 30_001 + 22_500},
		{"saturates", gpt, TierStandard, Usage{Input: 1 << 53, Output: 1 << 53}, MaxMicros},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.Cost(tc.tier, tc.u); got != tc.want {
				t.Fatalf("Cost = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestWorstBoundsCost(t *testing.T) {
	t.Parallel()
	c := mustNew(t, spec())
	claude, _ := c.Model("claude")
	gpt, _ := c.Model("gpt")
	all := Tiers(0).With(TierStandard).With(TierFlex).With(TierPriority)
	if got, want := gpt.Worst(all, 1000, 100), gpt.Cost(TierPriority, Usage{Input: 1000, Output: 100}); got != want {
		t.Errorf("Worst over tiers = %d, want priority's %d", got, want)
	}
	if got := gpt.Dearest(all, 1000, 100); got != TierPriority {
		t.Errorf("Dearest = %s, want priority", got)
	}
	// The worst case prices every prompt token at the dearest input-side
	// rate (a 1-hour cache write) and crosses into the long context.
	if got, want := claude.Worst(Tiers(0).OrStandard(), 300_000, 1000), claude.Cost(TierStandard, Usage{CacheWrite1h: 300_000, Output: 1000}); got != want {
		t.Errorf("Worst = %d, want %d", got, want)
	}
	// Every split of a prompt at or below the bound, and output at or
	// below the cap, costs at most the worst case.
	for in := int64(0); in <= 400_000; in += 9_973 {
		w := claude.Worst(Tiers(0).OrStandard(), in, 500)
		for _, u := range []Usage{{Input: in, Output: 500}, {CacheRead: in / 2, CacheWrite: in - in/2, Output: 500}, {CacheWrite1h: in, Output: 499}} {
			if got := claude.Cost(TierStandard, u); got > w {
				t.Fatalf("bound %d: cost %d of %+v above worst %d", in, got, u, w)
			}
		}
	}
}

func TestNewReportsEveryField(t *testing.T) {
	t.Parallel()
	s := Spec{Currency: "usd", Models: []ModelSpec{
		{Model: "a", RateSpec: RateSpec{Input: "1.5.0", Output: "2"}, Tiers: []TierSpec{{Name: "turbo"}, {Name: "flex"}, {Name: "priority", Multiplier: "2", RateSpec: RateSpec{Input: "1"}}}},
		{Model: "a", RateSpec: RateSpec{Output: "x"}, LongContext: &LongSpec{InputMultiplier: "0"}},
	}, Features: []FeatureSpec{{Name: "teleport", PerUse: "1"}, {Name: "web_search"}}}
	var p []string
	if c := New(s, []string{"web_search"}, problem.Into(&p, "prices")); c != nil {
		t.Fatal("New accepted a bad catalogue")
	}
	got := strings.Join(p, "\n")
	for _, want := range []string{
		"prices.currency: must be an ISO 4217",
		"prices.version: required",
		"prices.models[0].input: \"1.5.0\" is not a decimal",
		"prices.models[0].tiers[0].name: must be one of",
		"prices.models[0].tiers[1].multiplier: required",
		"prices.models[0].tiers[2].multiplier: give a multiplier or prices",
		"prices.models[1].model: \"a\" is priced twice",
		"prices.models[1].input: required",
		"prices.models[1].output: \"x\" is not a decimal",
		"prices.models[1].long_context.above_input_tokens: must be at least 1",
		"prices.models[1].long_context.input_multiplier: must be above 0",
		"prices.models[1].long_context.output_multiplier: required",
		"prices.features[0].name: must be a server feature",
		"prices.features[1].per_use: required",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}

func TestParseTier(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Tier{"default": TierStandard, "standard": TierStandard, "flex": TierFlex, "priority": TierPriority, "scale": TierScale, "auto": TierUnknown, "Flex": TierUnknown} {
		if got, _ := ParseTier([]byte(in)); got != want {
			t.Errorf("ParseTier(%q) = %s, want %s", in, got, want)
		}
	}
}
