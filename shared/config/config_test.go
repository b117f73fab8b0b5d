package config

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// parse is Decode and Validate: the file's own rules (shared/assemble
// adds the parts').
func parse(b []byte, getenv func(string) string) (*Config, error) {
	c, p := Decode(b)
	if c != nil {
		p = append(p, c.Decoded(c.Validate(getenv))...)
	}
	if len(p) > 0 {
		return nil, p
	}
	return c, nil
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

const minimal = `
auth: {issuer: "https://issuer.example", audiences: [gw]}
tenants: [{id: t1, models: [m1], requests: 10}]
pools:
  - name: p1
    kind: vllm
    models: {m1: served}
    endpoints: [{url: "http://127.0.0.1:8000"}]
`

// TestDefaults: the file's own defaults (a setting one section takes
// from another, an endpoint's weight) are applied, and the settings a
// part takes stay zero when the file leaves them out: their defaults are
// the parts' (each part's tests check it applies its own).
func TestDefaults(t *testing.T) {
	c, err := parse([]byte(minimal+"max_concurrent_requests: 7\nlimiter: {failure_policy: closed}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"endpoint weight", c.Pools[0].Endpoints[0].Weight == 1},
		{"tenant concurrency from the top level", c.Tenants[0].MaxConcurrentRequests == 7},
		{"budget failure policy from the limiter", c.Budget.FailurePolicy == "closed"},
		{"listen left zero", c.Listen == ""},
		{"log_level left zero", c.Server.Host.LogLevel == ""},
		{"max_header_bytes left zero", c.Server.Limits.MaxHeaderBytes == 0},
		{"tenant interval left zero", c.Tenants[0].Interval == 0},
		{"endpoint auth left zero", c.Pools[0].Endpoints[0].Auth == ""},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("%s: %+v", ck.name, c)
		}
	}
}

func TestJSONAccepted(t *testing.T) {
	js := `{"auth":{"issuer":"https://i.example","audiences":["gw"]},
	"tenants":[{"id":"t","models":["m"],"requests":5,"interval":"10s"}],
	"pools":[{"name":"p","kind":"openai","models":{"m":""},"endpoints":[{"url":"https://api.example","api_key_env":"K"}]}]}`
	c, err := parse([]byte(js), env(map[string]string{"K": "v"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Tenants[0].Interval.D() != 10*time.Second {
		t.Fatalf("interval %v", c.Tenants[0].Interval.D())
	}
}

// TestNegativeDurations covers every Duration field in the schema whose
// rule is the file's (not tagged check:"part"; shared/assemble's
// TestOneRulePerNumber covers those): each negative one is reported by its
// field path. The list is checked against the schema by reflection, so a
// new duration field needs a case here.
func TestNegativeDurations(t *testing.T) {
	cases := map[string]string{} // none today: every duration is a part's
	for _, path := range durationPaths(reflect.TypeFor[Config](), "") {
		if _, ok := cases[path]; !ok {
			t.Errorf("duration field %s has no case", path)
		}
	}
	for path, cfg := range cases {
		t.Run(path, func(t *testing.T) {
			_, err := parse([]byte(cfg), env(map[string]string{"R": "redis://x"}))
			want := path + ": must not be negative, got -1s"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("want %q, got %v", want, err)
			}
		})
	}
}

// durationPaths lists the schema's Duration fields, "[0]" for list items.
func durationPaths(t reflect.Type, path string) []string {
	switch t.Kind() {
	case reflect.Pointer:
		return durationPaths(t.Elem(), path)
	case reflect.Slice:
		return durationPaths(t.Elem(), path+"[0]")
	}
	var out []string
	if t == reflect.TypeFor[Duration]() {
		return []string{path}
	}
	if t.Kind() == reflect.Struct {
		eachField(t, path, func(_ int, f reflect.StructField, p string) {
			if f.Tag.Get("check") != "part" {
				out = append(out, durationPaths(f.Type, p)...)
			}
		})
	}
	return out
}

func TestEndpointOptions(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(strings.Replace(minimal, "kind: vllm", "kind: openai", 1), `{url: "http://127.0.0.1:8000"}`,
		fmt.Sprintf(`{url: "https://127.0.0.1:8000/base/", weight: 5, organization: org-1, project: proj-1, ca_file: %q}`, caFile), 1)
	c, err := parse([]byte(cfg), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Pools[0].Endpoints[0]
	if e.Weight != 5 || e.Organization != "org-1" || e.Project != "proj-1" || e.CAFile != caFile {
		t.Fatalf("endpoint = %+v", e)
	}
}

// TestAnchorsAndMergeKeys: YAML's own reuse features pass the schema check,
// and a merged mapping is checked like any other.
func TestAnchorsAndMergeKeys(t *testing.T) {
	cfg := `
auth: {issuer: "https://issuer.example", audiences: [gw]}
tenants: [{id: t1, models: [m1, m2], requests: 10}]
pools:
  - {name: p1, kind: vllm, models: {m1: ""}, endpoints: [&ep {url: "http://127.0.0.1:8000", weight: 2}]}
  - {name: p2, kind: vllm, models: {m2: ""}, endpoints: [*ep, {<<: *ep, weight: 3}]}
`
	c, err := parse([]byte(cfg), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if a, m := c.Pools[1].Endpoints[0].Weight, c.Pools[1].Endpoints[1].Weight; a != 2 || m != 3 {
		t.Fatalf("aliased weight = %d, merged weight = %d; want 2 and 3", a, m)
	}
	bad := strings.Replace(cfg, "weight: 2}", "weight: 2, colour: red}", 1)
	_, err = parse([]byte(bad), env(nil))
	for _, w := range []string{"pools[0].endpoints[0].colour: unknown field", "pools[1].endpoints[0].colour: unknown field", "pools[1].endpoints[1].colour: unknown field"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q, got %v", w, err)
		}
	}
}

func selfSignedPEM(t *testing.T) []byte {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "nope.yaml"), "")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
}

// TestListenAddr: an explicit listen always wins; the environment's port
// only fills in an absent one, on every interface.
func TestListenAddr(t *testing.T) {
	tests := []struct {
		name, listen string
		env          map[string]string
		want         string
	}{
		{"absent, no port: the host's default", "", nil, ""},
		{"absent, PORT", "", map[string]string{"PORT": "9000"}, ":9000"},
		{"absent, CONTAINER_APP_PORT", "", map[string]string{"CONTAINER_APP_PORT": "9001"}, ":9001"},
		{"absent, both", "", map[string]string{"PORT": "9000", "CONTAINER_APP_PORT": "9001"}, ":9000"},
		{"the default's value, PORT", "listen: 127.0.0.1:8080\n", map[string]string{"PORT": "9000"}, "127.0.0.1:8080"},
		{"every interface, PORT", "listen: \":8081\"\n", map[string]string{"PORT": "9000"}, ":8081"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse([]byte(tt.listen+minimal), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ListenAddr(func(k string) string { return tt.env[k] }); got != tt.want {
				t.Fatalf("ListenAddr = %q, want %q", got, tt.want)
			}
		})
	}
}

// repeated returns a line p holds more than once.
func repeated(p Problems) (string, bool) {
	seen := make(map[string]bool, len(p))
	for _, line := range p {
		if seen[line] {
			return line, true
		}
		seen[line] = true
	}
	return "", false
}

// TestMergeCycleReportedOnce: a mapping that merges itself by several
// routes (through a list, and through another mapping that merges it) is
// one problem, reported once; it was reported four times.
func TestMergeCycleReportedOnce(t *testing.T) {
	_, p := Decode([]byte("auth: &a {<<: [*a, {<<: *a}]}\npools: [&p {<<: [*p]}]"))
	want := Problems{"auth: << merges a mapping into itself (line 1)", "pools[0]: << merges a mapping into itself (line 2)"}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("problems %q, want %q", p, want)
	}
}

// FuzzParse: any input either decodes and passes the file's own rules or
// lists problems by field path, each once; it never panics, and an
// accepted config has the pools and tenants the file requires. The parts'
// rules on top are fuzzed by shared/assemble's FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("a: &x {b: 1}\nc: [*x, *x, {<<: *x}]\nauth: {issuer: x, issuer: y}\nlisten: 1"))
	f.Add([]byte("auth: &a {<<: [*a, {<<: *a}]}\npools: [&p {<<: [*p]}]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parse(b, env(nil))
		if err != nil {
			var p Problems
			if !errors.As(err, &p) || len(p) == 0 {
				t.Fatalf("error is not a problem list: %v", err)
			}
			if line, twice := repeated(p); twice {
				t.Fatalf("%q reported twice:\n%v", line, p)
			}
			return
		}
		if len(c.Pools) == 0 || len(c.Tenants) == 0 {
			t.Fatalf("accepted an incomplete config: %+v", c)
		}
	})
}
