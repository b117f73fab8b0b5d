package billing

import (
	"testing"

	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/tenant"
)

// TestTierReservedAtTheDearestServed: a tier named other than the
// standard one does not bind the backend (flex asked, priority served),
// so the reservation covers the dearest of the tenant's tiers; the
// standard tier asked by name is the one served.
func TestTierReservedAtTheDearestServed(t *testing.T) {
	all := price.Tiers(0).OrStandard().With(price.TierFlex).With(price.TierPriority)
	tn := &tenant.Tenant{Tiers: all}
	m := mustModel(t, prices(t))
	for _, c := range []struct {
		ask  string
		want int64 // the worst case of 10 input and 100 output tokens
	}{
		{"flex", 2 * (10 + 100*10)},
		{"priority", 2 * (10 + 100*10)},
		{"auto", 2 * (10 + 100*10)},
		{"default", 10 + 100*10},
		{"standard_only", 10 + 100*10},
	} {
		t.Run(c.ask, func(t *testing.T) {
			ask, err := CheckTier(tn, c.ask)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Worst(ask.may, 10, 100); got != c.want {
				t.Fatalf("reserved %d, want %d", got, c.want)
			}
		})
	}
}
