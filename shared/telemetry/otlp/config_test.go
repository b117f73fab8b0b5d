package otlp

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     map[string]string
		traces  string
		metrics string
		check   func(t *testing.T, c Config)
		err     error
	}{
		{name: "off without an endpoint", env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{name: "one endpoint for both", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"},
			traces: "http://127.0.0.1:4318/v1/traces", metrics: "http://127.0.0.1:4318/v1/metrics",
			check: func(t *testing.T, c Config) {
				if c.ServiceName != "llmgw" || c.Timeout != 10*time.Second || c.Interval != time.Minute || c.Delta || c.Gzip {
					t.Errorf("defaults %+v", c)
				}
			}},
		{name: "per signal, one off", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b/t", "OTEL_METRICS_EXPORTER": "none"}, traces: "https://b/t"},
		{name: "disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "true"}},
		{name: "headers, resource, settings", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dcret, x=1", "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x=2",
			"OTEL_RESOURCE_ATTRIBUTES": "service.name=gw,deployment.environment.name=prod", "OTEL_EXPORTER_OTLP_TIMEOUT": "500",
			"OTEL_METRIC_EXPORT_INTERVAL": "1000", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip", "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE": "delta"},
			traces: "http://a:4318/v1/traces", metrics: "http://a:4318/v1/metrics",
			check: func(t *testing.T, c Config) {
				if c.TracesHeaders["api-key"] != "s=cret" || c.TracesHeaders["x"] != "1" || c.MetricsHeaders["x"] != "2" {
					t.Errorf("headers %v %v", c.TracesHeaders, c.MetricsHeaders)
				}
				if c.ServiceName != "gw" || c.Resource["deployment.environment.name"] != "prod" || c.Timeout != 500*time.Millisecond ||
					c.Interval != time.Second || !c.Gzip || !c.Delta {
					t.Errorf("settings %+v", c)
				}
			}},
		{name: "TLS files, per signal over common", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://a",
			"OTEL_EXPORTER_OTLP_CERTIFICATE": "ca.pem", "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE": "m.pem",
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "c.pem", "OTEL_EXPORTER_OTLP_CLIENT_KEY": "k.pem"},
			traces: "https://a/v1/traces", metrics: "https://a/v1/metrics",
			check: func(t *testing.T, c Config) {
				if c.TracesTLS != (TLSFiles{"ca.pem", "c.pem", "k.pem"}) || c.MetricsTLS != (TLSFiles{"m.pem", "c.pem", "k.pem"}) {
					t.Errorf("tls %+v %+v", c.TracesTLS, c.MetricsTLS)
				}
			}},
		// What the Azure Container Apps managed agent injects.
		{name: "grpc: the Export methods at the endpoint's host", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel.service.k8se-apps:4317/", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			traces: "http://otel.service.k8se-apps:4317" + grpcTracesPath, metrics: "http://otel.service.k8se-apps:4317" + grpcMetricsPath,
			check: func(t *testing.T, c Config) {
				if !c.TracesGRPC || !c.MetricsGRPC {
					t.Errorf("grpc %v %v", c.TracesGRPC, c.MetricsGRPC)
				}
			}},
		{name: "grpc for one signal, its own endpoint's path dropped", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "https://m:4317/x"},
			traces: "http://a:4318/v1/traces", metrics: "https://m:4317" + grpcMetricsPath,
			check: func(t *testing.T, c Config) {
				if c.TracesGRPC || !c.MetricsGRPC {
					t.Errorf("grpc %v %v", c.TracesGRPC, c.MetricsGRPC)
				}
			}},
		{name: "span batching", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "700",
			"OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "500"},
			traces: "http://a:4318/v1/traces", metrics: "http://a:4318/v1/metrics",
			check: func(t *testing.T, c Config) {
				// A batch larger than the queue is the queue (the
				// specification's rule); the export timeout defaults to
				// the exporter's.
				if c.BatchDelay != 250*time.Millisecond || c.QueueSize != 100 || c.BatchSize != 100 || c.BatchTimeout != 700*time.Millisecond {
					t.Errorf("batching %v %d %d %v", c.BatchDelay, c.QueueSize, c.BatchSize, c.BatchTimeout)
				}
			}},
		{name: "span batching defaults", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_BSP_EXPORT_TIMEOUT": "3000"},
			traces: "http://a:4318/v1/traces", metrics: "http://a:4318/v1/metrics",
			check: func(t *testing.T, c Config) {
				if c.BatchDelay != DefaultBatchDelay || c.QueueSize != DefaultQueueSize || c.BatchSize != DefaultBatchSize || c.BatchTimeout != 3*time.Second {
					t.Errorf("batching %v %d %d %v", c.BatchDelay, c.QueueSize, c.BatchSize, c.BatchTimeout)
				}
			}},
		{name: "http/json refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			traces: "http://a:4318/v1/traces", metrics: "http://a:4318/v1/metrics", err: ErrProtocol},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := FromEnv(func(k string) string { return c.env[k] })
			if !errors.Is(err, c.err) || (c.err == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if got.TracesURL != c.traces || got.MetricsURL != c.metrics || got.Enabled() != (c.traces+c.metrics != "") {
				t.Fatalf("urls %q %q, want %q %q", got.TracesURL, got.MetricsURL, c.traces, c.metrics)
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

func TestFromEnvBadValues(t *testing.T) {
	t.Parallel()
	_, err := FromEnv(func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318", "OTEL_EXPORTER_OTLP_TIMEOUT": "soon",
			"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": "k.pem", "OTEL_BSP_MAX_QUEUE_SIZE": "-1", "OTEL_BSP_SCHEDULE_DELAY": "5s"}[k]
	})
	if err == nil {
		t.Fatal("a URL without a scheme and a bad timeout passed")
	}
	if n := len(strings.Split(err.Error(), "\n")); n != 6 {
		t.Fatalf("%d problems, want 6 (two URLs, timeout, key without certificate, queue size, delay):\n%v", n, err)
	}
	for _, name := range []string{"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%v does not name %s", err, name)
		}
	}
}
