package tenant

import "testing"

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
