package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/telemetry/otlp"
)

// processStart is when the process started (as near as Go lets main's
// package see it): the cold-start metrics count from here. Set once, at
// init, never written again.
var processStart = time.Now()

// newTelemetry builds the OTLP exporter from the standard OTEL_*
// environment, or nil when no endpoint is set. It dials nothing.
func newTelemetry(cfg *config.Config, getenv func(string) string, log *slog.Logger) (*otlp.Exporter, error) {
	tc, err := otlp.FromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if !tc.Enabled() {
		return nil, nil
	}
	tc.Settings = assemble.Telemetry(cfg)
	tc.Start = processStart
	// The SDK reports a failed export here (process-wide, like the Redis
	// logger): a warning in the JSON log, never a plain stderr line.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry export failed", "err", err)
	}))
	exp, err := otlp.New(tc)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	log.Info("telemetry exporting", "traces", tc.TracesURL != "", "metrics", tc.MetricsURL != "",
		"trust_traceparent", tc.TrustTraceparent, "metric_interval", tc.Interval.String())
	return exp, nil
}

// flushTelemetry exports what is pending, within ctx and flush_timeout
// (the exporter's own bound), and logs how long it took (what the flush costs an invocation or a stop). At a stop
// (why "shutdown") the exporter is shut down too.
func flushTelemetry(ctx context.Context, tel *otlp.Exporter, log *slog.Logger, level slog.Level, why string) {
	flush := tel.Flush
	if why == "shutdown" {
		flush = tel.Shutdown
	}
	d, err := flush(ctx)
	if err != nil {
		log.Warn("telemetry flush failed", "why", why, "flush_ms", msOf(d), "err", err)
		return
	}
	log.Log(ctx, level, "telemetry flushed", "why", why, "flush_ms", msOf(d))
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
