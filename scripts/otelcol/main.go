// Command otelcol is a small OpenTelemetry Collector for the gateway's
// telemetry tests and `make run`: the collector's own OTLP receiver (HTTP
// and gRPC) and one exporter, jsonfile, that appends every batch it gets as
// one line of OTLP JSON to a file, so a test (or a person) reads what the
// gateway exported. It is built from the collector's Go modules, all at one
// release, in a module of its own so the gateway's go.mod does not grow.
//
// Usage: otelcol --config FILE (the collector's own flags and config).
package main

import (
	"log"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
)

func components() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](newJSONFileFactory(), debugexporter.NewFactory()); err != nil {
		return f, err
	}
	f.Telemetry = newTelemetryFactory()
	return f, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol", Description: "the gateway's test collector", Version: "0.165.0"},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
				DefaultScheme:     "file",
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatal(err)
	}
}
