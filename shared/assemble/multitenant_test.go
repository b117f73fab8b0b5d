package assemble

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/auth"
)

// TestMultiDirectoryAuth: an issuer template, required roles and scopes and
// tenant names load, and every problem with them is reported by field path,
// the same way auth.New would refuse them.
func TestMultiDirectoryAuth(t *testing.T) {
	const entra = `auth: {issuer: "https://login.microsoftonline.com/{tenantid}/v2.0", jwks_url: "https://login.microsoftonline.com/common/discovery/v2.0/keys", audiences: [gw], required_roles: [Gateway.Invoke], required_scopes: [access_as_user]}`
	withAuth := func(a string) string {
		return strings.Replace(minimal, `auth: {issuer: "https://issuer.example", audiences: [gw]}`, a, 1)
	}
	c, err := Parse([]byte(strings.Replace(withAuth(entra), "{id: t1,", "{id: t1, name: Contoso Ltd,", 1)), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !auth.IsIssuerTemplate(c.Auth.Issuer) || c.Auth.RequiredRoles[0] != "Gateway.Invoke" || c.Auth.RequiredScopes[0] != "access_as_user" || c.Tenants[0].Name != "Contoso Ltd" {
		t.Fatalf("auth %+v, tenant %+v", c.Auth, c.Tenants[0])
	}
	// What Parse accepts, auth.New accepts.
	if _, err := auth.New(auth.Config{Issuer: c.Auth.Issuer, JWKSURL: c.Auth.JWKSURL, Audiences: c.Auth.Audiences,
		RequiredRoles: c.Auth.RequiredRoles, RequiredScopes: c.Auth.RequiredScopes}, nil, nil); err != nil {
		t.Fatalf("auth.New refuses what config accepted: %v", err)
	}

	for _, tc := range []struct {
		name, cfg string
		wants     []string
	}{
		{"template without jwks_url", withAuth(`auth: {issuer: "https://login.example/{tenantid}/v2.0", audiences: [gw]}`),
			[]string{"auth.jwks_url: required when auth.issuer contains {tenantid}"}},
		{"template in the host", withAuth(`auth: {issuer: "https://{tenantid}.login.example/v2.0", jwks_url: "https://login.example/keys", audiences: [gw]}`),
			[]string{"auth.issuer: ", "must be in the URL's path"}},
		{"template twice", withAuth(`auth: {issuer: "https://login.example/{tenantid}/{tenantid}", jwks_url: "https://login.example/keys", audiences: [gw]}`),
			[]string{"auth.issuer: ", "names {tenantid} 2 times"}},
		{"empty role and a scope with a space", withAuth(`auth: {issuer: "https://issuer.example", audiences: [gw], required_roles: [ok, ""], required_scopes: ["a b", ""]}`),
			[]string{"auth.required_roles[1]: must not be empty", `auth.required_scopes[0]: "a b" contains white space`, "auth.required_scopes[1]: is empty"}},
		{"tenant names: duplicate and unprintable", strings.Replace(minimal, "tenants: [{id: t1,", `tenants: [{id: t0, name: acme, models: [m1], requests: 1}, {id: t2, name: "x\ny", models: [m1], requests: 1}, {id: t1, name: acme,`, 1),
			[]string{`tenants[2].name: duplicate tenant name "acme"`, "tenants[1].name: must be printable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.cfg), env(nil))
			for _, w := range tc.wants {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestTenantIDCase: a tenant row's Entra directory ID matches the token's
// tid in any case (the table keeps its lower-case spelling, as the
// verifier does), so two rows that differ only in case are one tenant.
func TestTenantIDCase(t *testing.T) {
	const guid = "72F988BF-86F1-41AF-91AB-2D7CD011DB47"
	c, err := Parse([]byte(strings.Replace(minimal, "{id: t1,", "{id: "+guid+",", 1)), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Tenants[0].ID; got != strings.ToLower(guid) {
		t.Fatalf("tenant id %q, want %q", got, strings.ToLower(guid))
	}
	twice := strings.Replace(minimal, "tenants: [{id: t1, models: [m1], requests: 10}]",
		"tenants: [{id: "+guid+", models: [m1], requests: 10}, {id: "+strings.ToLower(guid)+", models: [m1], requests: 10}]", 1)
	if _, err := Parse([]byte(twice), env(nil)); err == nil || !strings.Contains(err.Error(), "tenants[1].id") {
		t.Fatalf("two rows for one directory: %v", err)
	}
	c, err = Parse([]byte(strings.Replace(minimal, "{id: t1,", "{id: Tenant-One,", 1)), env(nil))
	if err != nil || c.Tenants[0].ID != "Tenant-One" {
		t.Fatalf("a tenant id that is not a GUID keeps its case: %+v, %v", c, err)
	}
}
