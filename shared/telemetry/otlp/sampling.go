package otlp

import (
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// sampler is the SDK's sampler of that name (OTEL_TRACES_SAMPLER; FromEnv
// checked it, "" is DefaultSampler). The ratio samplers decide on the
// trace ID, so a trace this gateway records is one a ratio sampler
// downstream records too; the parent-based ones follow a valid parent's
// sampled flag (a trusted caller's, or the request's for an attempt).
func sampler(name string, ratio float64) sdktrace.Sampler {
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample())
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample())
}

// Batching defaults: the specification's OTEL_BSP_* defaults, which the
// SDK's batch span processor has too.
const (
	DefaultBatchDelay = 5 * time.Second
	DefaultQueueSize  = 2048
	DefaultBatchSize  = 512
)

// batcher is the SDK's batch span processor as cfg sets it (OTEL_BSP_*):
// a batch exported as soon as one is full, the rest every BatchDelay and
// at ForceFlush, which waits for the export in flight (on Lambda the
// sandbox may freeze as soon as the flush returns); a span that finds the
// queue full is dropped, never blocking a request.
func batcher(exp sdktrace.SpanExporter, cfg Config) sdktrace.SpanProcessor {
	opts := []sdktrace.BatchSpanProcessorOption{sdktrace.WithExportTimeout(cfg.Timeout)}
	if cfg.BatchTimeout > 0 {
		opts = append(opts, sdktrace.WithExportTimeout(cfg.BatchTimeout))
	}
	if cfg.BatchDelay > 0 {
		opts = append(opts, sdktrace.WithBatchTimeout(cfg.BatchDelay))
	}
	if cfg.QueueSize > 0 {
		opts = append(opts, sdktrace.WithMaxQueueSize(cfg.QueueSize))
	}
	if cfg.BatchSize > 0 {
		opts = append(opts, sdktrace.WithMaxExportBatchSize(cfg.BatchSize))
	}
	return sdktrace.NewBatchSpanProcessor(exp, opts...)
}
