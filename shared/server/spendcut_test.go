package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
)

// linearPrices prices model "m" at one micro-unit an input token and
// output micro-units an output token, and the features at their specs.
func linearPrices(t *testing.T, output string, features []price.FeatureSpec) *price.Catalogue {
	return catalogue(t, price.Spec{Currency: "USD", Version: "v", Models: []price.ModelSpec{
		{Model: "m", RateSpec: price.RateSpec{Input: "1", Output: output}}}, Features: features})
}

// TestSpendCutAtTheMoneysCap: a tenant with 0.01 USD left a day gets an
// output cap of what the money affords (about 980 tokens at 10 USD a
// million); a backend that ignores it and streams 4,000 tokens is cut at
// that cap, not at the token grant (4,096 by default), so the day's
// spend stays within a few events of its limit. Before, the relay cut at
// the token grant: 4,000 tokens relayed, 0.04005 USD charged against
// 0.01.
func TestSpendCutAtTheMoneysCap(t *testing.T) {
	cat := linearPrices(t, "10", nil)
	at := attack{stream: true, events: 4000, report: 4000, clientCap: 4096}
	g, spy := spendGateway(t, budget.Limits{SpendPerDay: 10_000}, price.Tiers(0), cat, nil,
		attackBackend(request.ChatCompletions, at))
	resp, err := http.Post(g.srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(attackBody(request.ChatCompletions, at)))
	if err != nil {
		t.Fatal(err)
	}
	relayed := readAttack(t, resp, request.ChatCompletions, at)
	spy.settled(t)
	d := spy.decision()
	charged := spy.lastMoney()
	t.Logf("cap %d, relayed %d token events, reserved %d, charged %d micro-units", d.OutputCap, relayed, d.MoneyGranted, charged)
	if d.OutputCap >= 1000 || relayed > d.OutputCap+4 {
		t.Fatalf("relayed %d token events past the cap written %d", relayed, d.OutputCap)
	}
	// The cut stream is charged the reservation or the events relayed,
	// whichever is more: a few events' output past the grant at most.
	if charged > d.MoneyGranted+4*10 || charged > 10_000+4*10 {
		t.Fatalf("charged %d micro-units against a limit of 10,000 (reserved %d)", charged, d.MoneyGranted)
	}
}
