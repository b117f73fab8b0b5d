package affinity

import (
	"context"
	"strconv"
	"testing"
	"time"
)

func TestMemory(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewMemory(10, func() time.Time { return now })
	ctx := context.Background()
	o := Owner{Tenant: "t", Model: "m", Pool: "p", Endpoint: "http://e"}
	if err := m.Put(ctx, "a", o, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := m.Get(ctx, "a"); !ok || got != o {
		t.Fatalf("get: %v %v", got, ok)
	}
	now = now.Add(2 * time.Minute)
	if _, ok, _ := m.Get(ctx, "a"); ok {
		t.Fatal("an expired record was found")
	}
	// Full: the tenant's oldest are dropped, the newest kept.
	for i := 0; i < 25; i++ {
		_ = m.Put(ctx, strconv.Itoa(i), o, time.Hour)
		if len(m.m) > 10 {
			t.Fatalf("%d records, max 10", len(m.m))
		}
	}
	if _, ok, _ := m.Get(ctx, "24"); !ok {
		t.Fatal("the newest record was dropped")
	}
	_ = m.Delete(ctx, "24")
	if _, ok, _ := m.Get(ctx, "24"); ok {
		t.Fatal("a deleted record was found")
	}
}

func TestEncode(t *testing.T) {
	for _, o := range []Owner{
		{Tenant: "t", Model: "m", Pool: "p", Endpoint: "http://e:1"},
		{Tenant: "t", Model: "m", Pool: "p", Endpoint: "http://e:1", Tokens: 7},
		{Tenant: "t", Model: "m", Pool: "p", Endpoint: "http://e:1", Background: "req-1"},
		{Tenant: "t", Model: "m", Pool: "p", Endpoint: "http://e:1", Tokens: 7, Background: "req-1"},
	} {
		if got, err := Decode(o.Encode()); err != nil || got != o {
			t.Fatalf("%+v: %+v %v", o, got, err)
		}
	}
	if _, err := Decode("a\x1fb"); err == nil {
		t.Fatal("a short record decoded")
	}
}
