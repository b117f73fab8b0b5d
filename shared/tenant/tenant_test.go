package tenant

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestTable(t *testing.T) {
	tbl := NewTable([]Row{
		{ID: "contoso", Name: "Contoso Ltd", Models: []string{"gpt-4o", "llama-3-8b"}},
		{ID: "fabrikam", Models: []string{"gpt-4o-mini"}},
	})
	tests := []struct {
		name, tenant, model string
		found, allowed      bool
	}{
		{"allowed", "contoso", "gpt-4o", true, true},
		{"other tenant's model", "contoso", "gpt-4o-mini", true, false},
		{"unknown model", "fabrikam", "nope", true, false},
		{"unknown tenant", "northwind", "gpt-4o", false, false},
		{"empty tenant", "", "gpt-4o", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := tbl.Lookup(tt.tenant)
			if (tn != nil) != tt.found {
				t.Fatalf("Lookup(%q) found=%v, want %v", tt.tenant, tn != nil, tt.found)
			}
			if tn != nil && tn.Allows(tt.model) != tt.allowed {
				t.Fatalf("Allows(%q)=%v, want %v", tt.model, !tt.allowed, tt.allowed)
			}
		})
	}
	if got := tbl.Lookup("contoso").Name; got != "Contoso Ltd" {
		t.Fatalf("Name = %q", got)
	}
	if got := tbl.Lookup("contoso").Models; len(got) != 2 || got[0] != "gpt-4o" {
		t.Fatalf("Models not sorted copy: %v", got)
	}
}

// TestAcquireConcurrent: many goroutines taking and releasing slots never
// hold more than MaxConcurrent at once, and all are back at the end.
func TestAcquireConcurrent(t *testing.T) {
	tn := NewTable([]Row{{ID: "a", MaxConcurrent: 5}, {ID: "b", MaxConcurrent: -1}, {ID: "c"}})
	a, b := tn.Lookup("a"), tn.Lookup("b")
	var wg sync.WaitGroup
	var granted, over atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if a.Acquire() {
					granted.Add(1)
					if a.InFlight() > 5 {
						over.Add(1)
					}
					a.Release()
				}
			}
		}()
	}
	wg.Wait()
	if over.Load() > 0 || granted.Load() == 0 || a.InFlight() != 0 {
		t.Fatalf("granted %d, over the cap %d, in flight at the end %d", granted.Load(), over.Load(), a.InFlight())
	}
	for range 1000 {
		if !b.Acquire() {
			t.Fatal("a tenant without a cap was refused")
		}
	}
	// A row that names no cap has the default.
	c := tn.Lookup("c")
	for i := range DefaultMaxConcurrent + 1 {
		if ok := c.Acquire(); ok != (i < DefaultMaxConcurrent) {
			t.Fatalf("acquire %d of a row without a cap: %v (default %d)", i+1, ok, DefaultMaxConcurrent)
		}
	}
}
