package budget_test

import (
	"testing"

	"github.com/llmgw/gateway/shared/budget"
)

func TestOutputWant(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                        string
		client, tenant, def, output int64
	}{
		{"nothing set: the default", 0, 0, 4096, 4096},
		{"client below default", 100, 0, 4096, 100},
		{"client above default", 10000, 0, 4096, 10000},
		{"tenant caps the client", 10000, 2000, 4096, 2000},
		{"tenant caps the default", 0, 1000, 4096, 1000},
		{"tenant above the default", 0, 8000, 4096, 4096},
		{"client below tenant", 500, 2000, 4096, 500},
		{"estimate: no default, no cap", 0, 0, 0, 0},
		{"estimate: tenant cap only", 0, 300, 0, 300},
		{"negative client is absent", -5, 0, 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := budget.OutputWant(tc.client, tc.tenant, tc.def); got != tc.output {
				t.Errorf("OutputWant(%d, %d, %d) = %d, want %d", tc.client, tc.tenant, tc.def, got, tc.output)
			}
		})
	}
}

func TestGrantedOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		granted, bound, choices, want int64
	}{
		{1100, 100, 1, 1000},
		{1100, 100, 3, 333}, // floor: never more than granted
		{1100, 100, 0, 1000},
		{100, 100, 1, 0},
		{50, 100, 1, 0},
	} {
		if got := budget.GrantedOutput(tc.granted, tc.bound, tc.choices); got != tc.want {
			t.Errorf("GrantedOutput(%d, %d, %d) = %d, want %d", tc.granted, tc.bound, tc.choices, got, tc.want)
		}
	}
}

func TestOutputCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		client, tenant, budget int64
		cap                    int64
		rewrite                bool
	}{
		{"client absent: the budget is written", 0, 0, 700, 700, true},
		{"client smaller than the budget: kept", 200, 0, 700, 200, false},
		{"client equal to the budget: kept", 700, 0, 700, 700, false},
		{"client larger than the budget: clamped", 5000, 0, 700, 700, true},
		{"tenant below budget and client", 5000, 300, 700, 300, true},
		{"client below the tenant cap: kept", 100, 300, 700, 100, false},
		{"no budget, no tenant cap: nothing", 5000, 0, 0, 5000, false},
		{"no budget, no client: nothing to write", 0, 0, 0, 0, false},
		{"no budget, tenant cap, no client: written", 0, 300, 0, 300, true},
		{"no budget, client above tenant cap: clamped", 900, 300, 0, 300, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, rw := budget.OutputCap(tc.client, tc.tenant, tc.budget)
			if c != tc.cap || rw != tc.rewrite {
				t.Errorf("OutputCap(%d, %d, %d) = (%d, %v), want (%d, %v)", tc.client, tc.tenant, tc.budget, c, rw, tc.cap, tc.rewrite)
			}
		})
	}
}
