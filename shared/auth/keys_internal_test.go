package auth

import (
	"testing"
	"time"
)

func TestRefreshIntervalClamp(t *testing.T) {
	t.Parallel()
	const lo, hi = 5 * time.Minute, 24 * time.Hour
	cases := []struct {
		name, header string
		want         time.Duration
	}{
		{"absent", "", lo},
		{"within", "public, max-age=3600", time.Hour},
		{"below floor", "max-age=1", lo},
		{"zero", "max-age=0", lo},
		{"above ceiling", "max-age=604800", hi},
		{"overflow", "max-age=99999999999999999999999", hi},
		{"quoted", `max-age="600"`, 10 * time.Minute},
		{"case and spaces", " Public ,  MAX-AGE = 900 ", 15 * time.Minute},
		{"no-store wins", "max-age=3600, no-store", lo},
		{"no-cache wins", "no-cache, max-age=3600", lo},
		{"garbage value", "max-age=soon", lo},
		{"negative", "max-age=-5", lo},
		{"s-maxage ignored", "s-maxage=3600", lo},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := refreshInterval(tc.header, lo, hi); got != tc.want {
				t.Fatalf("refreshInterval(%q) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	cases := []struct {
		failures int
		want     time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {9, 256 * time.Second}, {10, 5 * time.Minute}, {1000, 5 * time.Minute},
	}
	for _, tc := range cases {
		if got := backoff(time.Second, 5*time.Minute, tc.failures); got != tc.want {
			t.Errorf("backoff(failures=%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func TestTokenCache(t *testing.T) {
	t.Parallel()
	now := time.Now()
	key := func(i int) [32]byte { return [32]byte{byte(i), byte(i >> 8)} }
	p := Principal{Tenant: "t", Subject: "s"}

	t.Run("honours exp", func(t *testing.T) {
		c := newTokenCache(4)
		c.put(key(1), p, now.Add(time.Minute), now)
		if got, ok := c.get(key(1), now); !ok || got != p {
			t.Fatalf("get before exp = %v, %v", got, ok)
		}
		if _, ok := c.get(key(1), now.Add(time.Minute)); ok {
			t.Fatal("hit at exp")
		}
		if c.len() != 0 {
			t.Fatal("expired entry not dropped")
		}
		c.put(key(2), p, now.Add(-time.Second), now)
		if c.len() != 0 {
			t.Fatal("stored an already expired token")
		}
	})
	t.Run("bounded", func(t *testing.T) {
		c := newTokenCache(100)
		for i := range 10_000 {
			c.put(key(i), p, now.Add(time.Hour), now)
			if c.len() > 100 {
				t.Fatalf("len = %d after %d puts, want <= 100", c.len(), i+1)
			}
		}
	})
	t.Run("evicts expired first", func(t *testing.T) {
		c := newTokenCache(2)
		c.put(key(1), p, now.Add(time.Second), now)
		c.put(key(2), p, now.Add(time.Hour), now)
		later := now.Add(2 * time.Second)
		c.put(key(3), p, later.Add(time.Hour), later)
		if _, ok := c.get(key(2), later); !ok {
			t.Fatal("live entry evicted while an expired one was there")
		}
	})
	t.Run("clear", func(t *testing.T) {
		c := newTokenCache(4)
		c.put(key(1), p, now.Add(time.Hour), now)
		c.clear()
		if _, ok := c.get(key(1), now); ok {
			t.Fatal("hit after clear")
		}
	})
}

// len is the cache's size, for the tests.
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
