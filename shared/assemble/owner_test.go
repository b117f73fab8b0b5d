package assemble

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/config"
)

// everySection is minimal with every list and optional section holding
// one element, so that a walk over it reaches every number a file can set.
const everySection = `
auth: {issuer: "https://issuer.example", audiences: [gw], project_claim: proj}
tenants:
  - id: t1
    models: [m1]
    requests: 10
    token_quota: 100
    quota_period: day
    projects: [{name: a}]
    project_default: {}
    user_default: {}
    features: [{name: web_search}]
pools:
  - name: p1
    kind: azure-openai
    models: {m1: served}
    keepalive_interval: 1s
    first_token_timeout: 1s
    endpoints: [{url: "https://a.example", auth: entra, entra: {credential: managed-identity}}]
store: {backend: redis, redis_url_env: R, redis_entra: {credential: managed-identity, username: u}}
upstream: {keepalive_interval: 1s}
lambda: {min_remaining: 1s}
prices:
  currency: USD
  version: v1
  models: [{model: m1, input: "1", output: "2", long_context: {above_input_tokens: 10, input_multiplier: "2", output_multiplier: "1.5"}}]
`

// TestOneRulePerNumber sets each signed number of the config, one at a
// time, below zero and wants exactly one problem naming it: the file's
// generic rule or the rule of the part that takes the setting, never
// both and never neither.
func TestOneRulePerNumber(t *testing.T) {
	getenv := env(map[string]string{"R": "redis://x"})
	c, p := config.Decode([]byte(everySection))
	if len(p) > 0 {
		t.Fatal(p)
	}
	base := problems(c, getenv)
	n := 0
	eachNumber(reflect.ValueOf(c).Elem(), "", func(v reflect.Value, field string) {
		if strings.HasPrefix(field, "limiter.") && strings.Contains(field, "dial_timeout") {
			return // the deprecated spelling, moved to store by Decode; below
		}
		n++
		old := v.Int()
		v.SetInt(-1)
		defer v.SetInt(old)
		got := count(problems(c, getenv), field) - count(base, field)
		if got != 1 {
			t.Errorf("%s: -1 gives %d problems, want 1:\n%v", field, got, problems(c, getenv))
		}
	})
	if n < 40 {
		t.Fatalf("walked %d numbers; the walk misses sections", n)
	}
	// The limiter's deprecated spellings of store settings: the part's
	// rule, named as the file wrote it, once.
	for field, section := range map[string]string{
		"limiter.dial_timeout":        "{store: redis, redis_url_env: R, dial_timeout: -1s}",
		"limiter.redis_entra.timeout": "{store: redis, redis_url_env: R, redis_entra: {credential: managed-identity, username: u, timeout: -1s}}",
	} {
		cfg := minimal + "limiter: " + section + "\n"
		_, err := Parse([]byte(cfg), getenv)
		var p config.Problems
		if !errors.As(err, &p) || count(p, field) != 1 {
			t.Errorf("%s: -1s gives %v, want one problem naming it", field, err)
		}
	}
}

// count is how many problems in p name field.
func count(p config.Problems, field string) int {
	n := 0
	for _, s := range p {
		if strings.HasPrefix(s, field+": ") {
			n++
		}
	}
	return n
}

// eachNumber calls fn with every signed integer (count or duration) under
// v and its field path as the file writes it.
func eachNumber(v reflect.Value, path string, fn func(reflect.Value, string)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			eachNumber(v.Elem(), path, fn)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			switch {
			case name == "-" || !f.IsExported():
			case strings.Contains(flags, "inline"):
				eachNumber(v.Field(i), path, fn)
			case path == "":
				eachNumber(v.Field(i), name, fn)
			default:
				eachNumber(v.Field(i), path+"."+name, fn)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			eachNumber(v.Index(i), fmt.Sprintf("%s[%d]", path, i), fn)
		}
	case reflect.Int, reflect.Int64:
		fn(v, path)
	}
}

// TestOneProblemPerValue: a value that breaks more than one rule is
// reported once, by the rule that owns its field: a tenant's value that
// does not parse, not again by the budget's or the spend rules on what it
// would have been (a spend amount was also told it "needs prices"); an
// organization or project on a kind that does not send it, not again as
// a header value it would have been (both used to be reported: config's
// header rule and upstream's kind rule).
func TestOneProblemPerValue(t *testing.T) {
	tenant := func(row string) string { return strings.Replace(minimal, "requests: 10}", "requests: 10, "+row+"}", 1) }
	endpoint := func(kind, extra string) string {
		cfg := strings.Replace(minimal, `{url: "http://127.0.0.1:8000"}`, `{url: "http://127.0.0.1:8000", `+extra+`}`, 1)
		return strings.Replace(cfg, "kind: vllm", "kind: "+kind, 1)
	}
	for _, tc := range []struct{ field, cfg, want string }{
		{"tenants[0].quota_period", tenant("token_quota: 100, quota_period: weekly"), "must be day or month"},
		{"tenants[0].spend_per_month", tenant(`spend_per_month: "lots"`), `"lots" is not a decimal amount`},
		{"pools[0].endpoints[0].organization", endpoint("vllm", `organization: "org\r\nX-Evil: 1"`), "only for openai pools, not vllm"},
		{"pools[0].endpoints[0].project", endpoint("azure-openai", `project: " proj"`), "only for openai pools, not azure-openai"},
		{"pools[0].endpoints[0].organization", endpoint("openai", `organization: "org\r\nX-Evil: 1"`), "must be a printable header value"},
	} {
		_, err := Parse([]byte(tc.cfg), env(nil))
		var p config.Problems
		if !errors.As(err, &p) || count(p, tc.field) != 1 || !strings.Contains(err.Error(), tc.field+": "+tc.want) {
			t.Errorf("%s: %v, want one problem naming it: %q", tc.field, err, tc.want)
		}
	}
}
