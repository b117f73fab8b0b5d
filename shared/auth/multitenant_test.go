package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/llmgw/gateway/scripts/devissuer"
	"github.com/llmgw/gateway/shared/auth"
)

// Two directories of one multi-tenant issuer, shaped like Entra's ids.
const (
	dirA = "72f988bf-86f1-41af-91ab-2d7cd011db47"
	dirB = "f8cdef31-a31e-4b4a-93e4-5f571e91255a"
)

// templateVerifier accepts every directory of ti: its issuer is
// {srv}/{tenantid}/v2.0, as in Entra's "organizations" discovery document,
// and the keys are the issuer's common JWKS.
func templateVerifier(t *testing.T, ti *testIssuer, edit func(*auth.Config)) *auth.Verifier {
	t.Helper()
	return newVerifier(t, ti, func(c *auth.Config) {
		c.Issuer = ti.url + "/" + auth.TenantPlaceholder + "/v2.0"
		if edit != nil {
			edit(c)
		}
	})
}

// dirIssuer is directory tid's own issuer under ti.
func dirIssuer(ti *testIssuer, tid string) string { return ti.url + "/" + tid + "/v2.0" }

func TestVerifyIssuerTemplate(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	v := templateVerifier(t, ti, nil)
	// tok mints a token whose tid and iss are given independently, the way
	// a forger would combine them (every token is signed by the issuer's
	// common key, as Entra's are).
	tok := func(tid any, iss any) string {
		return ti.mint(t, devissuer.Claims{Subject: "alice", Extra: map[string]any{"tid": tid, "iss": iss}})
	}
	for _, tc := range []struct {
		name string
		tok  string
		want string // "" = accepted as tenant dirA or dirB
	}{
		{"directory A, its own issuer", tok(dirA, dirIssuer(ti, dirA)), ""},
		{"directory B, its own issuer", tok(dirB, dirIssuer(ti, dirB)), ""},
		{"tid of A, iss of B", tok(dirA, dirIssuer(ti, dirB)), "issuer not accepted"},
		{"tid of B, iss of A", tok(dirB, dirIssuer(ti, dirA)), "issuer not accepted"},
		{"iss with a suffix after the template", tok(dirA, dirIssuer(ti, dirA)+"/x"), "issuer not accepted"},
		{"iss with A as a prefix of the segment", tok(dirA, dirIssuer(ti, dirA+"x")), "issuer not accepted"},
		{"iss of another host", tok(dirA, "https://evil.example/"+dirA+"/v2.0"), "issuer not accepted"},
		{"iss in another case", tok(dirA, dirIssuer(ti, strings.ToUpper(dirA))), "issuer not accepted"},
		{"iss is the template itself", tok(dirA, ti.url+"/{tenantid}/v2.0"), "issuer not accepted"},
		{"tid is the placeholder, iss the template", tok("{tenantid}", ti.url+"/{tenantid}/v2.0"), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"tid with a slash", tok(dirA+"/v2.0", dirIssuer(ti, dirA+"/v2.0")), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"tid climbing a segment", tok("..", dirIssuer(ti, "..")), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"tid with dots inside", tok("a..b", dirIssuer(ti, "a..b")), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"tid a single dot", tok(".", dirIssuer(ti, ".")), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"tid percent-encoded dots", tok("%2e%2e", dirIssuer(ti, "%2e%2e")), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"tid with a query", tok(dirA+"?x", dirIssuer(ti, dirA+"?x")), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"tid with a space", tok(" "+dirA, dirIssuer(ti, " "+dirA)), `tenant claim "tid" is not a directory id that can name an issuer`},
		{"missing tid", ti.mint(t, devissuer.Claims{Issuer: dirIssuer(ti, dirA)}), `tenant claim "tid" missing`},
		{"empty tid", tok("", dirIssuer(ti, "")), `tenant claim "tid" missing`},
		{"tid not a string", tok(42, dirIssuer(ti, "42")), `tenant claim "tid" is not a string`},
		{"iss null", tok(dirA, nil), `token is missing required claim "iss"`},
		{"iss not a string", tok(dirA, 7), `token claim "iss" has an invalid type`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := v.Verify(context.Background(), bearer(tc.tok))
			if tc.want == "" {
				if err != nil || (p.Tenant != dirA && p.Tenant != dirB) || p.Subject != "alice" {
					t.Fatalf("Verify = %+v, %v; want accepted", p, err)
				}
				return
			}
			if !errors.Is(err, auth.ErrInvalidToken) || err.Error() != tc.want {
				t.Fatalf("Verify = %+v, %v; want 401 %q", p, err, tc.want)
			}
		})
	}
	t.Run("the issuer check is what refuses: jwt's own sentinel", func(t *testing.T) {
		_, err := v.Verify(context.Background(), bearer(tok(dirA, dirIssuer(ti, dirB))))
		if !errors.Is(err, jwt.ErrTokenInvalidIssuer) {
			t.Fatalf("err %v does not wrap jwt.ErrTokenInvalidIssuer", err)
		}
	})
	t.Run("a fixed issuer still refuses every other directory", func(t *testing.T) {
		fixed := newVerifier(t, ti, func(c *auth.Config) { c.Issuer = dirIssuer(ti, dirA) })
		if _, err := fixed.Verify(context.Background(), bearer(tok(dirA, dirIssuer(ti, dirA)))); err != nil {
			t.Fatalf("own directory: %v", err)
		}
		if _, err := fixed.Verify(context.Background(), bearer(tok(dirB, dirIssuer(ti, dirB)))); err == nil || err.Error() != "issuer not accepted" {
			t.Fatalf("other directory: %v", err)
		}
	})
}

func TestIssuerTemplateConfig(t *testing.T) {
	t.Parallel()
	const jwks = "https://login.example/common/discovery/v2.0/keys"
	for _, tc := range []struct {
		name, issuer, jwks, want string
	}{
		{"Entra organizations", "https://login.microsoftonline.com/{tenantid}/v2.0", jwks, ""},
		{"template without a JWKS URL", "https://login.microsoftonline.com/{tenantid}/v2.0", "", "jwks_url: required when issuer contains {tenantid}"},
		{"placeholder twice", "https://login.example/{tenantid}/{tenantid}", jwks, "names {tenantid} 2 times"},
		{"placeholder in the host", "https://{tenantid}.login.example/v2.0", jwks, "must be in the URL's path"},
		{"placeholder in the query", "https://login.example/v2.0?t={tenantid}", jwks, "must be in the URL's path"},
		{"placeholder in user info", "https://{tenantid}@login.example/v2.0", jwks, "must be in the URL's path"},
		{"not a URL", "login.example/{tenantid}", jwks, "is not an absolute http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := auth.New(auth.Config{Issuer: tc.issuer, JWKSURL: tc.jwks, Audiences: []string{aud}}, nil, nil)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestVerifyRequiredRolesAndScopes(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	both := newVerifier(t, ti, func(c *auth.Config) {
		c.RequiredRoles = []string{"Gateway.Invoke"}
		c.RequiredScopes = []string{"access_as_user"}
	})
	scopesOnly := newVerifier(t, ti, func(c *auth.Config) { c.RequiredScopes = []string{"access_as_user", "gateway.all"} })
	none := newVerifier(t, ti, nil)
	tok := func(extra map[string]any) string {
		return ti.mint(t, devissuer.Claims{Tenant: "t1", Subject: "alice", Extra: extra})
	}
	for _, tc := range []struct {
		name string
		v    *auth.Verifier
		tok  string
		ok   bool
	}{
		{"app role", both, tok(map[string]any{"roles": []any{"Other", "Gateway.Invoke"}}), true},
		{"delegated scope among others", both, tok(map[string]any{"scp": "openid access_as_user profile"}), true},
		{"role given as one string", both, tok(map[string]any{"roles": "Gateway.Invoke"}), true},
		{"scope given as a list", both, tok(map[string]any{"scp": []any{"access_as_user"}}), true},
		{"another role", both, tok(map[string]any{"roles": []any{"Gateway.Read"}}), false},
		{"a scope that only starts like one", both, tok(map[string]any{"scp": "access_as_user_admin"}), false},
		{"roles are not split on spaces", both, tok(map[string]any{"roles": "Other Gateway.Invoke"}), false},
		{"neither claim", both, tok(nil), false},
		{"role name in scp", both, tok(map[string]any{"scp": "Gateway.Invoke"}), false},
		{"scope name in roles, only scopes required", scopesOnly, tok(map[string]any{"roles": []any{"access_as_user"}}), false},
		{"second listed scope", scopesOnly, tok(map[string]any{"scp": "gateway.all"}), true},
		{"nothing required", none, tok(nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.v.Verify(context.Background(), bearer(tc.tok))
			if tc.ok {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, auth.ErrInsufficientPermissions) || errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("err = %v, want ErrInsufficientPermissions (403), not ErrInvalidToken", err)
			}
			// Refused tokens are not cached: the second answer is the same.
			if _, err2 := tc.v.Verify(context.Background(), bearer(tc.tok)); !errors.Is(err2, auth.ErrInsufficientPermissions) {
				t.Fatalf("second Verify = %v", err2)
			}
		})
	}
	for _, tc := range []struct {
		name string
		cfg  auth.Config
		want string
	}{
		{"empty role", auth.Config{RequiredRoles: []string{""}}, "required_roles[0]: must not be empty"},
		{"scope with a space", auth.Config{RequiredScopes: []string{"a b"}}, "required_scopes[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Issuer, tc.cfg.JWKSURL, tc.cfg.Audiences = ti.IssuerURL(), ti.jwksURL(), []string{aud}
			if _, err := auth.New(tc.cfg, nil, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTenantGUIDCase: an Entra directory ID is a GUID, whose case carries
// no meaning; the principal's tenant is its lower-case spelling, whatever
// case the token writes it in, and any other tenant id is kept as it is.
func TestTenantGUIDCase(t *testing.T) {
	t.Parallel()
	ti := newTestIssuer(t, devissuer.Options{})
	v := templateVerifier(t, ti, nil)
	upper := strings.ToUpper(dirA)
	for _, tc := range []struct{ name, tid, want string }{
		{"lower-case GUID", dirA, dirA},
		{"upper-case GUID", upper, dirA},
		{"mixed-case GUID", dirA[:9] + strings.ToUpper(dirA[9:]), dirA},
		{"not a GUID keeps its case", "Contoso", "Contoso"},
		{"GUID-length but not hex keeps its case", "ZZZZZZZZ-86f1-41af-91ab-2d7cd011db47", "ZZZZZZZZ-86f1-41af-91ab-2d7cd011db47"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok := ti.mint(t, devissuer.Claims{Subject: "alice", Extra: map[string]any{"tid": tc.tid, "iss": dirIssuer(ti, tc.tid)}})
			p, err := v.Verify(context.Background(), bearer(tok))
			if err != nil || p.Tenant != tc.want {
				t.Fatalf("Verify = %+v, %v; want tenant %q", p, err, tc.want)
			}
		})
	}
	for in, want := range map[string]string{"": "", upper: dirA, dirA + "x": dirA + "x", "a-b": "a-b"} {
		if got := auth.CanonicalTenant(in); got != want {
			t.Errorf("CanonicalTenant(%q) = %q, want %q", in, got, want)
		}
	}
}
