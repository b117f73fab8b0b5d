package route

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
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
	}}, Options{Now: c.now})
	return r, r.Pool("m1")
}

// priorityRouter is a PTU pair at priority 0 and pay-as-you-go at 1.
func priorityRouter(c *clock, o Options) (*Router, *Pool) {
	o.Now = c.now
	r := New([]PoolSpec{{
		Name:   "p",
		Models: []string{"m"},
		Endpoints: []EndpointSpec{
			{Name: "payg", Priority: 1}, {Name: "ptu1"}, {Name: "ptu2"},
		},
	}}, o)
	return r, r.Pool("m")
}

func names(es []*Endpoint) string {
	s := ""
	for _, e := range es {
		s += e.Name + " "
	}
	return s
}

func byName(p *Pool, n string) *Endpoint {
	for _, e := range p.Endpoints {
		if e.Name == n {
			return e
		}
	}
	panic(n)
}

var ctx = context.Background()

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
		o, wait := r.Order(p, nil, 3, 0)
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
	// Idle endpoints tie on load, so weights 3:1:1 decide: a first 60% of
	// the time; bounds are wide (±5 points).
	if got := float64(first["a"]) / n; got < 0.55 || got > 0.65 {
		t.Fatalf("a first %.3f of the time, want ~0.60", got)
	}
	if first["b"] == 0 || first["c"] == 0 {
		t.Fatalf("every endpoint must sometimes go first: %v", first)
	}
}

// TestOrderPriorities: the best priority's endpoints come first, then the
// next; a cooling PTU leaves only its sibling ahead of pay-as-you-go.
func TestOrderPriorities(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r, p := priorityRouter(c, Options{})
	for i := 0; i < 200; i++ {
		o, _ := r.Order(p, nil, 3, 0)
		if len(o) != 3 || o[2].Name != "payg" {
			t.Fatalf("order %q: pay-as-you-go must come after both PTUs", names(o))
		}
	}
	r.Cooldown(ctx, byName(p, "ptu1"), time.Second, true)
	if o, _ := r.Order(p, nil, 3, 0); names(o) != "ptu2 payg " {
		t.Fatalf("order %q, want ptu2 then payg", names(o))
	}
	r.Cooldown(ctx, byName(p, "ptu2"), time.Second, false) // soft: tried last
	if o, _ := r.Order(p, nil, 3, 0); names(o) != "payg ptu2 " {
		t.Fatalf("order %q, want payg then the soft-cooled ptu2", names(o))
	}
}

// TestOrderLeastOutstanding: within a priority the endpoint with fewer
// in-flight requests per weight goes first, whatever the draw.
func TestOrderLeastOutstanding(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r := New([]PoolSpec{{Name: "p", Models: []string{"m"}, Endpoints: []EndpointSpec{
		{Name: "slow", Weight: 1}, {Name: "fast", Weight: 1}, {Name: "big", Weight: 4},
	}}}, Options{Now: c.now})
	p := r.Pool("m")
	for range 3 {
		byName(p, "slow").Begin()
	}
	for range 4 { // 4 in flight at weight 4: 1 per weight, less than slow's 3
		byName(p, "big").Begin()
	}
	for i := 0; i < 200; i++ {
		if o, _ := r.Order(p, nil, 3, 0); names(o) != "fast big slow " {
			t.Fatalf("order %q, want fast (0), big (1/weight), slow (3)", names(o))
		}
	}
	for range 3 {
		byName(p, "slow").End()
	}
	if got := byName(p, "slow").InFlight(); got != 0 {
		t.Fatalf("in flight %d after End", got)
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
		{name: "soft cooled go last, soonest first", cool: map[string]time.Duration{"a": 5 * time.Second, "b": 2 * time.Second}, max: 3, want: "c b a "},
		{name: "hard cooled are skipped", cool: map[string]time.Duration{"a": 5 * time.Second}, hard: true, max: 3, wantLen: 2},
		{name: "all hard cooled: wait for the first", cool: map[string]time.Duration{"a": 5 * time.Second, "b": 2 * time.Second, "c": 3 * time.Second}, hard: true, max: 3, wantLen: 0, wantWait: 2 * time.Second},
		{name: "max bounds attempts", max: 1, wantLen: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, p := newTestRouter(c)
			for _, e := range p.Endpoints {
				if d, ok := tt.cool[e.Name]; ok {
					r.Cooldown(ctx, e, d, tt.hard)
				}
			}
			o, wait := r.Order(p, nil, tt.max, 0)
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

// TestCooldownNeverShortened: a second, shorter cooldown (hard or soft)
// leaves the first's end; a longer one extends it; and a success ends
// only a soft cooldown (a peer gateway once kept the shorter deadline).
func TestCooldownNeverShortened(t *testing.T) {
	tests := []struct {
		name        string
		first       time.Duration
		firstHard   bool
		second      time.Duration
		secondHard  bool
		healthy     bool
		coolingAt   time.Duration // still left out (hard) at this offset
		availableAt time.Duration
	}{
		{name: "shorter hard after hard", first: 10 * time.Second, firstHard: true, second: 2 * time.Second, secondHard: true, coolingAt: 5 * time.Second, availableAt: 11 * time.Second},
		{name: "soft after hard", first: 10 * time.Second, firstHard: true, second: time.Second, coolingAt: 5 * time.Second, availableAt: 11 * time.Second},
		{name: "longer hard extends", first: 2 * time.Second, firstHard: true, second: 10 * time.Second, secondHard: true, coolingAt: 5 * time.Second, availableAt: 11 * time.Second},
		{name: "a success leaves a hard cooldown", first: 10 * time.Second, firstHard: true, healthy: true, coolingAt: 5 * time.Second, availableAt: 11 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			r, p := newTestRouter(c)
			a := p.Endpoints[0]
			start := c.t
			r.Cooldown(ctx, a, tt.first, tt.firstHard)
			if tt.second > 0 {
				r.Cooldown(ctx, a, tt.second, tt.secondHard)
			}
			if tt.healthy {
				r.Healthy(a)
			}
			c.t = start.Add(tt.coolingAt)
			if o, _ := r.Order(p, nil, 3, 0); len(o) != 2 {
				t.Fatalf("at +%v: order %q, want a left out", tt.coolingAt, names(o))
			}
			c.t = start.Add(tt.availableAt)
			if o, _ := r.Order(p, nil, 3, 0); len(o) != 3 {
				t.Fatalf("at +%v: order %q, want a back", tt.availableAt, names(o))
			}
		})
	}
	t.Run("a success ends a soft cooldown", func(t *testing.T) {
		c := &clock{t: time.Unix(1000, 0)}
		r, p := newTestRouter(c)
		a := p.Endpoints[0]
		r.Cooldown(ctx, a, time.Hour, false)
		r.Healthy(a)
		if cu, _ := a.cooling(c.t.UnixNano()); cu != 0 {
			t.Fatal("Healthy did not end the soft cooldown")
		}
	})
}

// TestCooldownBounded: no single answer benches an endpoint past
// MaxCooldown, however long it asks for, in whichever header, hard or
// soft; Cooldown says what it set.
func TestCooldownBounded(t *testing.T) {
	headers := []struct {
		name string
		h    http.Header
	}{
		{"retry-after a day", http.Header{"Retry-After": {"86400"}}},
		{"retry-after a year", http.Header{"Retry-After": {"31536000"}}},
		{"retry-after-ms a day", http.Header{"Retry-After-Ms": {"86400000"}}},
		{"x-ratelimit-reset-requests an hour", http.Header{"X-Ratelimit-Reset-Requests": {"1h"}, "X-Ratelimit-Remaining-Requests": {"0"}}},
		{"anthropic reset a day", http.Header{"Anthropic-Ratelimit-Tokens-Reset": {time.Unix(1000+86400, 0).UTC().Format(time.RFC3339)}}},
	}
	for _, tt := range headers {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			r, p := priorityRouter(c, Options{Settings: Settings{MaxCooldown: 30 * time.Second}})
			e := byName(p, "ptu1")
			adv := Advise(tt.h, http.StatusTooManyRequests, c.t)
			if adv.Pause <= 0 {
				t.Fatalf("Advise = %+v: a long pause must still cool hard", adv)
			}
			if got := r.Cooldown(ctx, e, adv.Pause, true); got != 30*time.Second {
				t.Fatalf("Cooldown set %v, want MaxCooldown", got)
			}
			c.t = c.t.Add(29 * time.Second)
			if o, _ := r.Order(p, nil, 3, 0); len(o) != 2 {
				t.Fatalf("order %q: ptu1 must still cool hard at 29 s", names(o))
			}
			c.t = c.t.Add(2 * time.Second)
			if o, _ := r.Order(p, nil, 3, 0); len(o) != 3 {
				t.Fatalf("order %q: a long pause must end at MaxCooldown", names(o))
			}
		})
	}
	t.Run("soft", func(t *testing.T) {
		c := &clock{t: time.Unix(1000, 0)}
		r, p := priorityRouter(c, Options{Settings: Settings{MaxCooldown: 30 * time.Second}})
		e := byName(p, "ptu1")
		if got := r.Cooldown(ctx, e, time.Hour, false); got != 30*time.Second {
			t.Fatalf("soft Cooldown set %v, want MaxCooldown", got)
		}
		c.t = c.t.Add(31 * time.Second)
		if cu, _ := e.cooling(c.t.UnixNano()); cu != 0 {
			t.Fatal("a soft cooldown outlived MaxCooldown")
		}
	})
}

// TestStreamEjection: EjectAfter streams cut in a row put the endpoint
// last for EjectBase, a first event does not restore it, the next
// ejection in a row lasts twice as long, and finished streams undo it.
func TestStreamEjection(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r, p := priorityRouter(c, Options{EjectBase: 10 * time.Second})
	e := byName(p, "ptu1")
	last := func() string {
		o, _ := r.Order(p, nil, 3, 0)
		return o[len(o)-1].Name
	}
	r.StreamFailed(e)
	r.StreamFailed(e)
	if last() != "payg" {
		t.Fatal("ejected after two cut streams; want three")
	}
	r.StreamFailed(e)
	r.Healthy(e) // the next stream's first event
	if last() != "ptu1" {
		t.Fatal("three cut streams in a row must eject (try last)")
	}
	c.t = c.t.Add(11 * time.Second)
	if last() != "payg" {
		t.Fatal("the first ejection must end after EjectBase")
	}
	for range 3 {
		r.StreamFailed(e)
	}
	c.t = c.t.Add(15 * time.Second)
	if last() != "ptu1" {
		t.Fatal("the second ejection in a row must last 2 × EjectBase")
	}
	c.t = c.t.Add(6 * time.Second)
	if last() != "payg" {
		t.Fatal("the second ejection must end after 2 × EjectBase")
	}
	r.StreamDone(e)
	r.StreamDone(e)
	for range 3 {
		r.StreamFailed(e)
	}
	c.t = c.t.Add(11 * time.Second)
	if last() != "payg" {
		t.Fatal("finished streams must shorten the next ejection back to EjectBase")
	}
}

func TestAdvise(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		status int
		h      map[string]string
		pause  time.Duration
		own    bool
	}{
		{"nothing", 429, nil, 0, false},
		{"retry-after-ms", 429, map[string]string{"retry-after-ms": "500"}, 500 * time.Millisecond, false},
		{"retry-after-ms beats retry-after", 429, map[string]string{"retry-after-ms": "1500.5", "retry-after": "9"}, 1500500 * time.Microsecond, false},
		{"retry-after seconds", 503, map[string]string{"retry-after": "7"}, 7 * time.Second, false},
		{"retry-after date", 429, map[string]string{"retry-after": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second, false},
		{"retry-after past date", 429, map[string]string{"retry-after": now.Add(-time.Minute).Format(http.TimeFormat)}, 0, false},
		{"retry-after a day: hard, the caller bounds it", 429, map[string]string{"retry-after": "86400"}, 24 * time.Hour, false},
		{"retry-after past a Duration", 429, map[string]string{"retry-after": "99999999999999999999"}, longest, false},
		{"retry-after-ms a day", 429, map[string]string{"retry-after-ms": "86400000"}, 24 * time.Hour, false},
		{"retry-after-ms past a Duration", 503, map[string]string{"retry-after-ms": "1e300"}, longest, false},
		{"openai reset of an hour", 429, map[string]string{"x-ratelimit-reset-tokens": "1h0m0s"}, time.Hour, false},
		{"retry-after zero", 429, map[string]string{"retry-after": "0"}, 0, false},
		{"retry-after garbage", 429, map[string]string{"retry-after": "soon", "retry-after-ms": "-5"}, 0, false},
		{"openai resets: the spent limit's", 429, map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s",
			"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"}, 6 * time.Minute, false},
		{"openai: a limit with room does not count", 429, map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20ms",
			"x-ratelimit-remaining-tokens": "5000", "x-ratelimit-reset-tokens": "6m0s"}, 20 * time.Millisecond, false},
		{"anthropic reset", 429, map[string]string{
			"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": now.Add(30 * time.Second).Format(time.RFC3339)}, 30 * time.Second, false},
		{"capacity left: the request's own 429", 429, map[string]string{
			"retry-after": "60", "x-ratelimit-remaining-requests": "99", "x-ratelimit-remaining-tokens": "12000"}, 60 * time.Second, true},
		{"capacity left but a 503: not own", 503, map[string]string{"x-ratelimit-remaining-tokens": "12000"}, 0, false},
		{"one limit spent: not own", 429, map[string]string{"x-ratelimit-remaining-requests": "99", "x-ratelimit-remaining-tokens": "0"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.h {
				h.Set(k, v)
			}
			a := Advise(h, tt.status, now)
			if a.Pause != tt.pause || a.Own != tt.own {
				t.Fatalf("Advise = %+v, want pause %v own %v", a, tt.pause, tt.own)
			}
		})
	}
}

// fourRouter is one replica's view of a pool of four equal endpoints.
func fourRouter(c *clock) (*Router, *Pool) {
	r := New([]PoolSpec{{Name: "p", Models: []string{"m"}, Endpoints: []EndpointSpec{
		{Name: "https://e0"}, {Name: "https://e1"}, {Name: "https://e2"}, {Name: "https://e3"},
	}}}, Options{Now: c.now})
	return r, r.Pool("m")
}

// pad makes a JSON object body long enough to be cached (MinCachedBytes)
// with a member no key reads.
func pad(body string) []byte {
	return []byte(`{"metadata":{"pad":"` + strings.Repeat("x", MinCachedBytes) + `"},` + body[1:])
}

func conversation(system string, turns int) []byte {
	b := fmt.Appendf(nil, `{"model":"m","stream":true,"metadata":{"pad":"%s"},"messages":[{"role":"system","content":%q}`, strings.Repeat("x", MinCachedBytes), system)
	for i := 0; i < turns; i++ {
		b = fmt.Appendf(b, `,{"role":"user","content":"turn %d of a long agent loop"}`, i)
	}
	return append(b, "]}"...)
}

// TestAffinity: the same prompt prefix lands on the same endpoint from two
// replicas with no shared state, whatever the later turns; when that
// endpoint cools its keys move, and no other key does.
func TestAffinity(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r1, p1 := fourRouter(c)
	r2, p2 := fourRouter(c)
	const keys = 200
	home := map[int]string{}
	count := map[string]int{}
	for k := 0; k < keys; k++ {
		sys := fmt.Sprintf("you are agent %d", k)
		first, _ := r1.Order(p1, nil, 4, CacheKey(conversation(sys, 1), "m"))
		again, _ := r1.Order(p1, nil, 4, CacheKey(conversation(sys, 9), "m"))
		other, _ := r2.Order(p2, nil, 4, CacheKey(conversation(sys, 5), "m"))
		if first[0].Name != again[0].Name || first[0].Name != other[0].Name {
			t.Fatalf("key %d: %s, later turn %s, other replica %s", k, first[0].Name, again[0].Name, other[0].Name)
		}
		home[k] = first[0].Name
		count[first[0].Name]++
	}
	for _, e := range p1.Endpoints {
		if count[e.Name] < keys/8 { // a quarter each on average; wide bound
			t.Fatalf("keys per endpoint %v: rendezvous should spread them", count)
		}
	}
	// e1 cools on replica 1 only: its keys move, the others' stay.
	r1.Cooldown(ctx, byName(p1, "https://e1"), time.Minute, true)
	for k := 0; k < keys; k++ {
		o, _ := r1.Order(p1, nil, 4, CacheKey(conversation(fmt.Sprintf("you are agent %d", k), 3), "m"))
		switch {
		case home[k] == "https://e1" && o[0].Name == "https://e1":
			t.Fatalf("key %d stayed on the cooling endpoint", k)
		case home[k] != "https://e1" && o[0].Name != home[k]:
			t.Fatalf("key %d moved from %s to %s though its endpoint is fine", k, home[k], o[0].Name)
		}
	}
	// Back from the cooldown, the keys go home again.
	c.t = c.t.Add(2 * time.Minute)
	for k := 0; k < keys; k++ {
		o, _ := r1.Order(p1, nil, 4, CacheKey(conversation(fmt.Sprintf("you are agent %d", k), 3), "m"))
		if o[0].Name != home[k] {
			t.Fatalf("key %d: %s after the cooldown, want %s", k, o[0].Name, home[k])
		}
	}
}

// TestAffinityBoundedLoad: a key's endpoint far busier than its share
// gives way to the key's next choice; within its share it keeps the key.
func TestAffinityBoundedLoad(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r, p := fourRouter(c)
	key := CacheKey(conversation("hot prefix", 1), "m")
	o, _ := r.Order(p, nil, 4, key)
	home := o[0]
	for _, e := range p.Endpoints { // 2 in flight each: 8 in all
		e.Begin()
		e.Begin()
	}
	// home's share of 9: ceil(1.25 × 9 / 4) = 3 ≥ 2 + 1: it keeps the key.
	if o, _ := r.Order(p, nil, 4, key); o[0] != home {
		t.Fatalf("affinity yielded within its share: %q", names(o))
	}
	for range 3 {
		home.Begin()
	}
	// 5 on home of 11: ceil(1.25 × 12 / 4) = 4 < 5 + 1: it yields.
	o, _ = r.Order(p, nil, 4, key)
	if o[0] == home {
		t.Fatalf("%s with 5 in flight against 2 elsewhere: affinity must yield", home.Name)
	}
	for range 3 {
		home.End()
	}
	if o, _ := r.Order(p, nil, 4, key); o[0] != home {
		t.Fatalf("load gone: the key must go home to %s, got %q", home.Name, names(o))
	}
}

func TestCacheKey(t *testing.T) {
	base := CacheKey(pad(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`), "m")
	tests := []struct {
		name string
		body string
		same bool
	}{
		{"field order and stream flag do not matter", `{"stream":true,"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"model":"m"}`, true},
		{"another system prompt", `{"model":"m","messages":[{"role":"system","content":"t"},{"role":"user","content":"u"}]}`, false},
		{"tools are part of the prefix", `{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CacheKey(pad(tt.body), "m"); (got == base) != tt.same {
				t.Fatalf("key %x vs base %x, want same=%v", got, base, tt.same)
			}
		})
	}
	t.Run("prompt_cache_key decides", func(t *testing.T) {
		a := CacheKey([]byte(`{"prompt_cache_key":"user-1","messages":[{"role":"user","content":"x"}]}`), "m")
		b := CacheKey([]byte(`{"prompt_cache_key":"user-1","messages":[{"role":"user","content":"y"}]}`), "m")
		d := CacheKey([]byte(`{"prompt_cache_key":"user-2","messages":[{"role":"user","content":"x"}]}`), "m")
		if a != b || a == d || a == 0 {
			t.Fatalf("keys %x %x %x: the same prompt_cache_key must match, another must not", a, b, d)
		}
	})
	t.Run("later turns and breakpoints do not move the key", func(t *testing.T) {
		turn1 := `{"model":"m","system":"s","messages":[{"role":"user","content":[{"type":"text","text":"doc","cache_control":{"type":"ephemeral"}}]}]}`
		turn2 := `{"model":"m","system":"s","messages":[{"role":"user","content":[{"type":"text","text":"doc"}]},{"role":"assistant","content":"a"},{"role":"user","content":"q2","cache_control":{"type":"ephemeral"}}]}`
		if CacheKey(pad(turn1), "m") != CacheKey(pad(turn2), "m") {
			t.Fatal("a later turn with the breakpoint moved must keep the key")
		}
		other := `{"model":"m","system":"s","messages":[{"role":"user","content":[{"type":"text","text":"another doc"}]}]}`
		if CacheKey(pad(turn1), "m") == CacheKey(pad(other), "m") {
			t.Fatal("another first message must change the key")
		}
	})
	t.Run("no prompt: no key", func(t *testing.T) {
		if k := CacheKey(pad(`{"model":"m"}`), "m"); k != 0 {
			t.Fatalf("key %x for a body without a prompt", k)
		}
	})
	t.Run("too short to be cached: no key", func(t *testing.T) {
		if k := CacheKey([]byte(`{"model":"m","messages":[{"role":"system","content":"s"}]}`), "m"); k != 0 {
			t.Fatalf("key %x for a prompt below MinCachedBytes", k)
		}
	})
}

func BenchmarkOrder(b *testing.B) {
	r, p := newTestRouter(&clock{t: time.Unix(1000, 0)})
	buf := make([]*Endpoint, 0, 4)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = r.Order(p, buf[:0], 3, 0)
	}
}

func BenchmarkOrderAffinity(b *testing.B) {
	r, p := fourRouter(&clock{t: time.Unix(1000, 0)})
	raw := conversation("you are a helpful agent with a long system prompt", 20)
	buf := make([]*Endpoint, 0, 4)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = r.Order(p, buf[:0], 4, CacheKey(raw, "m"))
	}
}

// flakyShared is a Shared whose store is away while down is set; it
// records what it was told.
type flakyShared struct {
	down      bool
	published map[string]time.Duration
}

func (f *flakyShared) Publish(_ context.Context, e *Endpoint, d time.Duration) error {
	if f.down {
		return errors.New("store away")
	}
	f.published[e.Name] = max(f.published[e.Name], d)
	return nil
}

func (f *flakyShared) Fetch(_ context.Context, p *Pool, left []time.Duration) error {
	if f.down {
		return errors.New("store away")
	}
	for i, e := range p.Endpoints {
		left[i] = f.published[e.Name]
	}
	return nil
}

// TestCooldownPublishedWhenStoreReturns: a hard cooldown learned while the
// shared store was away reaches it on the first Sync that finds it back,
// for what is left of it; one that ended meanwhile is not published.
func TestCooldownPublishedWhenStoreReturns(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	sh := &flakyShared{down: true, published: map[string]time.Duration{}}
	r, p := priorityRouter(c, Options{Shared: sh})
	r.Cooldown(ctx, byName(p, "ptu1"), 40*time.Second, true)
	r.Cooldown(ctx, byName(p, "ptu2"), 5*time.Second, true)
	c.t = c.t.Add(10 * time.Second)
	r.Sync(ctx, p) // still away: nothing published, nothing lost
	if len(sh.published) != 0 {
		t.Fatalf("published %v while the store was away", sh.published)
	}
	sh.down = false
	r.Sync(ctx, p)
	if got := sh.published["ptu1"]; got != 30*time.Second {
		t.Fatalf("ptu1 published for %v once the store returned, want the 30 s left", got)
	}
	if _, ok := sh.published["ptu2"]; ok {
		t.Fatal("ptu2's cooldown had ended: it must not be published")
	}
	delete(sh.published, "ptu1")
	r.Sync(ctx, p)
	if len(sh.published) != 0 {
		t.Fatalf("published again: %v", sh.published)
	}
}

// TestOutlierEjection: one failed attempt benches nobody (the next
// request still goes to priority 0); FailAfter in a row across requests
// eject the endpoint for EjectBase; a success in between starts the count
// again.
func TestOutlierEjection(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r := New([]PoolSpec{{Name: "p", Models: []string{"m"}, Endpoints: []EndpointSpec{
		{Name: "ptu"}, {Name: "payg", Priority: 1},
	}}}, Options{Now: c.now, EjectBase: 10 * time.Second})
	p := r.Pool("m")
	ptu := byName(p, "ptu")
	firstName := func() string {
		o, _ := r.Order(p, nil, 2, 0)
		return o[0].Name
	}
	for i := 1; i < DefaultFailAfter; i++ {
		r.Failed(ptu)
		if firstName() != "ptu" {
			t.Fatalf("after %d failed attempts the next request leaves priority 0; want %d", i, DefaultFailAfter)
		}
	}
	r.Healthy(ptu)
	for range DefaultFailAfter - 1 {
		r.Failed(ptu)
	}
	if firstName() != "ptu" {
		t.Fatal("a success must start the run of failures again")
	}
	r.Failed(ptu)
	if firstName() != "payg" {
		t.Fatalf("%d failed attempts in a row must eject the endpoint", DefaultFailAfter)
	}
	c.t = c.t.Add(11 * time.Second)
	if firstName() != "ptu" {
		t.Fatal("the ejection must end after EjectBase")
	}
}
