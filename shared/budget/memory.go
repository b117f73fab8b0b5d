package budget

import (
	"context"
	"math"
	"sync"
	"time"
)

var _ Store = (*Memory)(nil)

// Memory is a Store in this process: exact for one replica only (every
// replica gets its own budget, and a scale-in forgets it). It never fails
// and never blocks beyond one tenant's mutex. Its clock is injectable so
// that tests cross windows and leases without sleeping.
//
// It runs the same algorithm as the Redis store's scripts, step for step;
// the shared conformance tests (package budgettest) hold both to it.
type Memory struct {
	now func() time.Time

	mu      sync.RWMutex
	tenants map[string]*memTenant
}

// NewMemory returns an empty memory store reading time from now (time.Now
// when nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, tenants: make(map[string]*memTenant)}
}

// memTenant is one tenant's counters and reservations, under its own mutex.
type memTenant struct {
	mu sync.Mutex

	tw, tu int64  // per-minute window index (-1: none yet) and tokens used
	qp     Period // the quota's period (PeriodNone: no quota window yet)
	qw, qu int64  // quota window index and tokens used
	// Money (micro-units): tm is spent in the minute window tw; dw, dm
	// and mw, mm the day and month windows (-1: none yet) and their spend.
	tm             int64
	dw, dm, mw, mm int64

	recs       map[string]*memRec
	head, tail *memRec // every record in deadline order (the sweep queue)
	free       *memRec // recycled records, so steady state does not allocate
}

// memRec is one reservation (live) or the record of its expiry (expired).
type memRec struct {
	id      string
	expired bool
	granted int64
	tw      int64  // per-minute window charged (-1: none)
	qp      Period // quota period charged
	qw      int64  // quota window charged (-1: none)
	lease   time.Duration
	// mg is the money granted; mtw, mdw, mmw the minute, day and month
	// windows it was charged to (-1: none).
	mg, mtw, mdw, mmw int64
	deadline          int64 // Unix ns: lease end (live) or end of the expiry record
	prev              *memRec
	next              *memRec
}

func (m *Memory) tenant(name string) *memTenant {
	m.mu.RLock()
	t := m.tenants[name]
	m.mu.RUnlock()
	if t != nil {
		return t
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t = m.tenants[name]; t == nil {
		t = &memTenant{tw: -1, qw: -1, dw: -1, mw: -1, recs: make(map[string]*memRec)}
		m.tenants[name] = t
	}
	return t
}

// Reserve implements Store.
func (m *Memory) Reserve(_ context.Context, tenant, id string, r Request) (Decision, error) {
	if err := r.Validate(); err != nil {
		return Decision{}, err
	}
	now := m.now()
	t := m.tenant(tenant)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.roll(now, r.Limits.QuotaPeriod, r.Limits.TokenQuota > 0, r.Limits.Spends())
	t.sweep(now.UnixNano())

	d := Decision{Requested: r.Min, MoneyRequested: r.MoneyMin}
	if rec := t.recs[id]; rec != nil {
		// An idempotent retry: the reservation stands as it is. An id whose
		// lease has expired is not reserved again.
		d.Held, d.Allowed, d.Granted, d.MoneyGranted = true, !rec.expired, rec.granted, rec.mg
		if rec.expired {
			d.Granted, d.MoneyGranted = 0, 0
		}
		t.report(&d, r.Limits)
		return d, nil
	}

	lim := r.Limits
	tleft, qleft := left(lim.TokensPerMinute, t.tu), left(lim.TokenQuota, t.qu)
	mleft, dleft, Mleft := left(lim.SpendPerMinute, t.tm), left(lim.SpendPerDay, t.dm), left(lim.SpendPerMonth, t.mm)
	switch {
	case qleft < r.Min:
		d.RefusedBy = LimitQuota
	case Mleft < r.MoneyMin:
		d.RefusedBy = LimitSpendMonth
	case dleft < r.MoneyMin:
		d.RefusedBy = LimitSpendDay
	case mleft < r.MoneyMin:
		d.RefusedBy = LimitSpendMinute
	case tleft < r.Min:
		d.RefusedBy = LimitTPM
	}
	if d.RefusedBy != LimitNone {
		t.report(&d, lim)
		return d, nil
	}
	g := min(r.Want, tleft, qleft)
	mg := int64(0)
	if lim.Spends() {
		mg = min(r.MoneyWant, mleft, dleft, Mleft)
	}
	rec := t.alloc()
	*rec = memRec{id: id, granted: g, tw: -1, qw: -1, mg: mg, mtw: -1, mdw: -1, mmw: -1, lease: r.Lease,
		deadline: now.UnixNano() + int64(r.Lease)}
	if lim.TokensPerMinute > 0 {
		t.tu += g
		rec.tw = t.tw
	}
	if lim.TokenQuota > 0 {
		t.qu += g
		rec.qp, rec.qw = t.qp, t.qw
	}
	if lim.SpendPerMinute > 0 {
		t.tm += mg
		rec.mtw = t.tw
	}
	if lim.SpendPerDay > 0 {
		t.dm += mg
		rec.mdw = t.dw
	}
	if lim.SpendPerMonth > 0 {
		t.mm += mg
		rec.mmw = t.mw
	}
	t.recs[id] = rec
	t.push(rec)
	d.Allowed, d.Granted, d.MoneyGranted = true, g, mg
	t.report(&d, lim)
	return d, nil
}

// left is what a limit has left after used; no limit (0) leaves all.
func left(limit, used int64) int64 {
	if limit <= 0 {
		return math.MaxInt64
	}
	return limit - used
}

// Settle implements Store.
func (m *Memory) Settle(_ context.Context, tenant, id string, actual Charge) (Settlement, error) {
	now := m.now()
	t := m.tenant(tenant)
	t.mu.Lock()
	defer t.mu.Unlock()
	fresh := t.tw < 0 // no counter yet: the store never saw the tenant
	t.roll(now, PeriodNone, false, false)
	t.sweep(now.UnixNano())
	rec := t.recs[id]
	if rec == nil {
		return Settlement{NoCounter: fresh}, nil
	}
	s := t.settle(rec, actual)
	delete(t.recs, id)
	t.unlink(rec)
	t.release(rec)
	return s, nil
}

// settle applies actual against rec; the caller removes rec.
func (t *memTenant) settle(rec *memRec, actual Charge) Settlement {
	if actual.Tokens < 0 { // KeepReserved
		actual.Tokens = rec.granted
	}
	if actual.Money < 0 {
		actual.Money = rec.mg
	}
	s := NewSettlement(rec.expired, rec.granted, actual.Tokens)
	s.MoneyReserved, s.MoneyActual = rec.mg, actual.Money
	t.apply(rec, s.Overrun-s.Refunded)
	if delta := actual.Money - rec.mg; delta != 0 {
		applyTo(&t.tm, rec.mtw, t.tw, delta)
		applyTo(&t.dm, rec.mdw, t.dw, delta)
		applyTo(&t.mm, rec.mmw, t.mw, delta)
	}
	return s
}

// applyTo adds delta to a counter whose current window is cur, for a
// record charged to window w (-1: not charged): into it while it is the
// current one; else a refund is dropped and a charge goes to the current
// window.
func applyTo(used *int64, w, cur, delta int64) {
	switch {
	case w < 0:
	case w == cur:
		*used = max(0, *used+delta)
	case delta > 0:
		*used += delta
	}
}

// roll moves the windows to the ones holding now. A window never moves
// back: a clock stepped backwards stays in the latest window. When the
// reservation sets a quota of another period, the quota window restarts.
// The spend windows (day, month) are kept once a spend limit has used
// them (spend: this reservation has one).
func (t *memTenant) roll(now time.Time, p Period, quota, spend bool) {
	if w := max(windowOf(now, PeriodNone), t.tw); w != t.tw {
		t.tw, t.tu, t.tm = w, 0, 0
	}
	if spend || t.dw >= 0 {
		if w := max(windowOf(now, PeriodDay), t.dw); w != t.dw {
			t.dw, t.dm = w, 0
		}
		if w := max(windowOf(now, PeriodMonth), t.mw); w != t.mw {
			t.mw, t.mm = w, 0
		}
	}
	if quota && p != t.qp {
		t.qp, t.qw, t.qu = p, windowOf(now, p), 0
	}
	if t.qp != PeriodNone {
		if w := max(windowOf(now, t.qp), t.qw); w != t.qw {
			t.qw, t.qu = w, 0
		}
	}
}

// apply adds delta (a refund when negative) for rec's windows: into the
// window it was charged to while that is the current one; else a refund is
// dropped (the window has ended) and a charge goes to the current window.
func (t *memTenant) apply(rec *memRec, delta int64) {
	if delta == 0 {
		return
	}
	applyTo(&t.tu, rec.tw, t.tw, delta)
	if rec.qw >= 0 && t.qp != PeriodNone {
		if rec.qp == t.qp && rec.qw == t.qw {
			t.qu = max(0, t.qu+delta)
		} else if delta > 0 {
			t.qu += delta
		}
	}
}

// sweep expires every record whose deadline has passed: a live reservation
// keeps its tokens charged (a request never settled may have used all of
// them: issue 30) and becomes an expiry record until one more lease has
// passed since its lease ended; an expiry record is deleted.
func (t *memTenant) sweep(now int64) {
	for rec := t.head; rec != nil && rec.deadline <= now; rec = t.head {
		t.unlink(rec)
		if rec.expired {
			delete(t.recs, rec.id)
			t.release(rec)
			continue
		}
		rec.expired = true
		rec.deadline += int64(rec.lease) // one more lease from the lease end
		t.push(rec)
	}
}

// report fills d's windows from the tenant's counters.
func (t *memTenant) report(d *Decision, lim Limits) {
	d.TPM = NewWindow(lim.TokensPerMinute, t.tu, windowEnd(t.tw, PeriodNone))
	if lim.TokenQuota > 0 {
		d.Quota = NewWindow(lim.TokenQuota, t.qu, windowEnd(t.qw, t.qp))
	}
	if lim.Spends() {
		d.Spend[0] = NewWindow(lim.SpendPerMinute, t.tm, windowEnd(t.tw, PeriodNone))
		d.Spend[1] = NewWindow(lim.SpendPerDay, t.dm, windowEnd(t.dw, PeriodDay))
		d.Spend[2] = NewWindow(lim.SpendPerMonth, t.mm, windowEnd(t.mw, PeriodMonth))
	}
}

// The sweep queue is in deadline order but for expiry records: every live
// push has deadline now + lease, one lease per deployment. An expiry
// record (deadline: its lease end + lease) may queue behind later live
// records, as may records under a clock stepped back or mixed leases: such
// a record expires late, never early.
func (t *memTenant) push(rec *memRec) {
	rec.prev, rec.next = t.tail, nil
	if t.tail != nil {
		t.tail.next = rec
	} else {
		t.head = rec
	}
	t.tail = rec
}

func (t *memTenant) unlink(rec *memRec) {
	if rec.prev != nil {
		rec.prev.next = rec.next
	} else {
		t.head = rec.next
	}
	if rec.next != nil {
		rec.next.prev = rec.prev
	} else {
		t.tail = rec.prev
	}
	rec.prev, rec.next = nil, nil
}

func (t *memTenant) alloc() *memRec {
	if rec := t.free; rec != nil {
		t.free = rec.next
		return rec
	}
	return new(memRec)
}

func (t *memTenant) release(rec *memRec) {
	*rec = memRec{next: t.free}
	t.free = rec
}
