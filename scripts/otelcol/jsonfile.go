package main

import (
	"context"
	"errors"
	"os"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// jsonFileConfig is the jsonfile exporter's config: the file every batch
// is appended to, one OTLP JSON document a line (the format of the
// contrib file exporter).
type jsonFileConfig struct {
	Path string `mapstructure:"path"`
}

func (c *jsonFileConfig) Validate() error {
	if c.Path == "" {
		return errors.New("jsonfile: path is required")
	}
	return nil
}

func newJSONFileFactory() exporter.Factory {
	return exporter.NewFactory(component.MustNewType("jsonfile"),
		func() component.Config { return &jsonFileConfig{} },
		exporter.WithMetrics(createMetrics, component.StabilityLevelDevelopment),
		exporter.WithTraces(createTraces, component.StabilityLevelDevelopment))
}

// files is shared by the metrics and traces exporters of one path, so
// their lines never interleave.
var (
	filesMu sync.Mutex
	files   = map[string]*jsonFile{}
)

type jsonFile struct {
	mu sync.Mutex
	f  *os.File
}

func open(path string) (*jsonFile, error) {
	filesMu.Lock()
	defer filesMu.Unlock()
	if j := files[path]; j != nil {
		return j, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	j := &jsonFile{f: f}
	files[path] = j
	return j, nil
}

func (j *jsonFile) write(b []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err := j.f.Write(append(b, '\n'))
	return err
}

func createMetrics(ctx context.Context, set exporter.Settings, cfg component.Config) (exporter.Metrics, error) {
	j, err := open(cfg.(*jsonFileConfig).Path)
	if err != nil {
		return nil, err
	}
	var m pmetric.JSONMarshaler
	return exporterhelper.NewMetrics(ctx, set, cfg, func(_ context.Context, md pmetric.Metrics) error {
		b, err := m.MarshalMetrics(md)
		if err != nil {
			return err
		}
		return j.write(b)
	})
}

func createTraces(ctx context.Context, set exporter.Settings, cfg component.Config) (exporter.Traces, error) {
	j, err := open(cfg.(*jsonFileConfig).Path)
	if err != nil {
		return nil, err
	}
	var m ptrace.JSONMarshaler
	return exporterhelper.NewTraces(ctx, set, cfg, func(_ context.Context, td ptrace.Traces) error {
		b, err := m.MarshalTraces(td)
		if err != nil {
			return err
		}
		return j.write(b)
	})
}
