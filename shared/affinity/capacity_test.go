package affinity_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/affinity"
	"github.com/llmgw/gateway/shared/stores/redisaffinity"
)

// TestCapacityPerTenant: a tenant that floods the store evicts
// only its own oldest records; every other tenant's ids stay, on both
// stores. Before, the memory store dropped arbitrary records at capacity
// (a 115,000-request flood evicted 62 of another tenant's 200 ids).
func TestCapacityPerTenant(t *testing.T) {
	t.Parallel()
	const per = 50
	stores := map[string]func(t *testing.T) affinity.Store{
		"memory": func(*testing.T) affinity.Store { return affinity.NewMemory(per, nil) },
		"redis": func(t *testing.T) affinity.Store {
			srv := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			s := redisaffinity.New(c, "test:", nil)
			s.PerTenant = per
			return s
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := mk(t)
			ctx := context.Background()
			victim := affinity.Owner{Tenant: "victim", Model: "m", Pool: "p", Endpoint: "e"}
			for i := range 40 {
				if err := s.Put(ctx, "victim-"+strconv.Itoa(i), victim, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			flood := affinity.Owner{Tenant: "flood", Model: "m", Pool: "p", Endpoint: "e"}
			for i := range 10 * per {
				if err := s.Put(ctx, "flood-"+strconv.Itoa(i), flood, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 40 {
				if o, ok, err := s.Get(ctx, "victim-"+strconv.Itoa(i)); err != nil || !ok || o.Tenant != "victim" {
					t.Fatalf("victim-%d: %v %v %v after another tenant's flood", i, o, ok, err)
				}
			}
			kept := 0
			for i := range 10 * per {
				if _, ok, _ := s.Get(ctx, "flood-"+strconv.Itoa(i)); ok {
					kept++
					if i < 9*per {
						t.Fatalf("flood-%d kept: the oldest must go first", i)
					}
				}
			}
			if kept != per {
				t.Fatalf("the flooding tenant kept %d records, want %d", kept, per)
			}
			// Recording usage later keeps the record's place and tenant.
			with := victim
			with.Tokens = 1234
			if err := s.Put(ctx, "victim-0", with, time.Hour); err != nil {
				t.Fatal(err)
			}
			if o, ok, _ := s.Get(ctx, "victim-0"); !ok || o.Tokens != 1234 {
				t.Fatalf("victim-0 after its usage: %+v %v", o, ok)
			}
		})
	}
}
