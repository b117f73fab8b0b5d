package budget_test

import (
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/budget"
	"github.com/llmgw/gateway/shared/budget/budgettest"
)

func TestMemoryConformance(t *testing.T) {
	t.Parallel()
	budgettest.Run(t, func(_ *testing.T, now func() time.Time) budget.Store {
		return budget.NewMemory(now)
	})
}
