package infra

import (
	"reflect"
	"testing"

	"github.com/llmgw/gateway/shared/telemetry/otlp"
)

// TestTelemetrySecretAndLayer: telemetry to an endpoint
// that wants a key is a deploy parameter, not a console edit the next
// deploy undoes: OtlpHeadersSecret reaches the function as
// OTEL_EXPORTER_OTLP_HEADERS through a Secrets Manager reference (pinned
// by its version like the other secrets), and a collector layer is added
// per architecture. Unset, neither exists.
func TestTelemetrySecretAndLayer(t *testing.T) {
	const layerArm = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-collector-arm64-ver-0-117-0:1"
	const layerX86 = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-collector-amd64-ver-0-117-0:1"
	const version = "a1b2c3d4-e5f6-7890-abcd-ef1234567890"
	for _, tc := range []struct {
		name       string
		params     map[string]any
		headers    string
		wantLayers []string
	}{
		{"unset", nil, "", nil},
		{"headers", map[string]any{"OtlpEndpoint": "https://otlp.example.com", "OtlpHeadersSecret": "gateway/otlp-headers"}, "{{resolve:secretsmanager:gateway/otlp-headers}}", nil},
		{"headers pinned", map[string]any{"OtlpEndpoint": "https://otlp.example.com", "OtlpHeadersSecret": "gateway/otlp-headers", "OtlpHeadersSecretVersion": version},
			"{{resolve:secretsmanager:gateway/otlp-headers:SecretString:::" + version + "}}", nil},
		{"arm64 layer", map[string]any{"OtlpEndpoint": "http://localhost:4318", "CollectorLayerArm64": layerArm, "CollectorLayerX86": layerX86}, "", []string{layerArm}},
		{"x86_64 layer", map[string]any{"Architecture": "x86_64", "OtlpEndpoint": "http://localhost:4318", "CollectorLayerArm64": layerArm, "CollectorLayerX86": layerX86}, "", []string{layerX86}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fn := function(t, must(open(t, tc.params)))
			got, ok := fn.Environment.Variables["OTEL_EXPORTER_OTLP_HEADERS"]
			if got != tc.headers || ok != (tc.headers != "") {
				t.Errorf("OTEL_EXPORTER_OTLP_HEADERS = %q (set %v), want %q", got, ok, tc.headers)
			}
			if !reflect.DeepEqual(fn.Layers, tc.wantLayers) {
				t.Errorf("Layers %v, want %v", fn.Layers, tc.wantLayers)
			}
		})
	}
	for _, bad := range []string{"arn:aws:lambda:us-east-1:901920570463:layer:otel", "otel-layer", "arn:aws:s3:::bucket"} {
		if patternAllows(t, "CollectorLayerArm64", bad) {
			t.Errorf("CollectorLayerArm64 allows %q", bad)
		}
	}
}

// TestDeploySampler: with telemetry on, the function records one trace
// in ten (parentbased_traceidratio, 0.1), as the gateway reads it; the
// gateway's own default, the specification's, records every trace.
// Telemetry off sets neither variable.
func TestDeploySampler(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params map[string]any
		on     bool
	}{
		{"off", nil, false},
		{"on", map[string]any{"OtlpEndpoint": "https://otlp.example.com"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := function(t, must(open(t, tc.params))).Environment.Variables
			for _, k := range []string{"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
				if _, ok := vars[k]; ok != tc.on {
					t.Errorf("%s set %v, want %v", k, ok, tc.on)
				}
			}
			if !tc.on {
				return
			}
			c, err := otlp.FromEnv(func(k string) string { return vars[k] })
			if err != nil || c.Sampler != "parentbased_traceidratio" || c.SamplerRatio != 0.1 {
				t.Errorf("the gateway reads sampler %s ratio %v (%v), want parentbased_traceidratio 0.1", c.Sampler, c.SamplerRatio, err)
			}
		})
	}
}
