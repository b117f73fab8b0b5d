package route

import (
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestRouter(c *clock) (*Router, *Pool) {
	r := New([]PoolSpec{{
		Name:   "p",
		Models: []string{"m1", "m2"},
		Endpoints: []EndpointSpec{
			{Name: "a", Weight: 3}, {Name: "b", Weight: 1}, {Name: "c", Weight: 0},
		},
	}}, c.now)
	return r, r.Pool("m1")
}

func names(es []*Endpoint) string {
	s := ""
	for _, e := range es {
		s += e.Name
	}
	return s
}

func TestPoolLookup(t *testing.T) {
	r, p := newTestRouter(&clock{t: time.Unix(1000, 0)})
	if p == nil || r.Pool("m2") != p {
		t.Fatal("both models must map to the same pool")
	}
	if r.Pool("nope") != nil {
		t.Fatal("unknown model must have no pool")
	}
}

func TestOrderWeights(t *testing.T) {
	r, p := newTestRouter(&clock{t: time.Unix(1000, 0)})
	first := map[string]int{}
	const n = 20000
	for i := 0; i < n; i++ {
		o, wait := r.Order(p, nil, 3)
		if len(o) != 3 || wait != 0 {
			t.Fatalf("order %q wait %v: want all three endpoints", names(o), wait)
		}
		seen := map[string]bool{}
		for _, e := range o {
			if seen[e.Name] {
				t.Fatalf("endpoint repeated in %q", names(o))
			}
			seen[e.Name] = true
		}
		first[o[0].Name]++
	}
	// Weights 3:1:1 → a first 60% of the time; bounds are wide (±5 points).
	if got := float64(first["a"]) / n; got < 0.55 || got > 0.65 {
		t.Fatalf("a first %.3f of the time, want ~0.60", got)
	}
	if first["b"] == 0 || first["c"] == 0 {
		t.Fatalf("every endpoint must sometimes go first: %v", first)
	}
}

func TestOrderCooldown(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	tests := []struct {
		name     string
		cool     map[string]time.Duration // endpoint → cooldown
		hard     bool
		max      int
		want     string // exact order, or "" to check only set/len
		wantLen  int
		wantWait time.Duration
	}{
		{name: "soft cooled go last, soonest first", cool: map[string]time.Duration{"a": 5 * time.Second, "b": 2 * time.Second}, max: 3, want: "cba"},
		{name: "hard cooled are skipped", cool: map[string]time.Duration{"a": 5 * time.Second}, hard: true, max: 3, wantLen: 2},
		{name: "all hard cooled: wait for the first", cool: map[string]time.Duration{"a": 5 * time.Second, "b": 2 * time.Second, "c": 3 * time.Second}, hard: true, max: 3, wantLen: 0, wantWait: 2 * time.Second},
		{name: "max bounds attempts", max: 1, wantLen: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, p := newTestRouter(c)
			for _, e := range p.Endpoints {
				if d, ok := tt.cool[e.Name]; ok {
					r.Cooldown(e, d, tt.hard)
				}
			}
			o, wait := r.Order(p, nil, tt.max)
			if tt.want != "" && names(o) != tt.want {
				t.Fatalf("order %q, want %q", names(o), tt.want)
			}
			if tt.want == "" && len(o) != tt.wantLen {
				t.Fatalf("order %q, want %d endpoints", names(o), tt.wantLen)
			}
			if wait != tt.wantWait {
				t.Fatalf("wait %v, want %v", wait, tt.wantWait)
			}
			for _, e := range o {
				if tt.hard && tt.cool[e.Name] > 0 {
					t.Fatalf("hard-cooled %s was offered", e.Name)
				}
			}
		})
	}
}

func TestCooldownExpiresAndHealthy(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r, p := newTestRouter(c)
	a := p.Endpoints[0]
	r.Cooldown(a, time.Second, true)
	if o, _ := r.Order(p, nil, 3); len(o) != 2 {
		t.Fatalf("hard-cooled endpoint offered: %q", names(o))
	}
	c.t = c.t.Add(2 * time.Second)
	if o, _ := r.Order(p, nil, 3); len(o) != 3 {
		t.Fatalf("expired cooldown still applied: %q", names(o))
	}
	r.Cooldown(a, time.Hour, true)
	r.Healthy(a)
	if o, _ := r.Order(p, nil, 3); len(o) != 3 {
		t.Fatalf("Healthy did not end the cooldown: %q", names(o))
	}
}

func BenchmarkOrder(b *testing.B) {
	r, p := newTestRouter(&clock{t: time.Unix(1000, 0)})
	buf := make([]*Endpoint, 0, 4)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = r.Order(p, buf[:0], 3)
	}
}
