package keys

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/gateway/shared/auth"
)

// Lookup reads a key's record by public id: the verifier's view of a
// Store. It returns ErrNotFound for an id it does not hold.
type Lookup interface {
	Get(ctx context.Context, id string) (Record, error)
}

// IDLister is a Lookup that lists the ids it holds in one call: the
// verifier keeps that list (refreshed every CacheTTL) and reads the
// store only for a listed id, or, a bounded number of times a second,
// for an id created since the list was read. A flood of made-up ids then
// costs no store read per attempt.
type IDLister interface {
	IDs(ctx context.Context) ([]string, error)
}

// entry is a record made ready to verify: its digest decoded, its
// principal built once.
type entry struct {
	digest    [sha256.Size]byte
	principal auth.Principal
	expires   time.Time
	// at is when a store entry was read (zero for the config's).
	at time.Time
	// missing is a negative entry: the store holds no such id.
	missing bool
}

func newEntry(r Record, at time.Time) (*entry, error) {
	e := &entry{principal: r.Principal(), expires: r.Expires, at: at}
	if n, err := hex.Decode(e.digest[:], []byte(r.Digest)); err != nil || n != len(e.digest) || len(r.Digest) != 2*len(e.digest) {
		return nil, fmt.Errorf("keys: key %q: digest must be %d hex digits", r.ID, 2*sha256.Size)
	}
	return e, nil
}

// Verifier checks gateway keys: the config's, held in memory, then the
// store's, read by public id and cached in this process for
// Options.CacheTTL (a revocation reaches every replica within it), with
// a bounded cache of the ids the store does not hold, so a flood of one
// wrong key costs one store read per CacheTTL. It is safe for concurrent
// use.
type Verifier struct {
	static map[string]*entry
	store  Lookup
	ttl    time.Duration
	max    int
	now    func() time.Time
	macs   sync.Pool // hash.Hash: HMAC-SHA-256 under the secret

	mu    sync.Mutex
	cache map[string]*entry

	// The store's ids (IDLister), and the reads allowed for ids it did
	// not list: a token bucket of UnlistedReads a second.
	lister     IDLister
	unlisted   float64
	idxMu      sync.Mutex
	ids        map[string]struct{}
	idsAt      time.Time
	refreshing bool
	tokens     float64
	tokensAt   time.Time
}

// Options configure a Verifier beyond its secret; the zero value works.
type Options struct {
	// Keys are the config's keys (api_keys.keys).
	Keys []Record
	// Store holds the keys made at run time; nil: none.
	Store Lookup
	// CacheTTL bounds how long a store's answer (a key, or its absence)
	// is believed. Default DefaultCacheTTL.
	CacheTTL time.Duration
	// CacheSize bounds the cached store answers. Default
	// DefaultCacheSize.
	CacheSize int
	// UnlistedReads bounds the store reads a second for ids the store's
	// list (IDLister) did not hold when last read: a key made since then
	// is found at once, a flood of made-up ids costs at most this many.
	// Default DefaultUnlistedReads.
	UnlistedReads float64
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultCacheTTL  = 5 * time.Second
	DefaultCacheSize = 10000
	// DefaultUnlistedReads: a few keys a second made on another replica
	// are found before the list is read again.
	DefaultUnlistedReads = 10
)

// NewVerifier builds a Verifier of the keys whose digests are under
// secret (at least 32 bytes: Settings.Check).
func NewVerifier(secret []byte, o Options) (*Verifier, error) {
	if len(secret) == 0 {
		return nil, errors.New("keys: no secret")
	}
	v := &Verifier{static: make(map[string]*entry, len(o.Keys)), store: o.Store, ttl: o.CacheTTL, max: o.CacheSize, now: o.Now, cache: map[string]*entry{}}
	if v.ttl <= 0 {
		v.ttl = DefaultCacheTTL
	}
	if v.max <= 0 {
		v.max = DefaultCacheSize
	}
	if v.now == nil {
		v.now = time.Now
	}
	v.lister, _ = o.Store.(IDLister)
	v.unlisted = o.UnlistedReads
	if v.unlisted <= 0 {
		v.unlisted = DefaultUnlistedReads
	}
	v.tokens = v.unlisted
	key := append([]byte(nil), secret...)
	v.macs.New = func() any { return hmac.New(sha256.New, key) }
	for _, r := range o.Keys {
		e, err := newEntry(r, time.Time{})
		if err != nil {
			return nil, err
		}
		v.static[r.ID] = e
	}
	return v, nil
}

// absent is the entry of an id nobody holds: its digest is compared as
// any other, so an unknown id and a wrong secret take the same path.
var absent = &entry{missing: true}

// Verify checks key (without its scheme) and returns its principal. An
// unknown id and a wrong secret are the same refusal, reached the same
// way (the digest is computed and compared in constant time either way);
// an expired key is ErrExpired. A store that cannot answer is
// auth.ErrKeysUnavailable (503): a revoked key is never served from a
// stale entry.
func (v *Verifier) Verify(ctx context.Context, key string) (auth.Principal, error) {
	id, ok := Parse(key)
	var sum [sha256.Size]byte
	v.sum(&sum, key)
	e := absent
	if ok {
		var err error
		if e, err = v.entry(ctx, id); err != nil {
			return auth.Principal{}, err
		}
	}
	if !hmac.Equal(sum[:], e.digest[:]) || e.missing || !ok {
		return auth.Principal{}, errRefused
	}
	if !v.now().Before(e.expires) {
		return auth.Principal{}, ErrExpired
	}
	return e.principal, nil
}

// sum writes key's HMAC into dst, from a copy of key on the stack and a
// pooled MAC: no allocation for a key of its own length.
func (v *Verifier) sum(dst *[sha256.Size]byte, key string) {
	var buf [keyLen]byte
	m := v.macs.Get().(hash.Hash)
	m.Reset()
	if len(key) <= len(buf) {
		m.Write(append(buf[:0], key...))
	} else {
		m.Write([]byte(key))
	}
	m.Sum(dst[:0])
	v.macs.Put(m)
}

// entry is id's entry: the config's, else a fresh cached one, else the
// store's answer (cached, found or not).
func (v *Verifier) entry(ctx context.Context, id string) (*entry, error) {
	if e, ok := v.static[id]; ok {
		return e, nil
	}
	if v.store == nil {
		return absent, nil
	}
	now := v.now()
	v.mu.Lock()
	e, ok := v.cache[id]
	v.mu.Unlock()
	if ok && now.Sub(e.at) < v.ttl {
		return e, nil
	}
	if v.unlistedID(ctx, id, now) {
		return absent, nil // not even cached: a flood of made-up ids must not evict real entries
	}
	r, err := v.store.Get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		e = &entry{missing: true, at: now}
	case err != nil:
		return nil, fmt.Errorf("%w: keys store: %w", auth.ErrKeysUnavailable, err)
	default:
		if e, err = newEntry(r, now); err != nil {
			e = &entry{missing: true, at: now} // a record the gateway cannot read is no key
		} else {
			v.listed(id)
		}
	}
	v.mu.Lock()
	if len(v.cache) >= v.max {
		v.sweep(now)
	}
	v.cache[id] = e
	v.mu.Unlock()
	return e, nil
}

// unlistedID reports whether id is surely not in the store: the store's
// list (read at most once per CacheTTL) does not hold it, and the reads
// for unlisted ids (a key made since the list was read) are spent for
// this second. Without a list it is never sure.
func (v *Verifier) unlistedID(ctx context.Context, id string, now time.Time) bool {
	if v.lister == nil {
		return false
	}
	v.idxMu.Lock()
	if (v.ids == nil || now.Sub(v.idsAt) >= v.ttl) && !v.refreshing {
		v.refreshing = true
		v.idxMu.Unlock()
		ids, err := v.lister.IDs(ctx)
		v.idxMu.Lock()
		v.refreshing = false
		if err == nil {
			v.ids, v.idsAt = make(map[string]struct{}, len(ids)), now
			for _, i := range ids {
				v.ids[i] = struct{}{}
			}
		}
	}
	defer v.idxMu.Unlock()
	if v.ids == nil {
		return false // no list yet: ask the store
	}
	if _, ok := v.ids[id]; ok {
		return false
	}
	v.tokens = min(v.unlisted, v.tokens+now.Sub(v.tokensAt).Seconds()*v.unlisted)
	v.tokensAt = now
	if v.tokens >= 1 {
		v.tokens--
		return false
	}
	return true
}

// listed adds id, which the store holds, to its list until the next
// read of the list.
func (v *Verifier) listed(id string) {
	v.idxMu.Lock()
	if v.ids != nil {
		v.ids[id] = struct{}{}
	}
	v.idxMu.Unlock()
}

// sweep drops the stale entries, and all of them when none is stale, so
// the cache never holds more than Options.CacheSize. Called with mu held.
func (v *Verifier) sweep(now time.Time) {
	for id, e := range v.cache {
		if now.Sub(e.at) >= v.ttl {
			delete(v.cache, id)
		}
	}
	if len(v.cache) >= v.max {
		clear(v.cache)
	}
}

// Authenticator is the gateway's credential check: a bearer with a
// gateway key's shape (Is) goes to Keys, anything else to JWT, so neither
// is tried as the other.
type Authenticator struct {
	Keys *Verifier
	JWT  interface {
		Verify(ctx context.Context, authorization string) (auth.Principal, error)
	}
}

// Verify checks the Authorization header value.
func (a Authenticator) Verify(ctx context.Context, authorization string) (auth.Principal, error) {
	if tok, ok := bearerKey(authorization); ok {
		return a.Keys.Verify(ctx, tok)
	}
	return a.JWT.Verify(ctx, authorization)
}

// bearerKey is the token of "Bearer <token>" (the scheme in any case,
// RFC 9110 §11.1) when it has a gateway key's shape.
func bearerKey(h string) (string, bool) {
	const scheme = "Bearer "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.Trim(h[len(scheme):], " \t")
	return tok, Is(tok)
}
