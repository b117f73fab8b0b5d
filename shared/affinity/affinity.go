// Package affinity remembers where each stored Responses API response lives
// and whose it is: a stored response exists only on the endpoint that
// created it, and one backend key serves many tenants, so the gateway must
// send follow-ups (previous_response_id, /v1/responses/{id}) to that
// endpoint and refuse them to every other tenant.
//
// Records live in the limiter's store: memory for one process, Redis for
// replicas (redisaffinity), with a TTL matching the backend's retention.
package affinity

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Owner is where a response lives and who may use it.
type Owner struct {
	Tenant   string
	Model    string // the public model it was created with
	Pool     string
	Endpoint string // the endpoint's name (its URL)
	// Tokens is the response's total usage (input + output) once known, 0
	// before: a follow-up's stored context is at most this, so strict
	// budgets reserve it.
	Tokens int64
	// Background is the id of the request that created a background
	// response and whose budget reservation waits for its usage ("" for
	// none): when the response is later retrieved complete, its real
	// usage settles that reservation.
	Background string
}

// ErrCorrupt is a record that does not decode.
var ErrCorrupt = errors.New("affinity: corrupt record")

// ErrTaken is a Put of an id already recorded for another tenant: every
// store compares and sets, so a record never changes tenant (a
// backend that answers tenant B with tenant A's id, or a vLLM pool that
// stores a response under a client-chosen request_id, once let B take A's
// id over). The server relays such an answer marked unrecorded and logs
// it; the id stays A's.
var ErrTaken = errors.New("affinity: id is recorded for another tenant")

// sep separates an Owner's fields in its encoded form; none of them can
// hold it (config validation: names and URLs are printable).
const sep = "\x1f"

// Encode is an Owner's stored form.
func (o Owner) Encode() string {
	e := o.Tenant + sep + o.Model + sep + o.Pool + sep + o.Endpoint
	if o.Tokens > 0 || o.Background != "" {
		e += sep + strconv.FormatInt(o.Tokens, 10)
	}
	if o.Background != "" {
		e += sep + o.Background
	}
	return e
}

// Decode reads Encode's form (a record written before Tokens has four
// fields, one without Background five).
func Decode(s string) (Owner, error) {
	f := strings.Split(s, sep)
	if len(f) < 4 || len(f) > 6 {
		return Owner{}, ErrCorrupt
	}
	o := Owner{Tenant: f[0], Model: f[1], Pool: f[2], Endpoint: f[3]}
	if len(f) == 6 {
		o.Background = f[5]
	}
	if len(f) >= 5 {
		n, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || n < 0 {
			return Owner{}, ErrCorrupt
		}
		o.Tokens = n
	}
	return o, nil
}

// DefaultPerTenant is how many records a tenant keeps when NewMemory's
// perTenant is zero: the responses it created most recently.
const DefaultPerTenant = 10_000

// Store keeps the records: Memory in this process, or a store every
// replica shares (the gateway's stores.Open hands out the Redis one,
// shared/stores/redisaffinity). Put refuses an id another tenant owns
// with an error wrapping ErrTaken.
type Store interface {
	Put(ctx context.Context, id string, o Owner, ttl time.Duration) error
	Get(ctx context.Context, id string) (Owner, bool, error)
	Delete(ctx context.Context, id string) error
}

var _ Store = (*Memory)(nil)

// Memory is the store for one process: exact, gone with the process.
// Capacity is per tenant: a tenant past it loses its own oldest records,
// never another tenant's (one tenant's flood once evicted other
// tenants' ids). A record that is gone fails closed: nobody may use it.
type Memory struct {
	mu        sync.Mutex
	m         map[string]entry
	perTenant int
	order     map[string]*queue // per tenant: its ids, oldest first
	now       func() time.Time
}

type entry struct {
	owner Owner
	until time.Time
}

// queue is a tenant's ids in the order they were first recorded.
type queue struct {
	ids  []string
	head int
}

func (q *queue) len() int { return len(q.ids) - q.head }

func (q *queue) pop() string {
	id := q.ids[q.head]
	q.ids[q.head] = ""
	q.head++
	if q.head > len(q.ids)/2 && q.head > 64 { // reclaim the popped half
		q.ids = append(q.ids[:0], q.ids[q.head:]...)
		q.head = 0
	}
	return id
}

// NewMemory keeps at most perTenant records per tenant (default
// DefaultPerTenant), dropping a tenant's oldest when it records one more.
// now may be nil.
func NewMemory(perTenant int, now func() time.Time) *Memory {
	if perTenant <= 0 {
		perTenant = DefaultPerTenant
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{m: map[string]entry{}, perTenant: perTenant, order: map[string]*queue{}, now: now}
}

// Put records id's owner for ttl. Recording an id again (its usage, once
// known) keeps its place; an id never changes tenant.
func (m *Memory) Put(_ context.Context, id string, o Owner, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e, ok := m.m[id]; ok && e.owner.Tenant == o.Tenant {
		m.m[id] = entry{owner: o, until: now.Add(ttl)}
		return nil
	} else if ok {
		return fmt.Errorf("affinity: put %q: %w", id, ErrTaken)
	}
	q := m.order[o.Tenant]
	if q == nil {
		q = &queue{}
		m.order[o.Tenant] = q
	}
	for q.len() >= m.perTenant {
		old := q.pop()
		if e, ok := m.m[old]; ok && e.owner.Tenant == o.Tenant {
			delete(m.m, old)
		}
	}
	q.ids = append(q.ids, id)
	m.m[id] = entry{owner: o, until: now.Add(ttl)}
	return nil
}

// Get returns id's owner; ok is false for an unknown or expired id.
func (m *Memory) Get(_ context.Context, id string) (Owner, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[id]
	if !ok || !e.until.After(m.now()) {
		delete(m.m, id) // its queue slot goes when the tenant's turn comes
		return Owner{}, false, nil
	}
	return e.owner, true, nil
}

// Delete forgets id.
func (m *Memory) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
	return nil
}
