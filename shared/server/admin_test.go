package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/keys"
)

// operatorJWT stands for the JWT verifier: "Bearer admin" is an operator
// carrying the admin role, "Bearer <tenant>" a tenant's caller without it.
type operatorJWT struct{}

func (operatorJWT) Verify(_ context.Context, authorization string) (auth.Principal, error) {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || tok == "" {
		return auth.Principal{}, auth.ErrInvalidToken
	}
	if tok == "admin" {
		return auth.Principal{Tenant: "ops", Subject: "operator", Roles: auth.NewRoleSet("Reader", "Gateway.Admin")}, nil
	}
	return auth.Principal{Tenant: tok, Subject: "s"}, nil
}

// adminGateway serves the admin route on a memory store of keys, its
// audit lines in audit.
func adminGateway(t *testing.T, role string) (g *testGateway, audit *lockedBuffer) {
	t.Helper()
	secret := []byte(strings.Repeat("s", 32))
	store := keys.NewMemory(nil)
	v, err := keys.NewVerifier(secret, keys.Options{Store: store, CacheTTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	audit = &lockedBuffer{}
	g = newTestGatewayWith(t, func(d *Deps) {
		d.Auth = keys.Authenticator{Keys: v, JWT: operatorJWT{}}
		d.KeyAdmin = keys.Manager{Secret: secret, Store: store, Log: slog.New(slog.NewJSONHandler(audit, nil))}
		d.AdminRole = role
	}, http.HandlerFunc(sseBackend))
	return g, audit
}

// TestAdminKeys: an operator carrying the admin role creates, lists,
// rotates and revokes keys; the key answered once works on the API, the
// list never shows a secret or a digest, each change is one audit line
// naming the public id only, and neither a tenant's token nor a gateway
// key manages keys.
func TestAdminKeys(t *testing.T) {
	t.Parallel()
	g, audit := adminGateway(t, "Gateway.Admin")
	var made keyView
	resp, out := g.call(t, "POST", "/admin/keys", "admin", `{"tenant":"t1","user":"u1","models":["m"],"ttl":"1h"}`)
	if resp.StatusCode != 200 || json.Unmarshal(out, &made) != nil || !strings.HasPrefix(made.Key, keys.Prefix) || made.Tenant != "t1" {
		t.Fatalf("create: %d %s", resp.StatusCode, out)
	}
	if resp, out := g.call(t, "GET", "/v1/models", made.Key, ""); resp.StatusCode != 200 || !strings.Contains(string(out), `"m"`) {
		t.Fatalf("the new key on the API: %d %s", resp.StatusCode, out)
	}
	resp, out = g.call(t, "GET", "/admin/keys", "admin", "")
	if resp.StatusCode != 200 || !strings.Contains(string(out), made.ID) || strings.Contains(string(out), made.Key[len(keys.Prefix)+9:]) || strings.Contains(string(out), "digest") {
		t.Fatalf("list: %d %s", resp.StatusCode, out)
	}

	refused := []struct {
		name, method, path, cred, body string
		status                         int
		code                           string
	}{
		{"a gateway key", "GET", "/admin/keys", made.Key, "", 403, "insufficient_permissions"},
		{"a gateway key creating", "POST", "/admin/keys", made.Key, `{"tenant":"t1"}`, 403, "insufficient_permissions"},
		{"a tenant's token", "DELETE", "/admin/keys/" + made.ID, "t1", "", 403, "insufficient_permissions"},
		{"no credential", "GET", "/admin/keys", "", "", 401, "invalid_token"},
		{"a wrong key", "GET", "/admin/keys", keys.Prefix + made.ID + "-" + strings.Repeat("A", 43), "", 401, "invalid_token"},
		{"an unknown tenant", "POST", "/admin/keys", "admin", `{"tenant":"t9"}`, 400, "invalid_value"},
		{"a widening model", "POST", "/admin/keys", "admin", `{"tenant":"t1","models":["other"]}`, 400, "invalid_value"},
		{"a life over max_ttl", "POST", "/admin/keys", "admin", `{"tenant":"t1","ttl":"100000h"}`, 400, "invalid_value"},
		{"an unknown field", "POST", "/admin/keys", "admin", `{"tenant":"t1","digest":"x"}`, 400, "invalid_json"},
		{"an unknown id", "DELETE", "/admin/keys/abcdefgh", "admin", "", 404, "not_found"},
		{"a malformed id", "POST", "/admin/keys/x/rotate", "admin", "", 404, "not_found"},
		{"another verb", "POST", "/admin/keys/" + made.ID + "/extend", "admin", "", 404, "unknown_url"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			resp, out := g.call(t, c.method, c.path, c.cred, c.body)
			var e errorBody
			if resp.StatusCode != c.status || json.Unmarshal(out, &e) != nil || e.Error.Code == nil || *e.Error.Code != c.code {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, out, c.status, c.code)
			}
		})
	}

	var next keyView
	resp, out = g.call(t, "POST", "/admin/keys/"+made.ID+"/rotate", "admin", `{"overlap":"0s"}`)
	if resp.StatusCode != 200 || json.Unmarshal(out, &next) != nil || next.ID == made.ID || next.User != "u1" {
		t.Fatalf("rotate: %d %s", resp.StatusCode, out)
	}
	if resp, out := g.call(t, "DELETE", "/admin/keys/"+next.ID, "admin", ""); resp.StatusCode != 200 {
		t.Fatalf("revoke: %d %s", resp.StatusCode, out)
	}
	if resp, _ := g.call(t, "GET", "/v1/models", next.Key, ""); resp.StatusCode != 401 {
		t.Fatalf("the revoked key: %d", resp.StatusCode)
	}
	lines := audit.text()
	for _, want := range []string{`"msg":"api key created"`, `"msg":"api key rotated"`, `"msg":"api key revoked"`, `"by":"operator"`, made.ID, next.ID} {
		if !strings.Contains(lines, want) {
			t.Errorf("audit lacks %s:\n%s", want, lines)
		}
	}
	for _, secret := range []string{made.Key, next.Key} {
		if strings.Contains(lines, secret[len(keys.Prefix)+9:]) || strings.Contains(g.log.text(), secret[len(keys.Prefix)+9:]) {
			t.Errorf("a secret is logged")
		}
	}
}

// TestAdminKeysOff: with no admin role set the admin route does not
// exist, for an operator as for anyone.
func TestAdminKeysOff(t *testing.T) {
	t.Parallel()
	g, _ := adminGateway(t, "")
	for _, p := range []string{"/admin/keys", "/admin/keys/abcdefgh/rotate"} {
		resp, out := g.call(t, "POST", p, "admin", `{}`)
		var e errorBody
		if resp.StatusCode != 404 || json.Unmarshal(out, &e) != nil || e.Error.Code == nil || *e.Error.Code != "unknown_url" {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, out)
		}
	}
}
