package azconfig

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/llmgw/gateway/scripts/redistest"
)

// TestIsolatedTenants deploys, on loopback, what `azd up` makes from the
// README's isolated tier: the shared gateway and three tenant apps, each on
// the config bicep generates for it, each as its own identity, all on one
// real redis-server (Azure Managed Redis, an ACL user per identity as the
// access policy assignments make) with the key prefix scheme of
// gateway.bicep. Each tenant app serves its own directory's Entra token and
// refuses every other directory's valid token with 403; its backend calls go
// to the account its identity has its role on, as that identity; and two
// tenant apps never share a bucket.
func TestIsolatedTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the gateway binary")
	}
	p := threeTenants(true)
	az := newAzure(t, p)
	srv := redistest.Start(t)
	apps := append([]app{sharedApp(p)}, tenantApps(p)...)
	for _, a := range apps {
		srv.Do("ACL", "SETUSER", a.Identity.PrincipalID, "on", ">"+az.identity.token(a.Identity.ClientID, "https://redis.azure.com"), "~*", "+@all")
	}
	running := map[string]*runningGateway{}
	for _, a := range apps {
		running[a.Name] = az.start(t, a, "REDIS_URL="+srv.URL())
	}
	token := func(tid string) string { return az.dir(tid).accessToken(t, apiClientID, false, nil) }

	t.Run("two tenant apps never share a bucket", func(t *testing.T) {
		nw, wg := running["northwind"], running["woodgrove"]
		for i := range 2 {
			resp := nw.chat(t, token(northwindTenant), "gpt-4o")
			if got := resp.Header.Get("x-ratelimit-remaining-requests"); got != strconv.Itoa(1-i) {
				t.Fatalf("northwind request %d: remaining %q", i+1, got)
			}
			streams(t, resp)
		}
		if status, code := errorCode(t, nw.chat(t, token(northwindTenant), "gpt-4o")); status != http.StatusTooManyRequests || code != "rate_limit_exceeded" {
			t.Fatalf("northwind's third request: %d %s", status, code)
		}
		// Same bucket size, same scheme, one store: woodgrove's is full.
		resp := wg.chat(t, token(woodgroveTenant), "gpt-4o")
		if got := resp.Header.Get("x-ratelimit-remaining-requests"); got != "1" {
			t.Fatalf("woodgrove after northwind's bucket ran out: remaining %q", got)
		}
		streams(t, resp)
	})

	for _, it := range p.IsolatedTenants {
		t.Run(it.Name, func(t *testing.T) {
			g, a := running[it.Name], tenantApp(p, it.Name)
			acct := az.accounts[a.Account]
			if it.Name == "fabrikam" { // the others' buckets are spent above
				streams(t, g.chat(t, token(it.ID), it.Models[0]))
			}
			// Its calls reach the account its identity has its role on, as
			// that identity, for its deployment; no other account saw it.
			var want []call
			for _, m := range a.Models {
				want = append(want, call{a.Identity.ClientID, "/openai/deployments/" + m.Deployment + "/chat/completions"})
			}
			if !slices.ContainsFunc(acct.accepted(), func(c call) bool { return slices.Contains(want, c) }) {
				t.Errorf("account %s never accepted one of %+v: %+v", a.Account, want, acct.accepted())
			}
			for name, other := range az.accounts {
				for _, c := range other.accepted() {
					if name != a.Account && c.ClientID == a.Identity.ClientID {
						t.Errorf("%s's identity called account %s", it.Name, name)
					}
				}
			}
			others := []string{homeTenant, otherTenant}
			for _, o := range p.IsolatedTenants {
				if o.ID != it.ID {
					others = append(others, o.ID)
				}
			}
			for _, tid := range others {
				if status, code := errorCode(t, g.chat(t, token(tid), it.Models[0])); status != http.StatusForbidden || code != "tenant_not_allowed" {
					t.Errorf("a valid token of directory %s: %d %s, want 403 tenant_not_allowed", tid, status, code)
				}
			}
			if !slices.Contains(it.Models, "gpt-4o") {
				if status, code := errorCode(t, g.chat(t, token(it.ID), "gpt-4o")); status != http.StatusNotFound || code != "model_not_found" {
					t.Errorf("a model outside the tenant's list: %d %s", status, code)
				}
			}
			if !strings.Contains(g.logs.String(), `"tenant_name":"`+it.Name+`"`) {
				t.Errorf("the access log does not name the tenant")
			}
		})
	}

	t.Run("a tenant's own account serves that tenant alone", func(t *testing.T) {
		for _, c := range az.accounts[northwindAcct].accepted() {
			if c.ClientID != p.TenantIdentities["northwind"].ClientID {
				t.Errorf("northwind's account accepted a call from %s", c.ClientID)
			}
		}
	})

	t.Run("the shared gateway serves its table, not the isolated tenants", func(t *testing.T) {
		g := running["shared"]
		streams(t, g.chat(t, token(homeTenant), "gpt-4o"))
		if status, code := errorCode(t, g.chat(t, token(fabrikamTenant), "gpt-4o-mini")); status != http.StatusForbidden || code != "tenant_not_allowed" {
			t.Fatalf("fabrikam on the shared gateway: %d %s", status, code)
		}
	})

	t.Run("every key is in its app's namespace", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb.Close()
		keys, err := rdb.Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		byApp := map[string][]string{}
		for _, k := range keys {
			owner := ""
			for _, a := range apps {
				if strings.HasPrefix(k, a.KeyPrefix) && len(a.KeyPrefix) > len(owner) {
					owner = a.KeyPrefix
				}
			}
			if owner == "" {
				t.Errorf("key %q is in no app's namespace", k)
			}
			byApp[owner] = append(byApp[owner], k)
		}
		for _, a := range apps {
			ks := byApp[a.KeyPrefix]
			if len(ks) == 0 {
				t.Errorf("%s kept no key under %q: %v", a.Name, a.KeyPrefix, keys)
			}
			for _, k := range ks {
				if !strings.Contains(k, a.Rows[0].ID) {
					t.Errorf("%s's key %q is not its tenant's", a.Name, k)
				}
			}
		}
	})

	for name, g := range running {
		for _, bad := range []string{"failure policy applied", "limiter store not reachable"} {
			if strings.Contains(g.logs.String(), bad) {
				t.Errorf("%s could not use Redis (%q):\n%s", name, bad, g.logs.String())
			}
		}
	}
}

// TestTenantChangesTouchNoOtherApp: adding a tenant or removing one leaves
// every other app's generated config as it was, byte for byte (and so its
// Container App's template: nothing else about an app depends on the list).
func TestTenantChangesTouchNoOtherApp(t *testing.T) {
	t.Parallel()
	base := threeTenants(false)
	configs := func(p params) map[string]string {
		out := map[string]string{}
		for _, a := range append([]app{sharedApp(p)}, tenantApps(p)...) {
			out[a.Name] = string(render(t, a))
		}
		return out
	}
	before := configs(base)

	added := threeTenants(false)
	added.IsolatedTenants = append(added.IsolatedTenants, isolatedParam{ID: otherTenant, Name: "tailspin", Models: []string{"gpt-4o-mini"}})
	added.TenantIdentities["tailspin"] = identity{"c0ffee04-1111-2222-3333-444455556666", "d00dfe04-7777-8888-9999-aaaabbbbcccc"}
	removed := threeTenants(false)
	removed.IsolatedTenants = slices.DeleteFunc(removed.IsolatedTenants, func(it isolatedParam) bool { return it.Name == "northwind" })

	for name, p := range map[string]params{"a fourth tenant added": added, "northwind removed": removed} {
		after := configs(p)
		for app, cfg := range before {
			if got, ok := after[app]; ok && got != cfg {
				t.Errorf("%s changed %s's config", name, app)
			}
		}
	}
	if _, ok := configs(removed)["northwind"]; ok {
		t.Error("northwind still has a config")
	}
	if _, ok := configs(added)["tailspin"]; !ok {
		t.Error("tailspin has no config")
	}
}

// TestPostdeployHook runs the azd postdeploy hook (azure.yaml) with the
// values azd gives it and a stand-in for the Azure CLI: every tenant app,
// and only those, is moved to the image azd deployed.
func TestPostdeployHook(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	yaml := readFile(t, filepath.Join(root, "azure.yaml"))
	if !strings.Contains(yaml, "run: ./scripts/azd/tenant-images.sh") || !strings.Contains(yaml, "run: ./scripts/azd/tenant-images.ps1") {
		t.Fatal("azure.yaml does not run scripts/azd/tenant-images.{sh,ps1} as the gateway's postdeploy hook")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fakeAz := "#!/bin/sh\nprintf '%s\\n' \"$*\" >> " + calls + "\n"
	if err := os.WriteFile(filepath.Join(dir, "az"), []byte(fakeAz), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(env ...string) (string, error) {
		cmd := exec.Command("sh", filepath.Join(root, "scripts", "azd", "tenant-images.sh"))
		cmd.Env = append([]string{"PATH=" + dir + ":/usr/bin:/bin"}, env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	const image = "crabc.azurecr.io/llm-gateway/gateway-gw-dev:azd-deploy-1"
	out, err := run("SERVICE_GATEWAY_IMAGE_NAME="+image, "GATEWAY_TENANT_APPS=ca-fabrikam ca-northwind ca-woodgrove",
		"AZURE_RESOURCE_GROUP=rg-gw-dev", "AZURE_SUBSCRIPTION_ID=00000000-0000-0000-0000-000000000001")
	if err != nil {
		t.Fatalf("hook: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(calls)
	var want []string
	for _, app := range []string{"ca-fabrikam", "ca-northwind", "ca-woodgrove"} {
		want = append(want, fmt.Sprintf("containerapp update --subscription 00000000-0000-0000-0000-000000000001 --resource-group rg-gw-dev --name %s --container-name gateway --image %s --output none", app, image))
	}
	if got := strings.Split(strings.TrimSpace(string(b)), "\n"); !slices.Equal(got, want) {
		t.Fatalf("az calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	_ = os.Remove(calls)
	if out, err := run("SERVICE_GATEWAY_IMAGE_NAME=" + image); err != nil || !strings.Contains(out, "nothing to update") {
		t.Fatalf("no tenants: %v\n%s", err, out)
	}
	if _, err := os.Stat(calls); err == nil {
		t.Fatal("the hook called az without tenants")
	}
	if out, err := run("GATEWAY_TENANT_APPS=ca-fabrikam"); err == nil {
		t.Fatalf("the hook ran without an image:\n%s", out)
	}
}
