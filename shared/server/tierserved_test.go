package server

import (
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
)

// TestSpendFlexServedAtPriority: a request that asks flex and is served
// at priority is billed at priority; its reservation now covers that
// bill. Before, it was reserved at flex and billed 3.9 times its
// reservation, so a strict limit passed by the ratio of the tiers.
func TestSpendFlexServedAtPriority(t *testing.T) {
	all := price.Tiers(0).OrStandard().With(price.TierFlex).With(price.TierPriority)
	tb := &tierBackend{tier: "priority", prompt: 100, cached: 40, output: 20}
	g, spy := spendGateway(t, budget.Limits{SpendPerMonth: 1_000_000}, all, tieredPrices(t), nil, tb)
	resp, b := g.post(t, chatBody("flex", 50))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	spy.settled(t)
	reserved, charged := spy.decision().MoneyGranted, spy.lastMoney()
	t.Logf("reserved %d, charged %d micro-units", reserved, charged)
	if charged != 720 || charged > reserved {
		t.Fatalf("charged %d (want the priority bill 720) against a reservation of %d", charged, reserved)
	}
}
