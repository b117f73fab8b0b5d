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
	// created is when the counter was made (Unix ns): a record missing
	// from a counter made after its reservation was lost with the
	// store's data (Settlement.Lost).
	created int64

	// levels are the accounts below the tenant (Request.Levels), under
	// the tenant's mutex; levelsSwept the size at which idle ones are
	// forgotten at the latest.
	levels        map[string]*memTenant
	levelsSwept   int
	levelsSweptAt int64 // the minute of the last sweep

	recs       map[string]*memRec
	head, tail *memRec // every record in deadline order (the sweep queue)
	free       *memRec // recycled records, so steady state does not allocate
}

// memRec is one reservation (live) or the record of its expiry (expired).
type memRec struct {
	id      string
	expired bool
	tomb    bool // a tombstone (expired too): id was released unreserved
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

// Reserve implements Store. The tenant and its levels are reserved under
// the tenant's one mutex: one atomic step across every level.
func (m *Memory) Reserve(_ context.Context, tenant, id string, r Request) (Decision, error) {
	if err := r.Validate(); err != nil {
		return Decision{}, err
	}
	now := m.now()
	t := m.tenant(tenant)
	t.mu.Lock()
	defer t.mu.Unlock()
	spends := r.spends()
	t.open(now, r.Limits, spends)
	var levels [4]*memTenant // the levels' accounts: no allocation for up to 4
	accts := levels[:0]
	for _, l := range r.Levels {
		a := t.level(l.Name, now)
		a.open(now, l.Limits, spends)
		accts = append(accts, a)
	}

	d := Decision{Requested: r.Min, MoneyRequested: r.MoneyMin}
	if rec := t.recs[id]; rec != nil {
		// An idempotent retry: the reservation stands as it is. An id whose
		// lease has expired is not reserved again.
		d.Held, d.Allowed, d.Granted, d.MoneyGranted = true, !rec.expired, rec.granted, rec.mg
		if rec.expired {
			d.Granted, d.MoneyGranted = 0, 0
		}
		d.Released = rec.tomb
		t.reportAll(&d, r, accts)
		return d, nil
	}

	g, mg := r.Want, r.MoneyWant
	d.RefusedBy, g, mg = t.refusal(r.Limits, r.Min, r.MoneyMin, g, mg)
	for i, a := range accts {
		var by Limit
		by, g, mg = a.refusal(r.Levels[i].Limits, r.Min, r.MoneyMin, g, mg)
		if by.longer(d.RefusedBy) {
			d.RefusedBy, d.RefusedLevel = by, i+1
		}
	}
	if d.RefusedBy != LimitNone {
		t.reportAll(&d, r, accts)
		return d, nil
	}
	if !spends {
		mg = 0
	}
	t.charge(id, r.Limits, g, mg, r.Lease, now)
	for i, a := range accts {
		a.charge(id, r.Levels[i].Limits, g, mg, r.Lease, now)
	}
	d.Allowed, d.Granted, d.MoneyGranted, d.ReservedAt = true, g, mg, now
	t.reportAll(&d, r, accts)
	return d, nil
}

// open rolls an account's windows to now and sweeps its records.
func (t *memTenant) open(now time.Time, lim Limits, spends bool) {
	t.roll(now, lim.QuotaPeriod, lim.TokenQuota > 0, spends)
	t.sweep(now.UnixNano())
}

// refusal is the limit of lim refusing a reservation of at least mn tokens
// and mmin money (LimitNone: none), and g and mg lowered to what is left.
func (t *memTenant) refusal(lim Limits, mn, mmin, g, mg int64) (Limit, int64, int64) {
	tleft, qleft := left(lim.TokensPerMinute, t.tu), left(lim.TokenQuota, t.qu)
	mleft, dleft, Mleft := left(lim.SpendPerMinute, t.tm), left(lim.SpendPerDay, t.dm), left(lim.SpendPerMonth, t.mm)
	g, mg = min(g, tleft, qleft), min(mg, mleft, dleft, Mleft)
	switch {
	case qleft < mn:
		return LimitQuota, g, mg
	case Mleft < mmin:
		return LimitSpendMonth, g, mg
	case dleft < mmin:
		return LimitSpendDay, g, mg
	case mleft < mmin:
		return LimitSpendMinute, g, mg
	case tleft < mn:
		return LimitTPM, g, mg
	}
	return LimitNone, g, mg
}

// charge records a reservation of g tokens and mg money under id,
// charged to lim's windows.
func (t *memTenant) charge(id string, lim Limits, g, mg int64, lease time.Duration, now time.Time) {
	rec := t.alloc()
	*rec = memRec{id: id, granted: g, tw: -1, qw: -1, mg: mg, mtw: -1, mdw: -1, mmw: -1, lease: lease,
		deadline: now.UnixNano() + int64(lease)}
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
}

// reportAll fills d's windows: the tenant's, and each level's.
func (t *memTenant) reportAll(d *Decision, r Request, accts []*memTenant) {
	t.report(d, r.Limits)
	if len(accts) == 0 {
		return
	}
	d.Levels = make([]Windows, len(accts))
	for i, a := range accts {
		var ld Decision
		a.report(&ld, r.Levels[i].Limits)
		d.Levels[i] = ld.Tenant()
		d.Levels[i].Name = r.Levels[i].Name
	}
}

// level returns the account of level name (the caller holds t.mu). Idle
// levels are forgotten when a new one is made in a new minute, or once
// the map has doubled since the last sweep:
// an account without records whose windows have all ended holds nothing
// a roll would not reset, so per-user accounts cost nothing once idle.
func (t *memTenant) level(name string, now time.Time) *memTenant {
	if a := t.levels[name]; a != nil {
		return a
	}
	if t.levels == nil {
		t.levels = make(map[string]*memTenant)
	}
	if minute := windowOf(now, PeriodNone); len(t.levels) >= t.levelsSwept || minute != t.levelsSweptAt {
		t.levelsSweptAt = minute
		for n, a := range t.levels {
			if a.head == nil && a.idle(now) {
				delete(t.levels, n)
			}
		}
		t.levelsSwept = max(2*len(t.levels), 64)
	}
	a := &memTenant{tw: -1, qw: -1, dw: -1, mw: -1, recs: make(map[string]*memRec)}
	t.levels[name] = a
	return a
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
	for _, l := range actual.Levels {
		a := t.levels[l.Name]
		if a == nil {
			continue
		}
		a.roll(now, PeriodNone, false, false)
		a.sweep(now.UnixNano())
		if rec := a.recs[id]; rec != nil {
			a.settle(rec, actual)
			a.drop(rec)
		}
	}
	rec := t.recs[id]
	if rec == nil || rec.tomb {
		s := Settlement{NoCounter: fresh}
		if rec == nil {
			s.Lost = !fresh && lost(t.created, actual, now)
			t.tombstone(id, actual.Lease, now)
		}
		return s, nil
	}
	s := t.settle(rec, actual)
	t.drop(rec)
	return s, nil
}

// lost reports that the record of a reservation made at actual.ReservedAt
// is missing from a counter created at created (Unix ns) because the
// store lost it: the counter is younger than the reservation, and the
// record cannot have ended on its own (two leases).
func lost(created int64, actual Charge, now time.Time) bool {
	at := actual.ReservedAt
	return !at.IsZero() && actual.Lease > 0 && created > at.UnixNano() && now.Before(at.Add(2*actual.Lease))
}

// tombstone records that id was released unreserved, for lease (none
// when 0): a reservation of id reaching the store later reserves nothing.
func (t *memTenant) tombstone(id string, lease time.Duration, now time.Time) {
	if lease <= 0 {
		return
	}
	rec := t.alloc()
	*rec = memRec{id: id, expired: true, tomb: true, tw: -1, qw: -1, mtw: -1, mdw: -1, mmw: -1, lease: lease,
		deadline: now.UnixNano() + int64(lease)}
	t.recs[id] = rec
	t.push(rec)
}

// idle reports that an account holds nothing a roll to now would keep.
func (t *memTenant) idle(now time.Time) bool {
	if t.tu == 0 && t.qu == 0 && t.tm == 0 && t.dm == 0 && t.mm == 0 {
		return true
	}
	return t.tw < windowOf(now, PeriodNone) && t.dw < windowOf(now, PeriodDay) && t.mw < windowOf(now, PeriodMonth) &&
		(t.qp == PeriodNone || t.qw < windowOf(now, t.qp))
}

// drop forgets a settled record.
func (t *memTenant) drop(rec *memRec) {
	delete(t.recs, rec.id)
	t.unlink(rec)
	t.release(rec)
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
		if t.tw < 0 {
			t.created = now.UnixNano()
		}
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
// them) and becomes an expiry record until one more lease has
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
