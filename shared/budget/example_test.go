package budget_test

import (
	"context"
	"fmt"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/prompt"
	"github.com/llmgw/gateway/shared/request"
)

// Example is the request path: scan the body, reserve, write the output
// cap, forward, settle from the counted usage.
func Example() {
	ledger, err := budget.New(budget.Config{}, []budget.TenantBudget{
		{Tenant: "acme", Limits: budget.Limits{TokensPerMinute: 1000}},
	}, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Write a haiku about the sea."}],"max_tokens":2000}`)

	ask := budget.Ask{PromptBound: prompt.Scanner{}.Bound(body, request.ChatCompletions.Prompt()).Tokens}
	d, err := ledger.Reserve(ctx, "acme", "req-1", ask)
	switch {
	case err != nil: // budget.ErrUnavailable: 503
		panic(err)
	case !d.Allowed: // 429, code d.RefusedBy.Code(), Retry-After from d.Refusal().Reset
		fmt.Println("refused:", d.RefusedBy.Code())
		return
	}
	fmt.Println("prompt bound", ask.PromptBound, "granted", d.Granted, "cap", d.OutputCap, "rewrite", d.RewriteCap)

	// ... forward with max_tokens = d.OutputCap, relay, count usage ...
	s, err := ledger.Settle(ctx, "acme", "req-1", 17+25) // prompt + completion tokens
	fmt.Println("refunded", s.Refunded, err)

	d, _ = ledger.Reserve(ctx, "acme", "req-2", ask)
	fmt.Println("next grant", d.Granted, "remaining", d.TPM.Remaining)
	// Output:
	// prompt bound 70 granted 1000 cap 930 rewrite true
	// refunded 958 <nil>
	// next grant 958 remaining 0
}
