package auth

import (
	"sync"
	"time"
)

// evictScan bounds the work a put does when the cache is full: it looks at
// this many entries (in Go's randomised map order), drops the expired ones,
// and if none was expired drops the first it saw.
const evictScan = 16

// tokenCache remembers tokens that passed full verification, keyed by the
// SHA-256 of the token, until the token's exp. A hit skips the signature
// check, which is most of the cost of Verify (see BenchmarkVerify*). It is
// bounded, per Verifier, and emptied whenever the JWKS changes so a key the
// issuer withdrew stops being honoured at the next refresh.
type tokenCache struct {
	mu  sync.Mutex
	max int
	m   map[[32]byte]cacheEntry
}

type cacheEntry struct {
	p   Principal
	exp time.Time
}

func newTokenCache(size int) *tokenCache {
	return &tokenCache{max: size, m: make(map[[32]byte]cacheEntry, size)}
}

func (c *tokenCache) get(key [32]byte, now time.Time) (Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return Principal{}, false
	}
	if !now.Before(e.exp) {
		delete(c.m, key)
		return Principal{}, false
	}
	return e.p, true
}

func (c *tokenCache) put(key [32]byte, p Principal, exp, now time.Time) {
	if !now.Before(exp) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		c.evictLocked(now)
	}
	c.m[key] = cacheEntry{p: p, exp: exp}
}

func (c *tokenCache) evictLocked(now time.Time) {
	var first [32]byte
	seen, freed := 0, false
	for k, e := range c.m {
		if seen == 0 {
			first = k
		}
		if !now.Before(e.exp) {
			delete(c.m, k)
			freed = true
		}
		if seen++; seen == evictScan {
			break
		}
	}
	if !freed {
		delete(c.m, first)
	}
}

func (c *tokenCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}
