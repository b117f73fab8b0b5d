package budget

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestMemoryForgetsIdleLevels: per-user accounts cost nothing once idle.
// 500 users reserve and settle; a month and two leases later one more
// user's reservation finds the idle accounts forgotten, the live one kept.
func TestMemoryForgetsIdleLevels(t *testing.T) {
	now := time.Date(2026, time.March, 10, 12, 0, 0, 0, time.UTC)
	m := NewMemory(func() time.Time { return now })
	ctx := context.Background()
	user := Limits{SpendPerMonth: 1000}
	reserve := func(u, id string) {
		t.Helper()
		lv := []Level{{Name: "user:" + u, Limits: user}}
		if _, err := m.Reserve(ctx, "t", id, Request{Min: 0, MoneyMin: 1, MoneyWant: 5, Lease: time.Minute, Levels: lv}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Settle(ctx, "t", id, Charge{Money: 5, Levels: lv}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 500 {
		reserve(fmt.Sprint(i), fmt.Sprint("r", i))
	}
	tn := m.tenant("t")
	if n := len(tn.levels); n != 500 {
		t.Fatalf("%d accounts, want 500", n)
	}
	now = time.Date(2026, time.April, 1, 0, 5, 0, 0, time.UTC)
	reserve("new", "r-new")
	if n := len(tn.levels); n != 1 {
		t.Fatalf("%d accounts after a month idle, want 1 (the new user's)", n)
	}
}
