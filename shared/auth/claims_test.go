package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/llmgw/gateway/shared/auth"
)

// rawIssuer signs whatever header and claims a test writes (the devissuer
// always sets iss and aud and owns the header) and serves its JWKS.
type rawIssuer struct {
	key *rsa.PrivateKey
	srv *httptest.Server
}

const rawIss = "https://raw-issuer.example"

func newRawIssuer(t *testing.T) *rawIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks := fmt.Sprintf(`{"keys":[{"kty":"RSA","kid":"raw-1","use":"sig","alg":"RS256","n":%q,"e":%q}]}`,
		b64(key.N.Bytes()), b64(big.NewInt(int64(key.E)).Bytes()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(jwks))
	}))
	t.Cleanup(srv.Close)
	return &rawIssuer{key: key, srv: srv}
}

// sign signs claims with RS256 under kid raw-1, header's entries added to
// the protected header (a nil value is written as JSON null).
func (ri *rawIssuer) sign(t *testing.T, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = "raw-1"
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(ri.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validClaims returns a valid claim set with edit applied; a nil value in edit
// deletes the claim.
func validClaims(edit map[string]any) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"iss": rawIss, "aud": aud, "tid": "t1", "sub": "alice", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range edit {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

// TestVerifyReasons: every refusal names its cause, and a missing claim is
// named for what it is (the library's error only says "required claim
// missing"), with real signatures so that only the judged part differs.
func TestVerifyReasons(t *testing.T) {
	t.Parallel()
	ri := newRawIssuer(t)
	v, err := auth.New(auth.Config{Issuer: rawIss, JWKSURL: ri.srv.URL + "/jwks.json", Audiences: []string{aud}, Leeway: 30 * time.Second}, ri.srv.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cases := []struct {
		name   string
		header map[string]any
		claims map[string]any
		want   string // "" = accepted
		is     error  // errors.Is must find it too, when set
	}{
		{name: "valid", want: ""},
		{name: "unknown non-critical header is ignored", header: map[string]any{"x-note": "hi", "typ": "JWT"}, want: ""},
		{name: "crit naming an unknown extension", header: map[string]any{"crit": []string{"x-policy"}, "x-policy": "strict"},
			want: `token has critical header parameters ("crit") the gateway does not understand`},
		{name: "crit b64 (RFC 7797)", header: map[string]any{"crit": []string{"b64"}, "b64": true},
			want: `token has critical header parameters ("crit") the gateway does not understand`},
		{name: "crit empty list (invalid per RFC 7515)", header: map[string]any{"crit": []string{}},
			want: `token has critical header parameters ("crit") the gateway does not understand`},
		{name: "crit null", header: map[string]any{"crit": nil},
			want: `token has critical header parameters ("crit") the gateway does not understand`},
		{name: "crit not a list", header: map[string]any{"crit": "exp"},
			want: `token has critical header parameters ("crit") the gateway does not understand`},
		{name: "missing exp", claims: map[string]any{"exp": nil}, want: `token is missing required claim "exp"`, is: jwt.ErrTokenRequiredClaimMissing},
		{name: "missing aud", claims: map[string]any{"aud": nil}, want: `token is missing required claim "aud"`, is: jwt.ErrTokenRequiredClaimMissing},
		{name: "empty aud", claims: map[string]any{"aud": ""}, want: `token is missing required claim "aud"`, is: jwt.ErrTokenRequiredClaimMissing},
		{name: "empty aud list", claims: map[string]any{"aud": []string{}}, want: `token is missing required claim "aud"`, is: jwt.ErrTokenRequiredClaimMissing},
		{name: "missing iss", claims: map[string]any{"iss": nil}, want: `token is missing required claim "iss"`, is: jwt.ErrTokenRequiredClaimMissing},
		{name: "missing aud and iss names aud first", claims: map[string]any{"aud": nil, "iss": nil}, want: `token is missing required claim "aud"`},
		{name: "bad aud list and missing iss", claims: map[string]any{"aud": []any{7}, "iss": nil}, want: `token is missing required claim "iss"`},
		{name: "iat of the wrong type", claims: map[string]any{"iat": "now"}, want: `token claim "iat" has an invalid type`, is: jwt.ErrInvalidType},
		{name: "missing tenant", claims: map[string]any{"tid": nil}, want: `tenant claim "tid" missing`},
		{name: "wrong aud", claims: map[string]any{"aud": []string{"x", "y"}}, want: "audience not accepted", is: jwt.ErrTokenInvalidAudience},
		{name: "wrong iss", claims: map[string]any{"iss": "https://evil.example"}, want: "issuer not accepted", is: jwt.ErrTokenInvalidIssuer},
		{name: "expired", claims: map[string]any{"exp": now.Add(-time.Hour).Unix()}, want: "token is expired", is: jwt.ErrTokenExpired},
		{name: "expired within leeway", claims: map[string]any{"exp": now.Add(-10 * time.Second).Unix()}, want: ""},
		{name: "not yet valid", claims: map[string]any{"nbf": now.Add(time.Hour).Unix()}, want: "token is not valid yet", is: jwt.ErrTokenNotValidYet},
		{name: "aud of the wrong type", claims: map[string]any{"aud": 7}, want: `token claim "aud" has an invalid type`},
		{name: "aud list of the wrong type", claims: map[string]any{"aud": []any{aud, 7}}, want: `token claim "aud" has an invalid type`, is: jwt.ErrInvalidType},
		{name: "iss of the wrong type", claims: map[string]any{"iss": true}, want: `token claim "iss" has an invalid type`, is: jwt.ErrInvalidType},
		{name: "nbf of the wrong type", claims: map[string]any{"nbf": "soon"}, want: `token claim "nbf" has an invalid type`, is: jwt.ErrInvalidType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tok := ri.sign(t, tc.header, validClaims(tc.claims))
			p, err := v.Verify(context.Background(), bearer(tok))
			if tc.want == "" {
				if err != nil || p.Tenant != "t1" {
					t.Fatalf("Verify = %+v, %v; want tenant t1", p, err)
				}
				return
			}
			if !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("err = %v, want ErrInvalidToken", err)
			}
			if err.Error() != tc.want {
				t.Fatalf("message = %q, want %q", err.Error(), tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tc.is)
			}
		})
	}
}

// TestCritRefusedAfterCache: a token with "crit" is never cached, so the
// second try is refused too.
func TestCritRefusedAfterCache(t *testing.T) {
	t.Parallel()
	ri := newRawIssuer(t)
	v, err := auth.New(auth.Config{Issuer: rawIss, JWKSURL: ri.srv.URL + "/jwks.json", Audiences: []string{aud}}, ri.srv.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := ri.sign(t, map[string]any{"crit": []string{"exp"}}, validClaims(nil))
	for i := range 2 {
		if _, err := v.Verify(context.Background(), bearer(tok)); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("try %d: err = %v, want ErrInvalidToken", i, err)
		}
	}
}

// TestRoleClaim: Config.RoleClaim's values become Principal.Roles, as a
// list (Entra's app roles) or one string; other types and other claims
// give none, and no claim is read when RoleClaim is empty.
func TestRoleClaim(t *testing.T) {
	t.Parallel()
	ri := newRawIssuer(t)
	cfg := auth.Config{Issuer: rawIss, JWKSURL: ri.srv.URL + "/jwks.json", Audiences: []string{aud}, RoleClaim: "roles"}
	cases := []struct {
		name  string
		claim any
		off   bool
		want  []string
	}{
		{"list", []string{"Gateway.Admin", "Reader"}, false, []string{"Gateway.Admin", "Reader"}},
		{"string", "Gateway.Admin", false, []string{"Gateway.Admin"}},
		{"list with a number", []any{1, "Gateway.Admin"}, false, []string{"Gateway.Admin"}},
		{"number", 7, false, nil},
		{"absent", nil, false, nil},
		{"not read", []string{"Gateway.Admin"}, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := cfg
			if c.off {
				cfg.RoleClaim = ""
			}
			v, err := auth.New(cfg, ri.srv.Client(), nil)
			if err != nil {
				t.Fatal(err)
			}
			p, err := v.Verify(context.Background(), bearer(ri.sign(t, nil, validClaims(map[string]any{"roles": c.claim}))))
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(p.Roles.Names()) != fmt.Sprint(c.want) {
				t.Fatalf("roles = %q, want %q", p.Roles.Names(), c.want)
			}
			if got := p.Roles.Has("Gateway.Admin"); got != (len(c.want) > 0) {
				t.Fatalf("HasRole = %v", got)
			}
		})
	}
}
