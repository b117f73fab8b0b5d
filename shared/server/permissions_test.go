package server

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/tenant"
)

// refuse is an Authenticator that fails every request with err.
type refuse struct{ err error }

func (r refuse) Verify(context.Context, string) (auth.Principal, error) {
	return auth.Principal{}, r.err
}

// TestInsufficientPermissions: a valid token without a required role or
// scope is 403 insufficient_permissions on every authenticated route, not
// a 401 (the token is fine; asking again with it will not help).
func TestInsufficientPermissions(t *testing.T) {
	g := newTestGatewayWith(t, func(d *Deps) { d.Auth = refuse{auth.ErrInsufficientPermissions} }, http.HandlerFunc(sseBackend))
	resp, b := g.post(t, streamBody)
	if resp.StatusCode != http.StatusForbidden || errorCode(t, b) != "insufficient_permissions" || resp.Header.Get("WWW-Authenticate") != "" {
		t.Fatalf("chat: %d %s %q", resp.StatusCode, b, resp.Header.Get("WWW-Authenticate"))
	}
	if l := g.lastLog(t); l["status"] != float64(403) || l["outcome"] != "insufficient_permissions" {
		t.Fatalf("access log %v", l)
	}
	r, err := http.Get(g.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusForbidden || errorCode(t, mb) != "insufficient_permissions" {
		t.Fatalf("models: %d %s", r.StatusCode, mb)
	}
}

// TestTenantNameLogged: the access log carries the tenant's readable name
// from the table beside its id.
func TestTenantNameLogged(t *testing.T) {
	g := newTestGatewayWith(t, func(d *Deps) {
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Name: "Contoso Ltd", Models: []string{"m"}}})
	}, http.HandlerFunc(sseBackend))
	if resp, b := g.post(t, streamBody); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if l := g.lastLog(t); l["tenant"] != "t1" || l["tenant_name"] != "Contoso Ltd" {
		t.Fatalf("access log %v", l)
	}
	r, err := http.Get(g.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if l := g.lastLog(t); l["path"] != "/v1/models" || l["tenant_name"] != "Contoso Ltd" {
		t.Fatalf("access log of /v1/models %v", l)
	}
}
