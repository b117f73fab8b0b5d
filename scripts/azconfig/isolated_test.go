package azconfig

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/llmgw/gateway/internal/testing/redistest"
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

// TestRemoveTenant runs scripts/azd/remove-tenant.sh with stand-ins for azd
// (its environment in files) and the Azure CLI (answers as Azure would for
// a deployment with Redis): the tenant's app goes first, then its role
// assignments and Redis access while its identity exists, then the
// identity; the environment no longer holds the tenant, and what the
// templates render from it has no trace of it while every other app's
// config is what it was.
func TestRemoveTenant(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("no jq (the README's prerequisites; apt-get install jq)")
	}
	const (
		rg        = "rg-gw-prod"
		appID     = "/subscriptions/s/resourceGroups/rg-gw-prod/providers/Microsoft.App/containerApps/ca-northwind"
		idID      = "/subscriptions/s/resourceGroups/rg-gw-prod/providers/Microsoft.ManagedIdentity/userAssignedIdentities/id-tenant-northwind-tok"
		principal = "d00dfe02-7777-8888-9999-aaaabbbbcccc"
		cluster   = "/subscriptions/s/resourceGroups/rg-gw-prod/providers/Microsoft.Cache/redisEnterprise/redis-tok"
		apa       = cluster + "/databases/default/accessPolicyAssignments/tenantq1w2e3r4t5y6u"
		ra1, ra2  = "/subscriptions/s/resourceGroups/rg-northwind/providers/Microsoft.CognitiveServices/accounts/northwind-openai/providers/Microsoft.Authorization/roleAssignments/1", "/subscriptions/s/providers/Microsoft.Authorization/roleAssignments/2"
	)
	p := threeTenants(true)
	tenantsJSON := func(p params) string {
		var rows []map[string]any
		for _, it := range p.IsolatedTenants {
			rows = append(rows, map[string]any{"id": it.ID, "name": it.Name, "models": it.Models})
		}
		return bicepJSON(t, rows)
	}
	dir := t.TempDir()
	envDir, calls := filepath.Join(dir, "env"), filepath.Join(dir, "calls")
	if err := os.Mkdir(envDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AZURE_SUBSCRIPTION_ID": "s", "AZURE_RESOURCE_GROUP": rg,
		"GATEWAY_ISOLATED_TENANTS": tenantsJSON(p), "GATEWAY_TENANT_APPS": "ca-fabrikam ca-northwind ca-woodgrove"} {
		if err := os.WriteFile(filepath.Join(envDir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fakeAzd := `#!/bin/sh
case "$1 $2" in
"env get-value") cat "` + envDir + `/$3" ;;
"env set") printf '%s' "$4" > "` + envDir + `/$3" ;;
*) exit 2 ;;
esac
`
	fakeAz := `#!/bin/sh
printf '%s\n' "$*" >> ` + calls + `
case "$*" in
*"resource list"*containerApps*"gateway-tenant\"=='northwind'"*) echo ` + appID + ` ;;
*"identity list"*"gateway-tenant\"=='northwind'"*) echo ` + idID + ` ;;
*"identity show"*) echo ` + principal + ` ;;
*"role assignment list"*` + principal + `*) echo ` + ra1 + `; echo ` + ra2 + ` ;;
*"resource list"*redisEnterprise*) echo ` + cluster + ` ;;
*"rest --method get"*"objectId=='` + principal + `'"*) echo ` + apa + ` ;;
esac
`
	for name, body := range map[string]string{"azd": fakeAzd, "az": fakeAz} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command("sh", append([]string{filepath.Join(root, "scripts", "azd", "remove-tenant.sh")}, args...)...)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}

	if out, err := run("tailspin"); err == nil || !strings.Contains(out, "no isolated tenant named tailspin") {
		t.Fatalf("an unknown tenant: %v\n%s", err, out)
	}
	if _, err := os.Stat(calls); err == nil {
		t.Fatal("an unknown tenant's removal called az")
	}
	if out, err := run("northwind"); err != nil {
		t.Fatalf("remove-tenant.sh northwind: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(calls)
	var deletes []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if !strings.HasPrefix(l, "--subscription s ") {
			t.Errorf("az call without the environment's subscription: %s", l)
		}
		if strings.Contains(l, " delete ") || strings.Contains(l, "--method delete") {
			deletes = append(deletes, l)
		}
	}
	want := []string{
		"--subscription s resource delete --ids " + appID,
		"--subscription s role assignment delete --ids " + ra1,
		"--subscription s role assignment delete --ids " + ra2,
		"--subscription s rest --method delete --url " + apa + "?api-version=2025-04-01",
		"--subscription s identity delete --ids " + idID,
	}
	if !slices.Equal(deletes, want) {
		t.Fatalf("deletions:\n%s\nwant, in this order:\n%s", strings.Join(deletes, "\n"), strings.Join(want, "\n"))
	}

	// The rendered state: the environment's tenant list, as the next
	// provision reads it, holds the others only, and the hook moves the
	// others only.
	read := func(k string) string { b, _ := os.ReadFile(filepath.Join(envDir, k)); return string(b) }
	if got := read("GATEWAY_TENANT_APPS"); got != "ca-fabrikam ca-woodgrove" {
		t.Errorf("GATEWAY_TENANT_APPS = %q", got)
	}
	var left []isolatedParam
	if err := json.Unmarshal([]byte(read("GATEWAY_ISOLATED_TENANTS")), &left); err != nil {
		t.Fatalf("GATEWAY_ISOLATED_TENANTS is no longer JSON: %v", err)
	}
	after := threeTenants(true)
	after.IsolatedTenants = slices.DeleteFunc(after.IsolatedTenants, func(it isolatedParam) bool { return it.Name == "northwind" })
	if got, want := tenantsJSON(params{IsolatedTenants: left}), tenantsJSON(after); got != want {
		t.Fatalf("tenants left %s, want %s", got, want)
	}
	before := map[string]string{}
	for _, a := range append([]app{sharedApp(p)}, tenantApps(p)...) {
		before[a.Name] = string(render(t, a))
	}
	for _, a := range append([]app{sharedApp(after)}, tenantApps(after)...) {
		cfg := string(render(t, a))
		if a.Name == "northwind" || strings.Contains(cfg, northwindTenant) || strings.Contains(cfg, "llmgw:northwind:") {
			t.Errorf("%s's config still names northwind", a.Name)
		}
		if cfg != before[a.Name] {
			t.Errorf("removing northwind changed %s's config", a.Name)
		}
	}
}
