package route

import (
	"sync"
	"time"
)

// A priority's capacity, shared between tenants by what they ask for.
//
// An endpoint with a capacity (a PTU's tokens a minute) admits each
// tenant's requests only while what the tenant's requests asked of it
// this minute (prompt bound and output caps: what the backend counts
// against its admission) stays within its share of that capacity; past
// it, the tenant's requests spill to the next priority for the rest of
// the minute, and nobody else's do. So one tenant's inflated caps fill
// at most its share of the PTU, and the backend's real 429 (which cools
// the endpoint for everyone) is not theirs to cause. The count is per
// replica: each replica holds each tenant to its share of what the
// replica sends.

// DefaultTenantShare is the fraction of an endpoint's capacity one tenant
// may ask for in a minute when the pool sets none: half, so two tenants
// can never be pushed off by a third.
const DefaultTenantShare = 0.5

// shares counts, for one endpoint with a capacity, what each tenant asked
// of it in the current minute.
type shares struct {
	limit  int64 // one tenant's share of the capacity, in tokens a minute
	mu     sync.Mutex
	minute int64
	asked  map[string]int64
}

func newShares(capacity int64, share float64) *shares {
	if capacity <= 0 {
		return nil
	}
	if share <= 0 || share > 1 {
		share = DefaultTenantShare
	}
	return &shares{limit: max(int64(float64(capacity)*share), 1), asked: map[string]int64{}}
}

// admit counts asked tokens of tenant at now, or reports that they do
// not fit in the tenant's share of this minute (and counts nothing).
func (s *shares) admit(tenant string, asked int64, now time.Time) bool {
	m := now.Unix() / 60
	s.mu.Lock()
	defer s.mu.Unlock()
	if m != s.minute {
		s.minute = m
		clear(s.asked)
	}
	if s.asked[tenant]+asked > s.limit {
		return false
	}
	s.asked[tenant] += asked
	return true
}

// Admit reports whether tenant may send e a request that asks for asked
// tokens (its prompt bound and output caps) this minute, and counts it
// when so. An endpoint without a capacity admits everything.
func (r *Router) Admit(e *Endpoint, tenant string, asked int64) bool {
	if e.shares == nil {
		return true
	}
	return e.shares.admit(tenant, asked, r.o.Now())
}
