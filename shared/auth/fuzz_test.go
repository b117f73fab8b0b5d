package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/shared/auth"
)

// FuzzVerify feeds arbitrary Authorization headers to a Verifier with loaded
// keys. It must never panic, and never accept anything but the valid tokens
// minted here (the seeds include them, so mutations start next to success).
func FuzzVerify(f *testing.F) {
	ti := newTestIssuer(f, devissuer.Options{})
	v := newVerifier(f, ti, nil)
	valid := map[string]bool{}
	for _, alg := range []string{"RS256", "ES256"} {
		tok := ti.mint(f, devissuer.Claims{Tenant: "t1", Subject: "s", Alg: alg})
		valid[tok] = true
		if _, err := v.Verify(context.Background(), bearer(tok)); err != nil {
			f.Fatal(err)
		}
		f.Add(bearer(tok))
		f.Add(bearer(tok[:len(tok)-2]))
		f.Add(bearer(strings.Replace(tok, ".", "..", 1)))
	}
	for _, alg := range []string{"none", "HS256"} {
		f.Add(bearer(ti.mint(f, devissuer.Claims{Tenant: "t1", Alg: alg})))
	}
	f.Add(bearer(ti.mint(f, devissuer.Claims{Tenant: "t1", Kid: "zzz"})))
	f.Add("")
	f.Add("Bearer ")
	f.Add("Bearer a.b.c")
	f.Add("bearer eyJhbGciOiJub25lIn0.e30.")
	f.Add("Basic Zm9vOmJhcg==")
	f.Fuzz(func(t *testing.T, header string) {
		p, err := v.Verify(context.Background(), header)
		if err == nil {
			tok := strings.Trim(header[len("Bearer "):], " \t")
			if !valid[tok] {
				t.Fatalf("accepted a header that is not a minted token: %q -> %+v", header, p)
			}
			return
		}
		if !errors.Is(err, auth.ErrInvalidToken) && !errors.Is(err, auth.ErrKeysUnavailable) {
			t.Fatalf("error %v is neither ErrInvalidToken nor ErrKeysUnavailable", err)
		}
		if len(header) > 16 && strings.Contains(err.Error(), header) {
			t.Fatalf("error %q echoes the header", err)
		}
	})
}
