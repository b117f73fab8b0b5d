package auth_test

import (
	"context"
	"testing"

	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/shared/auth"
)

func BenchmarkVerifyRS256(b *testing.B) { benchmarkVerify(b, "RS256") }
func BenchmarkVerifyES256(b *testing.B) { benchmarkVerify(b, "ES256") }

// benchmarkVerify measures Verify with the keys loaded: "nocache" is the full
// parse + signature check every request pays without the verified-token cache,
// "cached" is the same token seen again.
func benchmarkVerify(b *testing.B, alg string) {
	ti := newTestIssuer(b, devissuer.Options{})
	header := bearer(ti.mint(b, devissuer.Claims{Tenant: "tenant-1", Subject: "user-1", Alg: alg}))
	for _, bc := range []struct {
		name      string
		cacheSize int
	}{{"nocache", -1}, {"cached", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			v := newVerifier(b, ti, func(c *auth.Config) { c.CacheSize = bc.cacheSize })
			ctx := context.Background()
			if _, err := v.Verify(ctx, header); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(ctx, header); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
