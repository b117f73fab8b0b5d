package keys

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// Store holds the keys made at run time, shared by every replica
// (stores.Set.Keys: Redis, or this process's memory with the memory
// backend). Get returns ErrNotFound for an id it does not hold, and a
// record past its expiry as it is (the verifier answers ErrExpired);
// List leaves those out. Delete of an id it does not hold is no error.
type Store interface {
	Lookup
	Put(ctx context.Context, r Record) error
	Delete(ctx context.Context, id string) error
	List(ctx context.Context) ([]Record, error)
}

// Memory is a Store in this process: one replica's, or a test's.
type Memory struct {
	mu   sync.Mutex
	recs map[string]Record
	now  func() time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory is an empty Memory store; a nil now is time.Now (List
// leaves out a record past its expiry).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{recs: map[string]Record{}, now: now}
}

// Get returns id's record.
func (m *Memory) Get(_ context.Context, id string) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[id]
	if !ok {
		return Record{}, ErrNotFound
	}
	return r, nil
}

// Put stores r under its id.
func (m *Memory) Put(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[r.ID] = r
	return nil
}

// Delete removes id.
func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, id)
	return nil
}

// List returns the live records by id.
func (m *Memory) List(context.Context) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.recs))
	for _, r := range m.recs {
		if m.now().Before(r.Expires) {
			out = append(out, r)
		}
	}
	SortByID(out)
	return out, nil
}

// IDs lists the ids of the keys held (IDLister).
func (m *Memory) IDs(context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.recs))
	for id := range m.recs {
		out = append(out, id)
	}
	return out, nil
}

// SortByID sorts records by public id, the order List returns.
func SortByID(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
}
