package route

import (
	"testing"
	"time"
)

// TestTenantShare: an endpoint with a capacity admits each tenant's asks
// up to its share of the minute, each tenant apart, and anew the next
// minute; an endpoint without one admits everything.
func TestTenantShare(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	r := New([]PoolSpec{{Name: "p", Models: []string{"m"}, Endpoints: []EndpointSpec{
		{Name: "ptu", Capacity: 10_000}, {Name: "payg", Priority: 1},
	}}}, Options{Now: func() time.Time { return now }})
	ptu, payg := r.Pool("m").Endpoints[0], r.Pool("m").Endpoints[1]
	for _, c := range []struct {
		tenant string
		asked  int64
		want   bool
	}{
		{"a", 4000, true},
		{"a", 1000, true},  // 5,000: its half of 10,000
		{"a", 1, false},    // past it
		{"b", 4999, true},  // another tenant's share is its own
		{"a", 6000, false}, // nothing counted for a refusal
		{"c", 5001, false}, // one ask above a share never fits
	} {
		if got := r.Admit(ptu, c.tenant, c.asked); got != c.want {
			t.Fatalf("%s asking %d: admitted %v, want %v", c.tenant, c.asked, got, c.want)
		}
	}
	if !r.Admit(payg, "a", 1<<40) {
		t.Fatal("an endpoint without a capacity refused")
	}
	now = now.Add(time.Minute)
	if !r.Admit(ptu, "a", 5000) {
		t.Fatal("the next minute is a new share")
	}
}
