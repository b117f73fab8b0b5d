package keys_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/problem"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// counting is a Store that counts its reads.
type counting struct {
	keys.Store
	gets atomic.Int64
	fail error
}

func (c *counting) Get(ctx context.Context, id string) (keys.Record, error) {
	c.gets.Add(1)
	if c.fail != nil {
		return keys.Record{}, c.fail
	}
	return c.Store.Get(ctx, id)
}

func newKey(t *testing.T, now time.Time, rec keys.Record) (string, keys.Record) {
	t.Helper()
	if rec.Tenant == "" {
		rec.Tenant = "t1"
	}
	key, rec, err := keys.Generate(secret, rec, now)
	if err != nil {
		t.Fatal(err)
	}
	rec.Expires = now.Add(time.Hour)
	return key, rec
}

func TestKeyShape(t *testing.T) {
	t.Parallel()
	key, rec := newKey(t, time.Now(), keys.Record{})
	id, ok := keys.Parse(key)
	if !ok || id != rec.ID || !strings.HasPrefix(key, keys.Prefix+id+"-") {
		t.Fatalf("Parse(%q) = %q, %v; record id %q", key, id, ok, rec.ID)
	}
	if got := rec.Display(); got != keys.Prefix+id+"…"+key[len(key)-4:] || strings.Contains(got, key[len(keys.Prefix)+9:len(key)-4]) {
		t.Fatalf("Display = %q shows the secret", got)
	}
	for name, bad := range map[string]string{
		"jwt":         "eyJhbGciOiJSUzI1NiJ9.e30.sig",
		"short":       key[:len(key)-1],
		"long":        key + "a",
		"id alphabet": keys.Prefix + "ABCDEFGH" + key[len(keys.Prefix)+8:],
		"no dash":     key[:len(keys.Prefix)+8] + "x" + key[len(keys.Prefix)+9:],
		"secret char": key[:len(key)-1] + "=",
		"digest":      rec.Digest,
	} {
		if _, ok := keys.Parse(bad); ok {
			t.Errorf("%s: Parse(%q) accepted", name, bad)
		}
	}
}

func TestKeyVerify(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	key, rec := newKey(t, c.now(), keys.Record{Tenant: "t1", Project: "p", User: "u", Models: []string{"m1"}})
	expired, erec := newKey(t, c.now(), keys.Record{})
	erec.Expires = c.now()
	v, err := keys.NewVerifier(secret, keys.Options{Keys: []keys.Record{rec, erec}, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if p.Tenant != "t1" || p.Project != "p" || p.User != "u" || p.Key != rec.ID || p.Subject != "key:"+rec.ID ||
		!p.Models.Allows("m1") || p.Models.Allows("m2") {
		t.Fatalf("principal = %+v", p)
	}
	other, _ := newKey(t, c.now(), keys.Record{})
	wrongSecret := key[:len(key)-4] + "AAAA"
	if wrongSecret == key {
		wrongSecret = key[:len(key)-4] + "BBBB"
	}
	for name, bad := range map[string]string{
		"wrong secret":   wrongSecret,
		"unknown id":     other,
		"digest as key":  rec.Digest,
		"digest in key":  key[:len(keys.Prefix)+9] + rec.Digest[:43],
		"other secret's": keys.Prefix + rec.ID + other[len(keys.Prefix)+8:],
		"empty":          "",
	} {
		_, err := v.Verify(context.Background(), bad)
		if !errors.Is(err, auth.ErrInvalidToken) || errors.Is(err, keys.ErrExpired) {
			t.Errorf("%s: err = %v, want invalid", name, err)
		}
		if err != nil && bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("%s: error %q echoes the key", name, err)
		}
	}
	if _, err := v.Verify(context.Background(), expired); !errors.Is(err, keys.ErrExpired) || !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("expired: err = %v", err)
	}
	c.add(time.Hour)
	if _, err := v.Verify(context.Background(), key); !errors.Is(err, keys.ErrExpired) {
		t.Fatalf("after its expiry: err = %v", err)
	}
}

// TestKeyRevocationBound: a replica that has cached a store key keeps
// serving it at most CacheTTL after it is revoked, then refuses it.
func TestKeyRevocationBound(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := &counting{Store: keys.NewMemory(c.now)}
	m := keys.Manager{Secret: secret, Store: st, Now: c.now}
	key, rec, err := m.Create(context.Background(), keys.Record{Tenant: "t1"}, time.Hour, "test")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := keys.NewVerifier(secret, keys.Options{Store: st, CacheTTL: 5 * time.Second, Now: c.now})
	if _, err := v.Verify(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if err := m.Revoke(context.Background(), rec.ID, "test"); err != nil {
		t.Fatal(err)
	}
	c.add(4 * time.Second)
	if _, err := v.Verify(context.Background(), key); err != nil {
		t.Fatalf("within the bound: %v (the cached entry serves)", err)
	}
	c.add(time.Second)
	if _, err := v.Verify(context.Background(), key); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("past the bound: err = %v, want refused", err)
	}
}

// TestKeyFlood: a flood of one wrong key, or of wrong secrets for a
// known id, costs no store read past the first per CacheTTL.
func TestKeyFlood(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := &counting{Store: keys.NewMemory(c.now)}
	m := keys.Manager{Secret: secret, Store: st, Now: c.now}
	key, _, _ := m.Create(context.Background(), keys.Record{Tenant: "t1"}, time.Hour, "test")
	v, _ := keys.NewVerifier(secret, keys.Options{Store: st, Now: c.now})
	unknown, _ := newKey(t, c.now(), keys.Record{})
	wrong := key[:len(key)-4] + "zzzz"
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				for _, k := range []string{unknown, wrong, "llmgw-nonsense"} {
					if _, err := v.Verify(context.Background(), k); err == nil {
						t.Error("a wrong key was accepted")
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	// Two ids reach the store; concurrent first misses may each read.
	if n := st.gets.Load(); n > 16 {
		t.Fatalf("store reads = %d for 12000 wrong keys of two ids", n)
	}
	before := st.gets.Load()
	for range 1000 {
		_, _ = v.Verify(context.Background(), unknown)
	}
	if n := st.gets.Load() - before; n != 0 {
		t.Fatalf("cached: %d store reads", n)
	}
}

func TestKeyStoreDown(t *testing.T) {
	t.Parallel()
	st := &counting{Store: keys.NewMemory(nil), fail: errors.New("down")}
	v, _ := keys.NewVerifier(secret, keys.Options{Store: st})
	key, _ := newKey(t, time.Now(), keys.Record{})
	if _, err := v.Verify(context.Background(), key); !errors.Is(err, auth.ErrKeysUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
}

func TestKeyRotate(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := keys.NewMemory(c.now)
	m := keys.Manager{Secret: secret, Store: st, Now: c.now}
	old, rec, _ := m.Create(context.Background(), keys.Record{Tenant: "t1", Models: []string{"m"}}, 24*time.Hour, "test")
	next, nrec, err := m.Rotate(context.Background(), rec.ID, 24*time.Hour, time.Hour, "test")
	if err != nil {
		t.Fatal(err)
	}
	if nrec.Tenant != "t1" || len(nrec.Models) != 1 || nrec.ID == rec.ID {
		t.Fatalf("successor = %+v", nrec)
	}
	v, _ := keys.NewVerifier(secret, keys.Options{Store: st, CacheTTL: time.Nanosecond, Now: c.now})
	for _, k := range []string{old, next} {
		if _, err := v.Verify(context.Background(), k); err != nil {
			t.Fatalf("during the overlap: %v", err)
		}
	}
	c.add(time.Hour)
	if _, err := v.Verify(context.Background(), old); err == nil {
		t.Fatal("the old key outlived its overlap")
	}
	if _, err := v.Verify(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Create(context.Background(), keys.Record{Tenant: "t1"}, keys.DefaultMaxTTL+time.Second, "test"); err == nil {
		t.Fatal("a key beyond max_ttl was made")
	}
}

// jwt is a JWT verifier that counts what it is asked.
type jwt struct{ calls atomic.Int64 }

func (j *jwt) Verify(context.Context, string) (auth.Principal, error) {
	j.calls.Add(1)
	return auth.Principal{Tenant: "jwt"}, nil
}

func TestKeyOrJWT(t *testing.T) {
	t.Parallel()
	key, rec := newKey(t, time.Now(), keys.Record{})
	st := &counting{Store: keys.NewMemory(nil)}
	v, _ := keys.NewVerifier(secret, keys.Options{Keys: []keys.Record{rec}, Store: st})
	j := &jwt{}
	a := keys.Authenticator{Keys: v, JWT: j}
	for _, h := range []string{"Bearer " + key, "bearer  " + key + " "} {
		if p, err := a.Verify(context.Background(), h); err != nil || p.Key != rec.ID {
			t.Fatalf("%q: %+v, %v", h, p, err)
		}
	}
	if _, err := a.Verify(context.Background(), "Bearer "+keys.Prefix+"junk"); err == nil {
		t.Fatal("a malformed key was accepted")
	}
	if j.calls.Load() != 0 || st.gets.Load() != 0 {
		t.Fatalf("a key went to the JWT verifier (%d) or a malformed one to the store (%d)", j.calls.Load(), st.gets.Load())
	}
	if p, _ := a.Verify(context.Background(), "Bearer eyJhbGciOiJSUzI1NiJ9.e30.x"); p.Tenant != "jwt" || j.calls.Load() != 1 {
		t.Fatal("a JWT did not reach the JWT verifier")
	}
}

func TestKeySettingsCheck(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	_, rec := newKey(t, now, keys.Record{})
	getenv := func(n string) string {
		if n == "S" {
			return string(secret)
		}
		if n == "SHORT" {
			return "x"
		}
		return ""
	}
	tests := []struct {
		name string
		s    keys.Settings
		want []string
	}{
		{"off", keys.Settings{}, nil},
		{"ok", keys.Settings{SecretEnv: "S", Keys: []keys.Record{rec}}, nil},
		{"keys without secret", keys.Settings{Keys: []keys.Record{rec}}, []string{"api_keys.secret_env: required"}},
		{"unset", keys.Settings{SecretEnv: "NONE"}, []string{"api_keys.secret_env: environment variable NONE is not set"}},
		{"short", keys.Settings{SecretEnv: "SHORT"}, []string{"api_keys.secret_env: environment variable SHORT must hold at least 32 bytes"}},
		{"bad entry", keys.Settings{SecretEnv: "S", Keys: []keys.Record{{ID: "X", Digest: "zz"}, rec, rec, {ID: "abcdefgh", Digest: rec.Digest, Tenant: "t", Expires: now.Add(keys.DefaultMaxTTL + time.Hour)}}}, []string{
			`api_keys.keys[0].id: must be`, "api_keys.keys[0].digest: must be", "api_keys.keys[0].tenant: required", "api_keys.keys[0].expires: required",
			`api_keys.keys[2].id: "` + rec.ID + `" is listed twice`, "api_keys.keys[3].expires: is more than api_keys.max_ttl",
		}},
		{"negative", keys.Settings{CacheTTL: -1}, []string{"api_keys.cache_ttl: must not be negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p []string
			tt.s.Check(problem.Into(&p, "api_keys"), getenv, now)
			if len(p) != len(tt.want) {
				t.Fatalf("problems = %q, want %q", p, tt.want)
			}
			for i := range p {
				if !strings.HasPrefix(p[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want %q…", i, p[i], tt.want[i])
				}
			}
		})
	}
}

// BenchmarkKeyVerify is a key's check on a warm replica: a store key
// already cached, the request's added cost.
func BenchmarkKeyVerify(b *testing.B) {
	st := keys.NewMemory(nil)
	m := keys.Manager{Secret: secret, Store: st}
	key, _, _ := m.Create(context.Background(), keys.Record{Tenant: "t1"}, time.Hour, "bench")
	v, _ := keys.NewVerifier(secret, keys.Options{Store: st, CacheTTL: time.Hour})
	a := keys.Authenticator{Keys: v}
	h := "Bearer " + key
	ctx := context.Background()
	if _, err := a.Verify(ctx, h); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Verify(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
}

// listing is a counting store that lists its ids (keys.IDLister).
type listing struct {
	*counting
	mem   *keys.Memory
	lists atomic.Int64
}

func (l *listing) IDs(ctx context.Context) ([]string, error) {
	l.lists.Add(1)
	return l.mem.IDs(ctx)
}

// TestKeyFloodOfMadeUpIDs: a flood of made-up ids, each new (so no
// negative cache helps), costs no store read per attempt: the verifier
// reads the store's list of ids once per CacheTTL and only a bounded few
// reads a second for ids it did not list. A real key verifies all along,
// and a key made on another replica after the list was read is found at
// once while the flood leaves reads, else within CacheTTL. (Before:
// one store read per made-up id.)
func TestKeyFloodOfMadeUpIDs(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	mem := keys.NewMemory(c.now)
	st := &listing{counting: &counting{Store: mem}, mem: mem}
	m := keys.Manager{Secret: secret, Store: mem, Now: c.now}
	real, _, _ := m.Create(context.Background(), keys.Record{Tenant: "t1"}, time.Hour, "test")
	v, _ := keys.NewVerifier(secret, keys.Options{Store: st, Now: c.now})
	if _, err := v.Verify(context.Background(), real); err != nil {
		t.Fatal(err)
	}
	before := st.gets.Load()
	for i := range 5000 {
		k, _ := newKey(t, c.now(), keys.Record{}) // a new id each time
		if _, err := v.Verify(context.Background(), k); err == nil {
			t.Fatal("a made-up key was accepted")
		}
		if i%1000 == 0 {
			if _, err := v.Verify(context.Background(), real); err != nil {
				t.Fatalf("the real key during the flood: %v", err)
			}
		}
	}
	if n := st.gets.Load() - before; n > keys.DefaultUnlistedReads+1 {
		t.Fatalf("%d store reads for 5000 made-up ids, want at most the %d unlisted reads a second", n, keys.DefaultUnlistedReads)
	}
	// A key made elsewhere while the flood has spent this second's reads
	// is found once the list is read again (within CacheTTL).
	late, _, _ := m.Create(context.Background(), keys.Record{Tenant: "t1"}, time.Hour, "test")
	if _, err := v.Verify(context.Background(), late); err == nil {
		c.add(keys.DefaultCacheTTL) // a read was left: found at once
	} else {
		c.add(keys.DefaultCacheTTL)
		if _, err := v.Verify(context.Background(), late); err != nil {
			t.Fatalf("a new key is still refused after the list's TTL: %v", err)
		}
	}
	// After a quiet second a new key is found at once.
	c.add(time.Second)
	fresh, _, _ := m.Create(context.Background(), keys.Record{Tenant: "t1"}, time.Hour, "test")
	if _, err := v.Verify(context.Background(), fresh); err != nil {
		t.Fatalf("a new key with reads to spare: %v", err)
	}
	if n := st.lists.Load(); n > 4 {
		t.Fatalf("the list was read %d times", n)
	}
}
