package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testing/syncbuf"
	"github.com/llmgw/gateway/shared/config"
)

// TestConfigOverlay: $GATEWAY_CONFIG_OVERLAY is merged over the config file
// before validation, by -check and start-up alike: the AWS template's
// per-tenant stacks run the one shipped config with their own tenant row
// and key prefix this way.
func TestConfigOverlay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := writeFile(path, checkBase); err != nil {
		t.Fatal(err)
	}
	check := func(overlay string) (string, error) {
		var out syncbuf.Buffer
		getenv := func(k string) string {
			if k == "GATEWAY_CONFIG_OVERLAY" {
				return overlay
			}
			return ""
		}
		err := run(context.Background(), []string{"gateway", "-check", "-config", path}, getenv, &out, &out)
		return out.String(), err
	}
	if out, err := check(`{"tenants":[{"id":"acme","name":"acme","models":["m2"],"requests":5}],"limiter":{"key_prefix":"llmgw:acme:"}}`); err != nil || !strings.Contains(out, "config ok") {
		t.Fatalf("a valid overlay: %v\n%s", err, out)
	}
	_, err := check(`{"tenants":[{"id":"acme","models":["m9"],"requests":5}]}`)
	var p config.Problems
	if !errors.As(err, &p) || !strings.Contains(err.Error(), `tenants[0].models[0]: model "m9" is not served`) {
		t.Fatalf("an overlay naming an unknown model: %v", err)
	}
}
