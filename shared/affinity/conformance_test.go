package affinity_test

import (
	"testing"

	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/affinity/affinitytest"
)

// TestConformance holds the memory store to the stores' one semantics
// (affinitytest), as redisaffinity's TestConformance holds Redis.
func TestConformance(t *testing.T) {
	t.Parallel()
	affinitytest.Run(t, func(_ *testing.T, perTenant int) affinity.Store {
		return affinity.NewMemory(perTenant, nil)
	})
}
