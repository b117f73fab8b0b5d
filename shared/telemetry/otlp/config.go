package otlp

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/shared/telemetry"
)

// Config is the exporter's settings, read from the standard OpenTelemetry
// environment variables by FromEnv. The zero value exports nothing.
type Config struct {
	// TracesURL and MetricsURL are the full URLs of each signal ("" = that
	// signal is off): OTLP/HTTP's /v1/traces and /v1/metrics, or with gRPC
	// the Export method's path.
	TracesURL, MetricsURL string
	// TracesGRPC and MetricsGRPC export that signal over OTLP/gRPC
	// (protocol grpc: HTTP/2, cleartext for an http URL) instead of
	// OTLP/HTTP. Default false (http/protobuf). The Azure Container Apps
	// managed OpenTelemetry agent takes gRPC only.
	TracesGRPC, MetricsGRPC bool
	// TracesHeaders and MetricsHeaders are sent with every export (an
	// Authorization or api-key header of the collector's).
	TracesHeaders, MetricsHeaders map[string]string
	// TracesTLS and MetricsTLS name the PEM files of a private CA and of
	// a client certificate (zero: the system's roots, no client
	// certificate).
	TracesTLS, MetricsTLS TLSFiles
	// Timeout bounds one export. Default DefaultTimeout.
	Timeout time.Duration
	// Gzip compresses exports.
	Gzip bool
	// Interval is how often metrics are exported. Default
	// DefaultInterval; Lambda exports at the end of each invocation too.
	Interval time.Duration
	// Delta exports counters and histograms as deltas (cumulative by
	// default).
	Delta bool
	// ServiceName is service.name. Default "llmgw".
	ServiceName string
	// Resource is OTEL_RESOURCE_ATTRIBUTES, key by key.
	Resource map[string]string
	// Settings is what the config file's telemetry section sets of the
	// export (trust_traceparent, flush_timeout), its defaults and rules
	// telemetry.Settings'; New applies its defaults.
	telemetry.Settings
	// Sampler is OTEL_TRACES_SAMPLER, which requests' spans are recorded
	// and exported: always_on, always_off, traceidratio, or each of them
	// parentbased_ (a trusted caller's sampled flag decides its trace).
	// Default DefaultSampler. A request whose span is not recorded costs
	// next to nothing in spans; its metrics are recorded all the same.
	Sampler string
	// SamplerRatio is OTEL_TRACES_SAMPLER_ARG, the share of traces the
	// ratio samplers record, from 0 to 1. Default 1 (the
	// specification's).
	SamplerRatio float64
	// BatchDelay (OTEL_BSP_SCHEDULE_DELAY) is how long an ended span may
	// wait to be exported, BatchSize (OTEL_BSP_MAX_EXPORT_BATCH_SIZE) how
	// many spans make a batch that is exported at once, QueueSize
	// (OTEL_BSP_MAX_QUEUE_SIZE) how many may wait (more are dropped), and
	// BatchTimeout (OTEL_BSP_EXPORT_TIMEOUT) bounds a background export.
	// Defaults DefaultBatchDelay, DefaultBatchSize (at most QueueSize),
	// DefaultQueueSize and Timeout.
	BatchDelay           time.Duration
	BatchSize, QueueSize int
	BatchTimeout         time.Duration
	// CardinalityLimit bounds the attribute sets of each metric; beyond it
	// new sets fold into one otel.metric.overflow=true series, as the SDK
	// does (aggregation; the SDK's own for the cold-start gauges).
	// Default DefaultCardinalityLimit.
	CardinalityLimit int
	// Start is the process's start, for the cold-start metrics (zero: not
	// recorded).
	Start time.Time
}

// TLSFiles are the PEM files of OTEL_EXPORTER_OTLP_CERTIFICATE,
// _CLIENT_CERTIFICATE and _CLIENT_KEY (or their per-signal forms).
type TLSFiles struct {
	CA, Cert, Key string
}

// DefaultCardinalityLimit bounds each metric's attribute sets: tenants ×
// models × routes × statuses stay far below it in any config this gateway
// is sized for (the tenant and model attributes only ever take values from
// config).
const DefaultCardinalityLimit = 2000

// DefaultSampler is the OpenTelemetry specification's default,
// parentbased_always_on: every request's trace is recorded (a trusted
// caller's sampled flag decides its own). A recorded trace costs a
// request about 2 KB and 5 µs of CPU (its spans, their batching and
// export), where its metrics cost about 0.2 KB and 0.6 µs
// (docs/telemetry.md has the figures), so the deploys (bicep, SAM) set
// OTEL_TRACES_SAMPLER=parentbased_traceidratio and
// OTEL_TRACES_SAMPLER_ARG=0.1: one trace in ten. Every request is in
// the access log and the metrics either way.
const DefaultSampler = "parentbased_always_on"

// ErrSampler is an OTEL_TRACES_SAMPLER the gateway does not know, or an
// OTEL_TRACES_SAMPLER_ARG that is not a ratio.
var ErrSampler = errors.New("unknown sampler")

// The OpenTelemetry specification's defaults for OTEL_EXPORTER_OTLP_TIMEOUT
// and OTEL_METRIC_EXPORT_INTERVAL.
const (
	DefaultTimeout  = 10 * time.Second
	DefaultInterval = 60 * time.Second
)

// Enabled reports whether any signal is exported.
func (c Config) Enabled() bool { return c.TracesURL != "" || c.MetricsURL != "" }

// ErrProtocol is returned for an OTEL_EXPORTER_OTLP_PROTOCOL other than
// http/protobuf and grpc (http/json is not supported).
var ErrProtocol = errors.New("only http/protobuf and grpc are supported")

// The OTLP/gRPC Export methods, as paths of the endpoint's URL.
const (
	grpcTracesPath  = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
	grpcMetricsPath = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
)

// FromEnv reads the standard variables: OTEL_SDK_DISABLED,
// OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT, _METRICS_ENDPOINT),
// OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the default, or grpc; and
// per signal),
// OTEL_EXPORTER_OTLP_HEADERS (and per signal), _TIMEOUT, _COMPRESSION,
// _CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY (and per
// signal), OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER (none turns a
// signal off), OTEL_METRIC_EXPORT_INTERVAL,
// OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, OTEL_TRACES_SAMPLER
// and _ARG, OTEL_BSP_SCHEDULE_DELAY, _EXPORT_TIMEOUT, _MAX_QUEUE_SIZE and
// _MAX_EXPORT_BATCH_SIZE, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. With no
// endpoint set, nothing is exported.
func FromEnv(getenv func(string) string) (Config, error) {
	var c Config
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return c, nil
	}
	var problems []error
	for _, s := range []string{"", "_TRACES", "_METRICS"} {
		if p := getenv("OTEL_EXPORTER_OTLP" + s + "_PROTOCOL"); p != "" && p != "http/protobuf" && p != "grpc" {
			problems = append(problems, fmt.Errorf("OTEL_EXPORTER_OTLP%s_PROTOCOL=%s: %w", s, p, ErrProtocol))
		}
	}
	isGRPC := func(name string) bool {
		p := getenv("OTEL_EXPORTER_OTLP_" + name + "_PROTOCOL")
		if p == "" {
			p = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		return p == "grpc"
	}
	c.TracesGRPC, c.MetricsGRPC = isGRPC("TRACES"), isGRPC("METRICS")
	// signal is one signal's URL. OTLP/HTTP appends path to the common
	// endpoint and takes a per-signal one as it is; gRPC takes either's
	// scheme and host and calls the Export method there (the
	// specification's endpoint for gRPC has no path).
	signal := func(name, path, method string, grpc bool) string {
		if strings.EqualFold(getenv("OTEL_"+name+"_EXPORTER"), "none") {
			return ""
		}
		u := getenv("OTEL_EXPORTER_OTLP_" + name + "_ENDPOINT")
		own := u != ""
		if !own {
			u = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		switch {
		case u == "":
			return ""
		case grpc:
			if p, err := url.Parse(u); err == nil && p.Host != "" {
				return p.Scheme + "://" + p.Host + method
			}
			return u
		case own:
			return u
		}
		return strings.TrimRight(u, "/") + path
	}
	c.TracesURL = signal("TRACES", "/v1/traces", grpcTracesPath, c.TracesGRPC)
	c.MetricsURL = signal("METRICS", "/v1/metrics", grpcMetricsPath, c.MetricsGRPC)
	for _, u := range []string{c.TracesURL, c.MetricsURL} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			problems = append(problems, fmt.Errorf("OTLP endpoint %q: not an http(s) URL", u))
		}
	}
	common := parsePairs(getenv("OTEL_EXPORTER_OTLP_HEADERS"))
	c.TracesHeaders = merge(common, parsePairs(getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS")))
	c.MetricsHeaders = merge(common, parsePairs(getenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS")))
	tlsFiles := func(signal string) TLSFiles {
		get := func(v string) string {
			if s := getenv("OTEL_EXPORTER_OTLP_" + signal + v); s != "" {
				return s
			}
			return getenv("OTEL_EXPORTER_OTLP_" + v)
		}
		return TLSFiles{CA: get("CERTIFICATE"), Cert: get("CLIENT_CERTIFICATE"), Key: get("CLIENT_KEY")}
	}
	c.TracesTLS, c.MetricsTLS = tlsFiles("TRACES_"), tlsFiles("METRICS_")
	for _, t := range []TLSFiles{c.TracesTLS, c.MetricsTLS} {
		if (t.Cert == "") != (t.Key == "") {
			problems = append(problems, errors.New("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and _CLIENT_KEY go together"))
			break
		}
	}
	// count is a positive whole number of unit (def when unset).
	count := func(name string, def int, unit string) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			problems = append(problems, fmt.Errorf("%s=%q: want a positive number%s", name, v, unit))
			return def
		}
		return n
	}
	ms := func(name string, def time.Duration) time.Duration {
		return time.Duration(count(name, int(def/time.Millisecond), " of milliseconds")) * time.Millisecond
	}
	c.Timeout = ms("OTEL_EXPORTER_OTLP_TIMEOUT", DefaultTimeout)
	c.Interval = ms("OTEL_METRIC_EXPORT_INTERVAL", DefaultInterval)
	c.BatchDelay = ms("OTEL_BSP_SCHEDULE_DELAY", DefaultBatchDelay)
	c.BatchTimeout = ms("OTEL_BSP_EXPORT_TIMEOUT", c.Timeout)
	c.QueueSize = count("OTEL_BSP_MAX_QUEUE_SIZE", DefaultQueueSize, "")
	c.BatchSize = min(count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DefaultBatchSize, ""), c.QueueSize)
	c.Gzip = getenv("OTEL_EXPORTER_OTLP_COMPRESSION") == "gzip"
	c.Delta = strings.EqualFold(getenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"), "delta")
	var err error
	if c.Sampler, c.SamplerRatio, err = parseSampler(getenv("OTEL_TRACES_SAMPLER"), getenv("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		problems = append(problems, err)
	}
	c.Resource = parsePairs(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	c.ServiceName = getenv("OTEL_SERVICE_NAME")
	if c.ServiceName == "" {
		c.ServiceName = c.Resource["service.name"]
	}
	if c.ServiceName == "" {
		c.ServiceName = "llmgw"
	}
	return c, errors.Join(problems...)
}

// parseSampler reads OTEL_TRACES_SAMPLER (default DefaultSampler) and
// its argument: a ratio from 0 to 1 for the ratio samplers (default 1),
// ignored by the others, as the specification has it.
func parseSampler(name, arg string) (string, float64, error) {
	if name == "" {
		name = DefaultSampler
	}
	switch name {
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return name, 1, nil
	case "traceidratio", "parentbased_traceidratio":
	default:
		return name, 1, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: %w (always_on, always_off, traceidratio and their parentbased_ forms)", name, ErrSampler)
	}
	if arg == "" {
		return name, 1, nil
	}
	r, err := strconv.ParseFloat(arg, 64)
	if err != nil || !(r >= 0 && r <= 1) {
		return name, 1, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: %w: want a ratio from 0 to 1", arg, ErrSampler)
	}
	return name, r, nil
}

// parsePairs reads the specification's key=value,key=value lists
// (values percent-decoded); malformed entries are skipped.
func parsePairs(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			continue
		}
		if d, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
			m[k] = d
		}
	}
	return m
}

func merge(a, b map[string]string) map[string]string {
	if len(a)+len(b) == 0 {
		return nil
	}
	m := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}
