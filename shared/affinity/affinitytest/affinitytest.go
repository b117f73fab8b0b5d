// Package affinitytest holds the conformance tests every affinity store
// must pass, so that the memory store and the Redis store are held to one
// semantics: a record round-trips, its owner may update it, nobody else
// may ever take it over (compare and set), a tenant past its capacity
// loses only its own oldest records, and a record
// lives for its TTL and no longer.
package affinitytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/affinity"
)

// NewStore returns a fresh, empty store keeping perTenant records per
// tenant.
type NewStore func(t *testing.T, perTenant int) affinity.Store

const ttl = time.Hour

func owner(tenant string) affinity.Owner {
	return affinity.Owner{Tenant: tenant, Model: "m", Pool: "p", Endpoint: "http://e-" + tenant}
}

// Run runs every conformance test on stores from newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		run  func(t *testing.T, newStore NewStore)
	}{
		{"RoundTrip", roundTrip},
		{"OwnerUpdates", ownerUpdates},
		{"NoTakeover", noTakeover},
		{"TrimKeepsOthers", trimKeepsOthers},
		{"RacingTenants", racingTenants},
		{"Expiry", expiry},
		{"DeleteUnknown", deleteUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore)
		})
	}
}

func put(t *testing.T, s affinity.Store, id string, o affinity.Owner) {
	t.Helper()
	if err := s.Put(context.Background(), id, o, ttl); err != nil {
		t.Fatalf("put %s for %s: %v", id, o.Tenant, err)
	}
}

func get(t *testing.T, s affinity.Store, id string) (affinity.Owner, bool) {
	t.Helper()
	o, ok, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return o, ok
}

// roundTrip: a record reads back as written; an unknown id and a deleted
// one are misses, not errors.
func roundTrip(t *testing.T, newStore NewStore) {
	s := newStore(t, 10)
	o := owner("a")
	o.Tokens = 7
	put(t, s, "resp_1", o)
	if got, ok := get(t, s, "resp_1"); !ok || got != o {
		t.Fatalf("get: %+v %v, want %+v", got, ok, o)
	}
	if _, ok := get(t, s, "resp_none"); ok {
		t.Fatal("an unknown id was found")
	}
	if err := s.Delete(context.Background(), "resp_1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, s, "resp_1"); ok {
		t.Fatal("a deleted id was found")
	}
}

// ownerUpdates: the owner records its id again (its usage, once known)
// and the record says so.
func ownerUpdates(t *testing.T, newStore NewStore) {
	s := newStore(t, 10)
	put(t, s, "resp_1", owner("a"))
	o := owner("a")
	o.Tokens = 42
	put(t, s, "resp_1", o)
	if got, _ := get(t, s, "resp_1"); got.Tokens != 42 {
		t.Fatalf("tokens after the owner's update: %d, want 42", got.Tokens)
	}
}

// noTakeover: tenant B's put of tenant A's id (a lying backend, or a
// client-chosen request_id) fails with ErrTaken and leaves A's record as
// it was; the same holds for a tenant whose name is a prefix of A's.
func noTakeover(t *testing.T, newStore NewStore) {
	s := newStore(t, 10)
	a := owner("tenant-a")
	put(t, s, "resp_a", a)
	for _, thief := range []string{"tenant-b", "tenant", "tenant-a2", ""} {
		err := s.Put(context.Background(), "resp_a", owner(thief), ttl)
		if !errors.Is(err, affinity.ErrTaken) {
			t.Errorf("tenant %q's put of tenant-a's id: %v, want ErrTaken", thief, err)
		}
	}
	if got, ok := get(t, s, "resp_a"); !ok || got != a {
		t.Fatalf("after the takeover attempts: %+v %v, want %+v", got, ok, a)
	}
}

// trimKeepsOthers: a tenant that tried to take another's id and then
// floods past its capacity loses its own oldest records only: the other
// tenant's id survives, and so do the flooder's newest.
func trimKeepsOthers(t *testing.T, newStore NewStore) {
	const per = 5
	s := newStore(t, per)
	put(t, s, "resp_a", owner("a"))
	_ = s.Put(context.Background(), "resp_a", owner("b"), ttl)
	for i := range 3 * per {
		put(t, s, fmt.Sprintf("resp_b%d", i), owner("b"))
	}
	if got, ok := get(t, s, "resp_a"); !ok || got.Tenant != "a" {
		t.Fatalf("tenant a's record after b's flood: %+v %v", got, ok)
	}
	if _, ok := get(t, s, fmt.Sprintf("resp_b%d", 3*per-1)); !ok {
		t.Fatal("the flooder's newest record was dropped")
	}
	if _, ok := get(t, s, "resp_b0"); ok {
		t.Fatal("the flooder's oldest record outlived its capacity")
	}
}

// racingTenants: many tenants put one id at once; exactly one wins, every
// other is told ErrTaken, and the record is the winner's.
func racingTenants(t *testing.T, newStore NewStore) {
	const n = 16
	s := newStore(t, 10)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Put(context.Background(), "resp_race", owner(fmt.Sprintf("t%d", i)), ttl)
		}()
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		switch {
		case err == nil && winner == "":
			winner = fmt.Sprintf("t%d", i)
		case err == nil:
			t.Fatalf("two tenants recorded one id: %s and t%d", winner, i)
		case !errors.Is(err, affinity.ErrTaken):
			t.Fatalf("t%d: %v", i, err)
		}
	}
	if got, ok := get(t, s, "resp_race"); !ok || got.Tenant != winner {
		t.Fatalf("record %+v %v, want the winner %q's", got, ok, winner)
	}
}

// expiry: a record is a miss once its TTL has passed, and only its own:
// one put with an hour's TTL beside it still reads back. The wait is
// polled (a store may expire lazily or on its server's clock), bounded
// generously for a busy machine.
func expiry(t *testing.T, newStore NewStore) {
	s := newStore(t, 10)
	put(t, s, "resp_long", owner("a"))
	if err := s.Put(context.Background(), "resp_short", owner("a"), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := get(t, s, "resp_short"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a record outlived its 20ms TTL by 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, ok := get(t, s, "resp_long"); !ok || got != owner("a") {
		t.Fatalf("the long-lived record beside it: %+v %v", got, ok)
	}
}

// deleteUnknown: deleting an id never recorded, or deleted already, is
// not an error (a client's delete of a foreign or stale id).
func deleteUnknown(t *testing.T, newStore NewStore) {
	s := newStore(t, 10)
	for range 2 {
		if err := s.Delete(context.Background(), "resp_none"); err != nil {
			t.Fatalf("delete of an unknown id: %v", err)
		}
	}
}
