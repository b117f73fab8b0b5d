// Package tenant owns the in-process tenant table: which models each tenant
// may call, and how many requests it may have in flight on this replica.
// It is built once from config at start and never changes, so lookups need
// no locks; the in-flight counts are atomic.
package tenant

import (
	"sort"
	"sync/atomic"

	"github.com/llmgw/gateway/shared/price"
)

// Tenant is one tenant's row.
type Tenant struct {
	ID string
	// Name is a readable name for logs; may be empty.
	Name string
	// Models is the sorted allow-list of public model names.
	Models []string
	// MaxConcurrent caps the tenant's requests in flight on this replica
	// (Acquire); negative = no cap (NewTable makes a row's 0
	// DefaultMaxConcurrent).
	MaxConcurrent int
	// Tiers are the service tiers the tenant may ask for;
	// NewTable makes the empty set the standard tier alone.
	Tiers price.Tiers
	// RefuseUnknown refuses a body member no field table names
	// (config unknown_fields: refuse), where the pool would drop it.
	RefuseUnknown bool
	allow         map[string]struct{}
	inflight      atomic.Int64
	grants        map[string]Grant
	betas         map[string]struct{}
}

// Grant allows a tenant a server-side feature (request.Feature, by name)
// and prices it.
type Grant struct {
	// CostPerUse is the token-equivalent of one use (0: free).
	CostPerUse int64
	// DefaultUses is the uses reserved when a request bounds none;
	// NewTable makes 0 DefaultUses.
	DefaultUses int64
}

// DefaultUses is the uses of a feature reserved for a request that bounds
// none: Anthropic's web search without max_uses, say. A request that
// uses more is charged what the backend reports, where it reports it.
const DefaultUses = 10

// Grant returns the tenant's grant of the feature named name; ok is false
// when the tenant may not use it.
func (t *Tenant) Grant(name string) (g Grant, ok bool) {
	g, ok = t.grants[name]
	return g, ok
}

// AllowsBeta reports whether the tenant's config allows the anthropic-beta
// value v beyond the defaults.
func (t *Tenant) AllowsBeta(v string) bool {
	_, ok := t.betas[v]
	return ok
}

// Allows reports whether the tenant may call model.
func (t *Tenant) Allows(model string) bool {
	_, ok := t.allow[model]
	return ok
}

// Table maps tenant ids to tenants.
type Table struct {
	byID map[string]*Tenant
}

// DefaultMaxConcurrent is a tenant's cap on proxied requests in flight
// on one replica when its row names none: a third of the 1,500 streams a
// replica is sized for, so real traffic of one tenant (a replica's share
// of it: replicas scale out) is not refused, while a runaway client of
// one tenant leaves two thirds of the replica to its neighbours. A
// deployment with one tenant, or fewer neighbours to protect, sets its
// own.
const DefaultMaxConcurrent = 512

// Row is the input to NewTable.
type Row struct {
	ID     string
	Name   string
	Models []string
	// MaxConcurrent caps the tenant's requests in flight on one replica.
	// Default DefaultMaxConcurrent; negative = no cap.
	MaxConcurrent int
	// Grants are the server-side features the tenant may use, by name.
	Grants map[string]Grant
	// Betas are the anthropic-beta values allowed beyond the defaults.
	Betas []string
	// RefuseUnknown refuses a body member no field table names, where
	// the pool would drop it.
	RefuseUnknown bool
	// Tiers are the service tiers the tenant may ask for (default: the
	// standard tier alone).
	Tiers price.Tiers
}

// NewTable builds the table. Validation (duplicates, unknown models) is the
// config package's job; NewTable trusts its input.
func NewTable(rows []Row) *Table {
	t := &Table{byID: make(map[string]*Tenant, len(rows))}
	for _, r := range rows {
		models := append([]string(nil), r.Models...)
		sort.Strings(models)
		allow := make(map[string]struct{}, len(models))
		for _, m := range models {
			allow[m] = struct{}{}
		}
		grants := make(map[string]Grant, len(r.Grants))
		for name, g := range r.Grants {
			if g.DefaultUses <= 0 {
				g.DefaultUses = DefaultUses
			}
			grants[name] = g
		}
		betas := make(map[string]struct{}, len(r.Betas))
		for _, b := range r.Betas {
			betas[b] = struct{}{}
		}
		if r.MaxConcurrent == 0 {
			r.MaxConcurrent = DefaultMaxConcurrent
		}
		t.byID[r.ID] = &Tenant{ID: r.ID, Name: r.Name, Models: models, MaxConcurrent: r.MaxConcurrent,
			Tiers: r.Tiers.OrStandard(), RefuseUnknown: r.RefuseUnknown, allow: allow, grants: grants, betas: betas}
	}
	return t
}

// Lookup returns the tenant with id, or nil.
func (t *Table) Lookup(id string) *Tenant {
	return t.byID[id]
}
