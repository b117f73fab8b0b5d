package azconfig

import (
	"testing"

	"github.com/llmgw/gateway/shared/config"
)

// Directory, app and identity IDs shaped like Entra's (GUIDs).
const (
	homeTenant    = "72f988bf-86f1-41af-91ab-2d7cd011db47"
	otherTenant   = "f8cdef31-a31e-4b4a-93e4-5f571e91255a"
	apiClientID   = "6e2b6f2a-3c1d-4f8e-9a7b-1d2c3e4f5a6b"
	callerAppID   = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
	callerSPOID   = "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0"
	identityCID   = "c0ffee00-1111-2222-3333-444455556666"
	identityOID   = "d00dfeed-7777-8888-9999-aaaabbbbcccc"
	openAIAccount = "gwtest-openai"
)

// testParams are the parameters of a one-directory deployment, as a user
// following the README would set them.
func testParams(redis bool, tenants []tenantParam) params {
	return params{
		EntraTenantID:       homeTenant,
		APIClientID:         apiClientID,
		Tenants:             tenants,
		Models:              []model{{"gpt-4o-mini", "gpt-4o-mini-prod"}, {"gpt-4o", "gpt-4o-2024-11-20"}},
		EnableRedis:         redis,
		OpenAIEndpoint:      "https://" + openAIAccount + ".openai.azure.com/",
		IdentityClientID:    identityCID,
		IdentityPrincipalID: identityOID,
	}
}

func TestGeneratedConfigLoads(t *testing.T) {
	t.Parallel()
	contoso := []tenantParam{{ID: homeTenant, Name: "contoso", Models: []string{"gpt-4o-mini"}, Requests: 120, Interval: "1m"}}
	env := map[string]string{"REDIS_URL": "rediss://redis-x.westeurope.redis.azure.net:10000"}
	for _, tc := range []struct {
		name      string
		p         params
		wantRows  int
		wantStore string
	}{
		{"defaults", testParams(false, nil), 1, "memory"},
		{"tenant table", testParams(false, contoso), 1, "memory"},
		{"Azure Managed Redis", testParams(true, contoso), 1, "redis"},
		{"application ID URI given", func() params { p := testParams(false, nil); p.APIAppIDURI = "api://llm-gateway.contoso.com"; return p }(), 1, "memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Parse(render(t, tc.p), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("the generated config does not load: %v\n%s", err, render(t, tc.p))
			}
			if c.Auth.Issuer != "https://login.microsoftonline.com/"+homeTenant+"/v2.0" {
				t.Errorf("issuer %q", c.Auth.Issuer)
			}
			wantURI := "api://" + apiClientID
			if tc.p.APIAppIDURI != "" {
				wantURI = tc.p.APIAppIDURI
			}
			if len(c.Auth.Audiences) != 2 || c.Auth.Audiences[0] != apiClientID || c.Auth.Audiences[1] != wantURI {
				t.Errorf("audiences %q: want the client ID (v2.0 tokens) and %s", c.Auth.Audiences, wantURI)
			}
			if c.Auth.TenantClaim != "tid" || len(c.Tenants) != tc.wantRows || c.Tenants[0].ID != homeTenant {
				t.Errorf("tenant claim %q, tenants %+v", c.Auth.TenantClaim, c.Tenants)
			}
			if c.Limiter.Store != tc.wantStore {
				t.Errorf("limiter store %q", c.Limiter.Store)
			}
			if tc.wantStore == "redis" {
				e := c.Limiter.RedisEntra
				if e == nil || e.Credential != "managed-identity" || e.ClientID != identityCID || e.Username != identityOID || c.Limiter.RedisURLEnv != "REDIS_URL" {
					t.Errorf("redis limiter %+v", c.Limiter)
				}
			}
			ep := c.Pools[0].Endpoints[0]
			if ep.URL != tc.p.OpenAIEndpoint || ep.Auth != "entra" || ep.Entra.Credential != "managed-identity" || ep.Entra.ClientID != identityCID {
				t.Errorf("endpoint %+v", ep)
			}
			if c.Pools[0].Models["gpt-4o-mini"] != "gpt-4o-mini-prod" {
				t.Errorf("models %v", c.Pools[0].Models)
			}
		})
	}
}
