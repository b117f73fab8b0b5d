package main

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/assemble"
)

// TestReadyTextTenants: what `make run` prints works on the demo config.
// The curl lines (contoso's token) name models contoso may use; every
// tenant a mint line names exists and may use what the lines say (gpt-4o
// and the Claude models); the agents' default model names are served;
// contoso has token budgets and tailspin a quota smaller than a prompt.
// Before, the mint line named a tenant that could use
// neither the headline model nor any Claude model, and no tenant had a
// budget.
func TestReadyTextTenants(t *testing.T) {
	c, err := assemble.Load(filepath.Join("..", "..", "dev", "demo.yaml"), "", func(k string) string {
		return map[string]string{"DEMO_BACKEND_KEY": "k", "DEMO_KEYS_SECRET": demoKeysSecret}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	models := map[string][]string{}
	for _, tn := range c.Tenants {
		models[tn.ID] = tn.Models
	}
	text := readyText("http://127.0.0.1:8080", "http://127.0.0.1:9100", "127.0.0.1:9200", "TOKEN", "llmgw-KEY", "")
	// The demo key: its curl line, and the config that makes it (the
	// runner's secret variable, the role its operator token carries);
	// functions/gateway TestDemoKey makes and uses it.
	if !strings.Contains(text, "-H 'x-api-key: llmgw-KEY'") {
		t.Error("the ready text has no curl line with the demo key")
	}
	if ks := assemble.Keys(c); ks.SecretEnv != "DEMO_KEYS_SECRET" || ks.AdminRole != demoAdminRole {
		t.Errorf("demo api_keys: %+v", ks)
	}

	curl := regexp.MustCompile(`"model":"([^"]+)"`).FindAllStringSubmatch(text, -1)
	if len(curl) < 2 {
		t.Fatalf("the ready text has %d curl lines with a model", len(curl))
	}
	for _, m := range curl {
		if !slices.Contains(models["contoso"], m[1]) {
			t.Errorf("a curl line (contoso's token) asks for %q, which contoso may not use", m[1])
		}
	}
	// Codex 0.171, the Agents SDK 0.20 and Claude Code 2.1.332 ask for
	// these when no model is set.
	for _, m := range []string{"gpt-6.2-sol", "gpt-5.6-luna", "claude-opus-5-5"} {
		if !slices.Contains(models["contoso"], m) {
			t.Errorf("contoso may not use %q, an agent's default model", m)
		}
	}
	mints := regexp.MustCompile(`tenant=([a-z0-9-]+)`).FindAllStringSubmatch(text, -1)
	if len(mints) < 2 {
		t.Fatalf("the ready text has %d mint lines", len(mints))
	}
	for _, m := range mints {
		allowed, ok := models[m[1]]
		if !ok {
			t.Errorf("a mint line names tenant %q, which the demo lacks", m[1])
			continue
		}
		for _, want := range []string{"gpt-4o", "claude-sonnet-5-5", "claude-haiku-5-5", "claude-opus-5-5"} {
			if !slices.Contains(allowed, want) {
				t.Errorf("tenant %q (a mint line) may not use %q", m[1], want)
			}
		}
	}
	for _, tn := range c.Tenants {
		switch tn.ID {
		case "contoso":
			if tn.TokensPerMinute == 0 || tn.TokenQuota == 0 {
				t.Errorf("contoso has no token budget: %+v", tn)
			}
		case "tailspin":
			if tn.TokenQuota == 0 || tn.TokenQuota > 5000 || !strings.Contains(text, "tenant=tailspin") {
				t.Errorf("tailspin's quota %d cannot show the refusal, or no line mints it", tn.TokenQuota)
			}
		}
	}
	if c.Server.Limits.MaxBodyBytes < 32<<20 {
		t.Errorf("max_body_bytes %d: below what Claude Code sends (32 MB)", c.Server.Limits.MaxBodyBytes)
	}
}
