package assemble

import (
	"slices"
	"strings"
	"testing"
)

// aliasBase serves m1 (as "served") and m2 (as itself) from two pools;
// t1 may use m1, t2 m2.
const aliasBase = `
auth: {issuer: "https://issuer.example", audiences: [gw]}
tenants:
  - {id: t1, models: [m1], requests: 10}
  - {id: t2, models: [m2], requests: 10}
pools:
  - {name: p1, kind: vllm, models: {m1: served}, endpoints: [{url: "http://127.0.0.1:8000"}]}
  - {name: p2, kind: openai, models: {m2: ""}, endpoints: [{url: "http://127.0.0.1:8001"}]}
`

// TestAliases: an alias is served by its target's pool under the
// target's backend name and allowed to every tenant allowed the target,
// so routing, the allow-lists and /v1/models (which list the tenant
// table's models) see it; a tenant may list an alias alone. Aliases
// serve clients that ask for a default model name of their own.
func TestAliases(t *testing.T) {
	c, err := Parse([]byte(aliasBase+"aliases: {gpt-6.2-sol: m1, gpt-5.6-luna: m2, only-alias: m2}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Pools[0].Models["gpt-6.2-sol"]; got != "served" {
		t.Errorf("pool p1 serves the alias as %q, want the target's backend name %q", got, "served")
	}
	if got, ok := c.Pools[1].Models["gpt-5.6-luna"]; !ok || got != "m2" {
		t.Errorf("pool p2 serves the alias as %q (%v), want %q: an empty backend name is the target's", got, ok, "m2")
	}
	if _, ok := c.Pools[0].Models["gpt-5.6-luna"]; ok {
		t.Error("an alias is served by a pool that does not serve its target")
	}
	if got := c.Tenants[0].Models; !slices.Equal(got, []string{"m1", "gpt-6.2-sol"}) {
		t.Errorf("t1 may use %q, want m1 and its alias", got)
	}
	if got := c.Tenants[1].Models; !slices.Equal(got, []string{"m2", "gpt-5.6-luna", "only-alias"}) {
		t.Errorf("t2 may use %q, want m2 and its aliases", got)
	}

	listed, err := Parse([]byte(strings.Replace(aliasBase, "models: [m2], requests", "models: [luna], requests", 1)+"aliases: {luna: m2}\n"), env(nil))
	if err != nil {
		t.Fatalf("a tenant listing an alias alone: %v", err)
	}
	if got := listed.Tenants[1].Models; !slices.Equal(got, []string{"luna"}) {
		t.Errorf("t2 may use %q, want only the alias it lists", got)
	}
}

// TestAliasProblems: every bad alias is named by its field path, at once.
func TestAliasProblems(t *testing.T) {
	tests := []struct {
		name, aliases string
		wants         []string
	}{
		{"shadows a pool's model", "{m2: m1}", []string{`aliases.m2: pool "p2" serves "m2" itself`}},
		{"unknown target", "{x: nope}", []string{`aliases.x: model "nope" is not served by any pool`}},
		{"alias of an alias", "{a: m1, b: a}", []string{`aliases.b: "a" is an alias itself; name the model it stands for, "m1"`}},
		{"empty target", `{x: ""}`, []string{"aliases.x: required"}},
		{"all at once", "{m1: m2, y: nope}", []string{`aliases.m1: pool "p1"`, `aliases.y: model "nope"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(aliasBase+"aliases: "+tt.aliases+"\n"), env(nil))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	// A tenant may not list an unknown name just because aliases exist.
	_, err := Parse([]byte(strings.Replace(aliasBase, "models: [m2], requests", "models: [nope], requests", 1)+"aliases: {luna: m2}\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), `tenants[1].models[0]: model "nope" is not served by any pool`) {
		t.Fatalf("err %v", err)
	}
}
