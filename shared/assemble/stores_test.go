package assemble

import (
	"reflect"
	"slices"
	"testing"

	"github.com/llmgw/gateway/shared/stores"
)

// TestStoreAliases: the limiter's store settings of old are aliases of
// the store section's: a file written either way assembles the same
// store and limiter, and the old way lists each key it used as
// deprecated (the binary logs those lines at start).
func TestStoreAliases(t *testing.T) {
	e := env(map[string]string{"R": "redis://127.0.0.1:1", "P": "pw"})
	old, err := Parse([]byte(minimal+"limiter: {store: redis, redis_url_env: R, redis_password_env: P, key_prefix: k:, dial_timeout: 2s, timeout: 70ms}\n"), e)
	if err != nil {
		t.Fatal(err)
	}
	now, err := Parse([]byte(minimal+"store: {backend: redis, redis_url_env: R, redis_password_env: P, key_prefix: k:, dial_timeout: 2s}\nlimiter: {timeout: 70ms}\n"), e)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(old.Store, now.Store) {
		t.Errorf("store: old keys give %+v, new %+v", old.Store, now.Store)
	}
	if a, b := Limiter(old), Limiter(now); !reflect.DeepEqual(a, b) {
		t.Errorf("limiter: old keys give %+v, new %+v", a, b)
	}
	sc := Stores(now)
	if sc.Backend != stores.Redis || sc.KeyPrefix != "k:" || sc.DialTimeout.Seconds() != 2 || sc.TakeTimeout.Milliseconds() != 70 || sc.Budgets {
		t.Errorf("stores config %+v", sc)
	}
	want := []string{
		"limiter.store is deprecated: write store.backend",
		"limiter.redis_url_env is deprecated: write store.redis_url_env",
		"limiter.redis_password_env is deprecated: write store.redis_password_env",
		"limiter.key_prefix is deprecated: write store.key_prefix",
		"limiter.dial_timeout is deprecated: write store.dial_timeout",
	}
	if !slices.Equal(old.Deprecated, want) {
		t.Errorf("deprecated: got %q, want %q", old.Deprecated, want)
	}
	if len(now.Deprecated) != 0 {
		t.Errorf("the store section is not deprecated: %q", now.Deprecated)
	}
}
