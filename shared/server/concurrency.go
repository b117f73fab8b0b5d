package server

import (
	"net/http"

	"github.com/llmgw/gateway/shared/tenant"
)

// DefaultMaxConcurrentRequests is a tenant's cap on proxied requests in
// flight on one replica when config names none: a third of the 1,500
// streams a replica is sized for, so real traffic of one tenant (a
// replica's share of it: replicas scale out) is not refused, while a
// runaway client of one tenant leaves two thirds of the replica to its
// neighbours. A deployment with one tenant, or fewer neighbours to
// protect, sets its own (issue 22).
const DefaultMaxConcurrentRequests = 512

// admit takes one of the tenant's concurrent-request slots on this
// replica, or answers 429 too_many_concurrent_requests (Retry-After: 1 s;
// the slot a finishing stream frees cannot be foretold). The cap is per
// replica: an exact count across replicas would cost a store round trip
// per request and a lease per stream. On true the caller must release.
func (s *Server) admit(w http.ResponseWriter, rec *record, t *tenant.Tenant) bool {
	if t.Acquire() {
		return true
	}
	s.fail(w, rec, tooManyConcurrent(t.ID, t.MaxConcurrent))
	return false
}
