package rediskeys_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/llmgw/gateway/shared/stores/rediskeys"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// TestKeyStore: two replicas' verifiers on one redis-server and on one
// cluster: a key made through one works on both, a revoked key is
// refused by both once their cache's bound has passed, the store holds
// digests only, and a digest read out of it is no credential.
func TestKeyStore(t *testing.T) {
	t.Parallel()
	for _, k := range redistest.Kinds(t) {
		t.Run(k.Name, func(t *testing.T) {
			ctx := context.Background()
			replica := func() (*rediskeys.Store, *keys.Verifier) {
				c, err := redisclient.New(redisclient.ClientOptions{URL: k.URL, Cluster: k.Cluster, Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				st := rediskeys.New(c, "t:", nil)
				v, err := keys.NewVerifier(secret, keys.Options{Store: st, CacheTTL: 200 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				return st, v
			}
			st, a := replica()
			_, b := replica()
			m := keys.Manager{Secret: secret, Store: st}
			key, rec, err := m.Create(ctx, keys.Record{Tenant: "t1", Models: []string{"m"}}, time.Hour, "test")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []*keys.Verifier{a, b} {
				if p, err := v.Verify(ctx, key); err != nil || p.Tenant != "t1" || !p.Models.Allows("m") {
					t.Fatalf("%+v, %v", p, err)
				}
			}
			list, err := st.List(ctx)
			if err != nil || len(list) != 1 || list[0].ID != rec.ID {
				t.Fatalf("List = %+v, %v", list, err)
			}
			secretPart := key[len(keys.Prefix)+9:]
			if got := list[0].Digest; strings.Contains(got, secretPart) || got == key {
				t.Fatal("the store holds the secret")
			}
			if _, err := a.Verify(ctx, list[0].Digest); err == nil {
				t.Fatal("a digest read from the store was accepted")
			}
			if err := m.Revoke(ctx, rec.ID, "test"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(250 * time.Millisecond)
			for _, v := range []*keys.Verifier{a, b} {
				if _, err := v.Verify(ctx, key); err == nil {
					t.Fatal("a revoked key was served past the bound")
				}
			}
			if _, err := st.Get(ctx, rec.ID); !errors.Is(err, keys.ErrNotFound) {
				t.Fatalf("Get after revoke: %v", err)
			}
		})
	}
}
