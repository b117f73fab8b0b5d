package azconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// This file simulates what azd does with this repository's parameters on
// the operations of day two: `azd up` into an empty
// subscription, `azd provision` again, `azd provision` from CI or a second
// machine (a fresh azd environment), `azd down` then `azd up` in the same
// environment, and a pinned image. It follows azd's source
// (Azure/azure-dev, cli/azd): before every provision the containerapp
// service target looks the service's app up and stores
// SERVICE_<NAME>_RESOURCE_EXISTS (pkg/project/service_target_containerapp.go,
// addPreProvisionChecks); main.parameters.json's bare ${VAR} leaves a
// parameter out while VAR is unset, so its bicep default applies; `azd
// deploy` records SERVICE_<NAME>_IMAGE_NAME and runs the postdeploy hook;
// `azd down` deletes the resource group and the outputs it had stored,
// keeping every other value. The bicep side is the image var of
// gateway.bicep and the output of live-image.bicep, mirrored below and
// checked against the files.

// placeholder is app.bicep's placeholderImage.
const placeholder = "mcr.microsoft.com/dotnet/samples:aspnetapp"

// azdWorld is what exists in the subscription: the resource group's
// registry (its images) and Container Apps (the image each runs).
type azdWorld struct {
	registry string
	images   map[string]bool
	apps     map[string]string // app name → image
}

// azdSim is one azd environment (its .env values) on one subscription.
type azdSim struct {
	t      *testing.T
	env    map[string]string
	world  *azdWorld
	builds int
	token  string // gateway.bicep's token: the same for the same environment
}

// outputs are main.bicep's outputs, which azd stores in the environment and
// `azd down` removes.
var outputs = []string{"AZURE_RESOURCE_GROUP", "AZURE_CONTAINER_REGISTRY_ENDPOINT", "GATEWAY_IDENTITY_CLIENT_ID", "GATEWAY_AUTH_ISSUER", "GATEWAY_URL", "GATEWAY_TENANT_APPS", "GATEWAY_TENANT_URLS"}

func newAzdSim(t *testing.T, env map[string]string) *azdSim {
	return &azdSim{t: t, env: maps.Clone(env), token: "x7k2p4q9w3e5r"}
}

func (s *azdSim) sharedApp() string { return "ca-gateway-" + s.token }

// parameters resolves main.parameters.json as azd does: "${VAR}" is VAR's
// value, and a parameter whose variable is unset is left out.
func (s *azdSim) parameters() map[string]string {
	s.t.Helper()
	var f struct {
		Parameters map[string]struct{ Value string } `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(bicepSource(s.t, "main.parameters.json")), &f); err != nil {
		s.t.Fatal(err)
	}
	out := map[string]string{}
	for name, p := range f.Parameters {
		m := regexp.MustCompile(`^\$\{([A-Z0-9_]+)\}$`).FindStringSubmatch(p.Value)
		if m == nil {
			s.t.Fatalf("parameter %s: %q is not a bare ${VAR}", name, p.Value)
		}
		if v, ok := s.env[m[1]]; ok {
			out[name] = v
		}
	}
	return out
}

// preprovision is azd's pre-provision check for the gateway service.
func (s *azdSim) preprovision() {
	exists := false
	if s.world != nil {
		_, exists = s.world.apps[s.sharedApp()]
	}
	s.env["SERVICE_GATEWAY_RESOURCE_EXISTS"] = strconv.FormatBool(exists)
}

// image is gateway.bicep's image var (with live-image.bicep's output) for
// the resolved parameters p.
func (s *azdSim) image(p map[string]string) string {
	pinned := p["gatewayImage"]
	exists := p["gatewayExists"] == "true" // bool parameter; default false
	live := ""
	if exists {
		live = s.world.apps[s.sharedApp()]
	}
	img := live
	if pinned != "" {
		img = pinned
	}
	if img == "" {
		img = placeholder // app.bicep's containerImage
	}
	return img
}

// provision is `azd provision` (and the provision step of `azd up`).
func (s *azdSim) provision() {
	s.t.Helper()
	s.preprovision()
	p := s.parameters()
	if s.world == nil {
		// A new resource group: the registry has the same name (the token
		// depends on the environment's name only) and no image.
		s.world = &azdWorld{registry: "cr" + s.token + ".azurecr.io", images: map[string]bool{}, apps: map[string]string{}}
	}
	img := s.image(p)
	names := []string{s.sharedApp()}
	var tenants []struct{ Name string }
	if v := p["isolatedTenants"]; v != "" {
		if err := json.Unmarshal([]byte(v), &tenants); err != nil {
			s.t.Fatal(err)
		}
	}
	var tenantApps []string
	for _, tn := range tenants {
		tenantApps = append(tenantApps, "ca-"+tn.Name) // isolatedAppNames
	}
	for _, n := range append(names, tenantApps...) {
		s.world.apps[n] = img
	}
	s.env["AZURE_RESOURCE_GROUP"] = "rg-" + s.env["AZURE_ENV_NAME"]
	s.env["AZURE_CONTAINER_REGISTRY_ENDPOINT"] = s.world.registry
	s.env["GATEWAY_TENANT_APPS"] = strings.Join(tenantApps, " ")
	s.env["GATEWAY_URL"] = "https://" + s.sharedApp() + ".example"
}

// deploy is `azd deploy`: a build pushed to the registry, the shared app
// moved to it, SERVICE_GATEWAY_IMAGE_NAME recorded, then the postdeploy
// hook (the real script, with a stand-in az that moves apps in s.world).
func (s *azdSim) deploy() string {
	s.t.Helper()
	s.builds++
	img := fmt.Sprintf("%s/llm-gateway/gateway-%s:azd-deploy-%d", s.world.registry, s.env["AZURE_ENV_NAME"], s.builds)
	s.world.images[img] = true
	s.world.apps[s.sharedApp()] = img
	s.env["SERVICE_GATEWAY_IMAGE_NAME"] = img
	for _, u := range runHook(s.t, s.env) {
		if _, ok := s.world.apps[u.app]; !ok {
			s.t.Fatalf("the hook updated %s, which does not exist", u.app)
		}
		s.world.apps[u.app] = u.image
	}
	return img
}

// down is `azd down`.
func (s *azdSim) down() {
	s.world = nil
	for _, k := range outputs {
		delete(s.env, k)
	}
}

// up is `azd up`: provision, then deploy.
func (s *azdSim) up() string {
	s.provision()
	return s.deploy()
}

// pullable fails the test for an app whose image cannot be pulled: one
// that is neither the public placeholder nor in the registry.
func (s *azdSim) pullable(when string) {
	s.t.Helper()
	for app, img := range s.world.apps {
		if img != placeholder && !s.world.images[img] {
			s.t.Errorf("%s: %s runs %s, which is not in the registry", when, app, img)
		}
	}
}

func (s *azdSim) allOn(when, img string) {
	s.t.Helper()
	for app, got := range s.world.apps {
		if got != img {
			s.t.Errorf("%s: %s runs %s, want %s", when, app, got, img)
		}
	}
}

type hookUpdate struct{ app, image string }

// runHook runs scripts/azd/tenant-images.sh with env and a stand-in az,
// and returns the apps it moved.
func runHook(t *testing.T, env map[string]string) []hookUpdate {
	t.Helper()
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	if err := os.WriteFile(filepath.Join(dir, "az"), []byte("#!/bin/sh\nprintf '%s\\n' \"$*\" >> "+calls+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", filepath.Join(root, "scripts", "azd", "tenant-images.sh"))
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "AZURE_SUBSCRIPTION_ID=00000000-0000-0000-0000-000000000001"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("postdeploy hook: %v\n%s", err, out.String())
	}
	b, _ := os.ReadFile(calls)
	var ups []hookUpdate
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		f := strings.Fields(l)
		u := hookUpdate{}
		for i := 0; i+1 < len(f); i++ {
			switch f[i] {
			case "--name":
				u.app = f[i+1]
			case "--image":
				u.image = f[i+1]
			}
		}
		ups = append(ups, u)
	}
	return ups
}

// userEnv is what a user (or a CI pipeline) sets with azd env set.
func userEnv(tenants string) map[string]string {
	return map[string]string{
		"AZURE_ENV_NAME":              "gw-prod",
		"AZURE_LOCATION":              "swedencentral",
		"AZURE_OPENAI_ACCOUNT_NAME":   openAIAccount,
		"AZURE_OPENAI_RESOURCE_GROUP": "rg-openai",
		"GATEWAY_API_CLIENT_ID":       apiClientID,
		"GATEWAY_ISOLATED_TENANTS":    tenants,
	}
}

const (
	tenantsTwo   = `[{"id": "` + fabrikamTenant + `", "name": "fabrikam", "models": ["gpt-4o-mini"]}, {"id": "` + northwindTenant + `", "name": "northwind", "models": ["gpt-4o"]}]`
	tenantsThree = `[{"id": "` + fabrikamTenant + `", "name": "fabrikam", "models": ["gpt-4o-mini"]}, {"id": "` + northwindTenant + `", "name": "northwind", "models": ["gpt-4o"]}, {"id": "` + woodgroveTenant + `", "name": "woodgrove", "models": ["gpt-4o"]}]`
)

// TestAzdDayTwo: the image every app runs through the operations of day
// two, as azd runs them with this repository's parameters, bicep and hook.
func TestAzdDayTwo(t *testing.T) {
	t.Parallel()
	checkMirroredImageFlow(t)

	t.Run("first up, provision again", func(t *testing.T) {
		s := newAzdSim(t, userEnv(tenantsTwo))
		s.provision()
		s.allOn("first provision", placeholder)
		img := s.deploy()
		s.allOn("after azd deploy and its hook", img)
		s.provision()
		s.allOn("azd provision on the same machine", img)
		s.pullable("azd provision")
	})

	t.Run("provision from CI or a second machine: a fresh environment", func(t *testing.T) {
		dev := newAzdSim(t, userEnv(tenantsTwo))
		img := dev.up()
		// CI has the same user settings, none of azd's stored values.
		ci := newAzdSim(t, userEnv(tenantsTwo))
		ci.world = dev.world
		ci.provision()
		ci.allOn("azd provision from CI", img)
		// CI adds a tenant: it starts on the image the others run.
		ci.env["GATEWAY_ISOLATED_TENANTS"] = tenantsThree
		ci.provision()
		ci.allOn("a tenant added from CI", img)
		if _, ok := ci.world.apps["ca-woodgrove"]; !ok {
			t.Fatal("woodgrove has no app")
		}
		// A CI pipeline whose stored image name is an older build changes
		// nothing: no parameter reads it.
		ci.env["SERVICE_GATEWAY_IMAGE_NAME"] = "an-older/build:1"
		ci.provision()
		ci.allOn("CI with a stale SERVICE_GATEWAY_IMAGE_NAME", img)
	})

	t.Run("down, then up again in the same environment", func(t *testing.T) {
		s := newAzdSim(t, userEnv(tenantsTwo))
		first := s.up()
		s.down()
		if s.env["SERVICE_GATEWAY_IMAGE_NAME"] != first {
			t.Fatal("the simulation lost what azd down keeps")
		}
		s.provision()
		s.pullable("the provision of azd up after azd down")
		s.allOn("the provision of azd up after azd down", placeholder)
		second := s.deploy()
		s.allOn("azd up after azd down", second)
		s.pullable("azd up after azd down")
	})

	t.Run("a pinned image: built and pushed without ACR Tasks", func(t *testing.T) {
		s := newAzdSim(t, userEnv(tenantsTwo))
		s.provision()
		// make image (or docker build) and a push to the registry, then one
		// setting and a provision.
		pinned := s.world.registry + "/gateway:v1"
		s.world.images[pinned] = true
		s.env["GATEWAY_IMAGE"] = pinned
		s.provision()
		s.allOn("GATEWAY_IMAGE set", pinned)
		s.pullable("GATEWAY_IMAGE set")
		s.env["GATEWAY_ISOLATED_TENANTS"] = tenantsThree
		s.provision()
		s.allOn("a tenant added with GATEWAY_IMAGE set", pinned)
	})
}

// checkMirroredImageFlow: the simulation's image rule is the bicep's.
func checkMirroredImageFlow(t *testing.T) {
	t.Helper()
	params := (&azdSim{t: t, env: map[string]string{"SERVICE_GATEWAY_RESOURCE_EXISTS": "true", "GATEWAY_IMAGE": "x"}}).parameters()
	if params["gatewayExists"] != "true" || params["gatewayImage"] != "x" {
		t.Fatalf("main.parameters.json does not feed SERVICE_GATEWAY_RESOURCE_EXISTS and GATEWAY_IMAGE to gatewayExists and gatewayImage: %v", params)
	}
	gw := bicepSource(t, "gateway.bicep")
	for _, want := range []string{
		"var image = !empty(gatewayImage) ? gatewayImage : liveImage.outputs.image\n",
		"    exists: gatewayExists\n    appName: sharedAppName\n",
	} {
		if !strings.Contains(gw, want) {
			t.Errorf("gateway.bicep lacks %q: update this simulation", want)
		}
	}
	if !strings.Contains(bicepSource(t, "live-image.bicep"), "output image string = exists ? app.properties.template.containers[0].image : ''") {
		t.Error("live-image.bicep's output changed: update this simulation")
	}
	app := bicepSource(t, "app.bicep")
	for _, want := range []string{"var placeholderImage = '" + placeholder + "'", "var containerImage = empty(image) ? placeholderImage : image"} {
		if !strings.Contains(app, want) {
			t.Errorf("app.bicep lacks %q: update this simulation", want)
		}
	}
	main := bicepSource(t, "main.bicep")
	for _, o := range outputs {
		if !strings.Contains(main, "\noutput "+o+" ") {
			t.Errorf("main.bicep has no output %s", o)
		}
	}
}
