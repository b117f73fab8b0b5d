package devissuer_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/llmgw/gateway/scripts/devissuer"
)

func start(t *testing.T, opts devissuer.Options) (*devissuer.Issuer, *httptest.Server) {
	t.Helper()
	iss, err := devissuer.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(iss.Handler())
	t.Cleanup(srv.Close)
	iss.SetIssuer(srv.URL)
	return iss, srv
}

func get(t *testing.T, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// verify checks tok against the server's published JWKS with keyfunc, an
// implementation independent of the gateway's auth package.
func verify(t *testing.T, srv *httptest.Server, tok string) *jwt.Token {
	t.Helper()
	_, body := get(t, srv.URL+"/jwks.json")
	kf, err := keyfunc.NewJWKSetJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := jwt.Parse(tok, kf.Keyfunc, jwt.WithValidMethods([]string{"RS256", "ES256"}), jwt.WithExpirationRequired())
	if err != nil {
		t.Fatalf("minted token does not verify: %v", err)
	}
	return parsed
}

func TestDiscoveryAndJWKS(t *testing.T) {
	t.Parallel()
	iss, srv := start(t, devissuer.Options{MaxAge: 42 * time.Second})
	_, body := get(t, srv.URL+"/.well-known/openid-configuration")
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Issuer != srv.URL || doc.JWKSURI != srv.URL+"/jwks.json" {
		t.Fatalf("discovery = %s", body)
	}
	resp, body := get(t, doc.JWKSURI)
	if cc := resp.Header.Get("Cache-Control"); cc != "max-age=42" {
		t.Fatalf("Cache-Control = %q", cc)
	}
	var set struct {
		Keys []struct{ Kty, Alg, Kid, Use, D string }
	}
	if err := json.Unmarshal(body, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 {
		t.Fatalf("JWKS has %d keys, want 2: %s", len(set.Keys), body)
	}
	for _, k := range set.Keys {
		if k.Kid == "" || k.Use != "sig" || k.D != "" || (k.Alg != "RS256" && k.Alg != "ES256") {
			t.Fatalf("bad published key %+v", k)
		}
	}
	if n := iss.JWKSRequests(); n != 1 {
		t.Fatalf("JWKSRequests = %d, want 1", n)
	}
}

func TestMintVerifiesAndRotate(t *testing.T) {
	t.Parallel()
	iss, srv := start(t, devissuer.Options{})
	for _, alg := range []string{"RS256", "ES256"} {
		tok, err := iss.Mint(devissuer.Claims{Tenant: "t1", Subject: "alice", Audience: []string{"a", "b"}, Alg: alg})
		if err != nil {
			t.Fatal(err)
		}
		claims := verify(t, srv, tok).Claims.(jwt.MapClaims)
		if claims["tid"] != "t1" || claims["sub"] != "alice" || claims["iss"] != srv.URL {
			t.Fatalf("%s claims = %v", alg, claims)
		}
	}
	before, _ := iss.Mint(devissuer.Claims{Tenant: "t1"})
	if err := iss.Rotate(); err != nil {
		t.Fatal(err)
	}
	after, _ := iss.Mint(devissuer.Claims{Tenant: "t1"})
	kidBefore := verify(t, srv, before).Header["kid"]
	kidAfter := verify(t, srv, after).Header["kid"]
	if kidBefore == kidAfter {
		t.Fatalf("Rotate kept kid %v", kidAfter)
	}
}

func TestMintKnobs(t *testing.T) {
	t.Parallel()
	iss, _ := start(t, devissuer.Options{})
	nbf := time.Now().Add(time.Hour).Truncate(time.Second)
	tok, err := iss.Mint(devissuer.Claims{
		Tenant: "t1", TenantClaim: "org", NoExp: true, NotBefore: nbf, Kid: "k", Issuer: "https://x",
		Extra: map[string]any{"scope": "chat"},
	})
	if err != nil {
		t.Fatal(err)
	}
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	c := parsed.Claims.(jwt.MapClaims)
	if _, hasExp := c["exp"]; hasExp || c["org"] != "t1" || c["iss"] != "https://x" || c["scope"] != "chat" ||
		c["nbf"] != float64(nbf.Unix()) || parsed.Header["kid"] != "k" {
		t.Fatalf("claims %v header %v", c, parsed.Header)
	}
	if _, err := iss.Mint(devissuer.Claims{Alg: "XX1"}); err == nil {
		t.Fatal("unknown alg accepted")
	}
	if !strings.Contains(string(iss.PublicKeyPEM()), "BEGIN PUBLIC KEY") {
		t.Fatal("PublicKeyPEM is not PEM")
	}
}

func TestMintEndpoint(t *testing.T) {
	t.Parallel()
	iss, srv := start(t, devissuer.Options{})
	q := url.Values{"tenant": {"t9"}, "sub": {"bob"}, "aud": {"x,llm-gateway"}, "ttl": {"5m"}, "alg": {"ES256"}}
	resp, body := get(t, srv.URL+"/mint?"+q.Encode())
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	c := verify(t, srv, strings.TrimSpace(string(body))).Claims.(jwt.MapClaims)
	exp, _ := c.GetExpirationTime()
	if c["tid"] != "t9" || exp == nil || time.Until(exp.Time) > 6*time.Minute {
		t.Fatalf("claims %v", c)
	}
	for _, bad := range []string{"tenant=t", "aud=a", "tenant=t&aud=a&ttl=soon", "tenant=t&aud=a&alg=none"} {
		if resp, body := get(t, srv.URL+"/mint?"+bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("/mint?%s: status %d %s", bad, resp.StatusCode, body)
		}
	}
	// A non-loopback peer is refused.
	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/mint?tenant=t&aud=a", nil)
	req.RemoteAddr = "203.0.113.7:4000"
	rec := httptest.NewRecorder()
	iss.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Fatalf("non-loopback /mint: status %d", rec.Code)
	}
}
