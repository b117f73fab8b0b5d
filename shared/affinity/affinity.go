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
	// budgets reserve it (issue 20).
	Tokens int64
}

// ErrCorrupt is a record that does not decode.
var ErrCorrupt = errors.New("affinity: corrupt record")

// sep separates an Owner's fields in its encoded form; none of them can
// hold it (config validation: names and URLs are printable).
const sep = "\x1f"

// Encode is an Owner's stored form.
func (o Owner) Encode() string {
	e := o.Tenant + sep + o.Model + sep + o.Pool + sep + o.Endpoint
	if o.Tokens > 0 {
		e += sep + strconv.FormatInt(o.Tokens, 10)
	}
	return e
}

// Decode reads Encode's form (a record written before Tokens has four
// fields).
func Decode(s string) (Owner, error) {
	f := strings.Split(s, sep)
	if len(f) != 4 && len(f) != 5 {
		return Owner{}, ErrCorrupt
	}
	o := Owner{Tenant: f[0], Model: f[1], Pool: f[2], Endpoint: f[3]}
	if len(f) == 5 {
		n, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || n < 0 {
			return Owner{}, ErrCorrupt
		}
		o.Tokens = n
	}
	return o, nil
}

// Memory is the store for one process: exact, gone with the process.
type Memory struct {
	mu  sync.Mutex
	m   map[string]entry
	max int
	now func() time.Time
}

type entry struct {
	owner Owner
	until time.Time
}

// NewMemory keeps at most max records (default 100,000): when full it
// drops the expired ones, then arbitrary ones down to 90% of max. now may
// be nil.
func NewMemory(max int, now func() time.Time) *Memory {
	if max <= 0 {
		max = 100_000
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{m: map[string]entry{}, max: max, now: now}
}

// Put records id's owner for ttl.
func (m *Memory) Put(_ context.Context, id string, o Owner, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if len(m.m) >= m.max {
		// Full: drop the expired, then arbitrary records down to 90%, so
		// the scan is paid once per tenth of max puts, not on every put.
		for k, e := range m.m {
			if !e.until.After(now) {
				delete(m.m, k)
			}
		}
		for k := range m.m {
			if len(m.m) <= m.max*9/10 {
				break
			}
			delete(m.m, k)
		}
	}
	m.m[id] = entry{owner: o, until: now.Add(ttl)}
	return nil
}

// Get returns id's owner; ok is false for an unknown or expired id.
func (m *Memory) Get(_ context.Context, id string) (Owner, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[id]
	if !ok || !e.until.After(m.now()) {
		delete(m.m, id)
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
