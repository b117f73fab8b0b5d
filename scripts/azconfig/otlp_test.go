package azconfig

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"testing"

	"github.com/llmgw/gateway/shared/telemetry/otlp"
)

// TestOtlpHeadersParseAlike: the gateway's
// OTEL_EXPORTER_OTLP_HEADERS parser makes of each shared case what
// gateway.bicep's otlpHeaders gives the Container Apps agent
// (scripts/bicepcheck evaluates that on the same file), so a header list
// means one thing on Lambda, on a collector and through the agent.
func TestOtlpHeadersParseAlike(t *testing.T) {
	t.Parallel()
	var fixture struct {
		Cases []struct {
			In   string            `json:"in"`
			Want map[string]string `json:"want"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(root, "scripts", "bicepcheck", "testdata", "otlp-headers.json"))), &fixture); err != nil {
		t.Fatal(err)
	}
	if len(fixture.Cases) < 8 {
		t.Fatalf("%d cases", len(fixture.Cases))
	}
	for _, c := range fixture.Cases {
		env := map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "https://otlp.example.com:4317",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_HEADERS":  c.In,
		}
		cfg, err := otlp.FromEnv(func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("%q: %v", c.In, err)
		}
		got := cfg.TracesHeaders
		if got == nil {
			got = map[string]string{}
		}
		if !maps.Equal(got, c.Want) {
			t.Errorf("OTEL_EXPORTER_OTLP_HEADERS=%q: the gateway sends %v, the agent %v", c.In, got, c.Want)
		}
	}
	// The endpoint rule main.bicep applies: a scheme is required.
	for _, u := range []string{"otlp.example.com:4317", "https://"} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": u, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
		if _, err := otlp.FromEnv(func(k string) string { return env[k] }); err == nil {
			t.Errorf("the gateway takes OTLP endpoint %q, which main.bicep refuses", u)
		}
	}
}
