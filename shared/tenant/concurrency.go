package tenant

// Acquire takes one of the tenant's concurrent-request slots on this
// replica; false when all MaxConcurrent are taken (negative: no cap). Every
// true must be matched by one Release.
func (t *Tenant) Acquire() bool {
	if t.MaxConcurrent <= 0 {
		return true
	}
	for {
		n := t.inflight.Load()
		if n >= int64(t.MaxConcurrent) {
			return false
		}
		if t.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release returns a slot Acquire took.
func (t *Tenant) Release() {
	if t.MaxConcurrent > 0 {
		t.inflight.Add(-1)
	}
}

// InFlight is the number of the tenant's requests holding a slot now.
func (t *Tenant) InFlight() int64 { return t.inflight.Load() }
