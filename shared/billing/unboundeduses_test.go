package billing

import (
	"testing"

	"github.com/llmgw/gateway/shared/price"
	"github.com/llmgw/gateway/shared/request"
	"github.com/llmgw/gateway/shared/tenant"
)

// TestUnboundedUsesPricedInAnyDimension: a server tool without max_uses
// is refused for a tenant with any enforced limit whenever its uses cost
// anything, in tokens (the grant's cost_per_use) or in money (the
// catalogue's price per use). Before, a tool priced in money alone
// passed, was reserved at default_uses and settled at the backend's
// count: 300 searches, 3.00 USD against a 1.00 daily limit.
func TestUnboundedUsesPricedInAnyDimension(t *testing.T) {
	tab := tenant.NewTable([]tenant.Row{
		{ID: "tokens", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {CostPerUse: 100, DefaultUses: 2}}},
		{ID: "money", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {DefaultUses: 2}}},
		{ID: "free", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {DefaultUses: 2}}},
	})
	free := (*price.Catalogue)(nil)
	for _, c := range []struct {
		name, tenant string
		prices       *price.Catalogue
		limited      bool
		refused      bool
	}{
		{"priced in tokens, limited", "tokens", free, true, true},
		{"priced in money, limited", "money", prices(t), true, true},
		{"priced in both, limited", "tokens", prices(t), true, true},
		{"priced in money, no limit", "money", prices(t), false, false},
		{"priced in nothing, limited", "free", free, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Features(tab.Lookup(c.tenant), request.Messages, search(""), func() bool { return c.limited }, c.prices)
			if !c.refused {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			r := refusal(t, err)
			if r.Code != "missing_required_parameter" || r.Param != "tools[0].max_uses" {
				t.Fatalf("refused %+v, want missing_required_parameter at tools[0].max_uses", r)
			}
		})
	}
}

// TestToolCallsToWrite: a Responses request whose body bounds no
// built-in tool calls gets max_tool_calls at the fewest uses reserved
// for a priced hosted tool; none when the client bounded them, when no
// tool is priced, or for the Messages API (its tools carry max_uses).
func TestToolCallsToWrite(t *testing.T) {
	tab := tenant.NewTable([]tenant.Row{
		{ID: "money", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {DefaultUses: 2}}},
		{ID: "tokens", Models: []string{"m"}, Grants: map[string]tenant.Grant{"web_search": {CostPerUse: 100, DefaultUses: 3}}},
	})
	responses := func(bound string) []byte {
		return []byte(`{"model":"m",` + bound + `"input":"hi","tools":[{"type":"web_search"}]}`)
	}
	for _, c := range []struct {
		name, tenant string
		op           request.Operation
		raw          []byte
		prices       *price.Catalogue
		want         int64
	}{
		{"priced in money, no bound", "money", request.Responses, responses(""), prices(t), 2},
		{"priced in tokens, no bound", "tokens", request.Responses, responses(""), nil, 3},
		{"the client's bound", "tokens", request.Responses, responses(`"max_tool_calls":5,`), nil, 0},
		{"priced in nothing", "money", request.Responses, responses(""), nil, 0},
		{"the Messages API", "tokens", request.Messages, search("4"), nil, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Features(tab.Lookup(c.tenant), c.op, c.raw, func() bool { return true }, c.prices)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.ToolCalls(); got != c.want {
				t.Fatalf("max_tool_calls %d, want %d", got, c.want)
			}
		})
	}
}
