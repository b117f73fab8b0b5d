package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/service/telemetry"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// telemetryConfig is the collector's own telemetry section
// (service.telemetry): the log level and the metrics level the tests and
// `make run` write. The collector's own metrics and traces are never
// exported, so only the level of its log matters.
//
// The collector's stock telemetry factory (otelconftelemetry) would read
// the same keys, but it links the OpenTelemetry configuration SDK with
// every cloud resource detector (the AWS SDK, Kubernetes' apimachinery,
// gonum, Prometheus): about 200 packages that a fresh `make test`
// compiled for nothing, close to a minute of CPU on two cores.
type telemetryConfig struct {
	Logs    logsConfig    `mapstructure:"logs"`
	Metrics metricsConfig `mapstructure:"metrics"`
}

type logsConfig struct {
	Level string `mapstructure:"level"`
}

type metricsConfig struct {
	// Level is accepted for the stock config's sake; the collector's own
	// metrics are never exported here, whatever it says.
	Level string `mapstructure:"level"`
}

func (c *telemetryConfig) Validate() error {
	if _, err := zapcore.ParseLevel(c.Logs.Level); err != nil {
		return fmt.Errorf("service.telemetry.logs.level: %w", err)
	}
	return nil
}

// newTelemetryFactory is the collector's own telemetry: a zap logger on
// stderr at the configured level; no-op meter and tracer providers (the
// telemetry package's defaults).
func newTelemetryFactory() telemetry.Factory {
	return telemetry.NewFactory(
		func() component.Config { return &telemetryConfig{Logs: logsConfig{Level: "info"}} },
		telemetry.WithCreateLogger(func(_ context.Context, set telemetry.LoggerSettings, cfg component.Config) (*zap.Logger, component.ShutdownFunc, error) {
			lvl, err := zapcore.ParseLevel(cfg.(*telemetryConfig).Logs.Level)
			if err != nil {
				return nil, nil, err
			}
			zc := zap.NewProductionConfig()
			zc.Level = zap.NewAtomicLevelAt(lvl)
			zc.Encoding = "console"
			zc.EncoderConfig = zap.NewDevelopmentEncoderConfig()
			build := set.BuildZapLogger
			if build == nil {
				build = func(c zap.Config, opts ...zap.Option) (*zap.Logger, error) { return c.Build(opts...) }
			}
			logger, err := build(zc)
			if err != nil {
				return nil, nil, err
			}
			return logger, func(context.Context) error { _ = logger.Sync(); return nil }, nil
		}),
	)
}
