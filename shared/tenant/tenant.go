// Package tenant owns the in-process tenant table: which models each tenant
// may call, and how many requests it may have in flight on this replica.
// It is built once from config at start and never changes, so lookups need
// no locks; the in-flight counts are atomic.
package tenant

import (
	"sort"
	"sync/atomic"
)

// Tenant is one tenant's row.
type Tenant struct {
	ID string
	// Name is a readable name for logs; may be empty.
	Name string
	// Models is the sorted allow-list of public model names.
	Models []string
	// MaxConcurrent caps the tenant's requests in flight on this replica
	// (Acquire); 0 = no cap.
	MaxConcurrent int
	allow         map[string]struct{}
	inflight      atomic.Int64
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

// Row is the input to NewTable.
type Row struct {
	ID            string
	Name          string
	Models        []string
	MaxConcurrent int
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
		t.byID[r.ID] = &Tenant{ID: r.ID, Name: r.Name, Models: models, MaxConcurrent: r.MaxConcurrent, allow: allow}
	}
	return t
}

// Lookup returns the tenant with id, or nil.
func (t *Table) Lookup(id string) *Tenant {
	return t.byID[id]
}
