package obs

import (
	"context"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// LatencyBuckets returns histogram boundaries in seconds, from 250µs to 10s: the ingress
// answers in milliseconds, so the default OpenTelemetry buckets (in whole units) would
// put every request in the first one.
func LatencyBuckets() []float64 {
	return []float64{0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10}
}

// Metrics is an OpenTelemetry meter provider exported to a Prometheus registry of its
// own, served by Handler.
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	Registry *prometheus.Registry
	handler  http.Handler
}

// NewMetrics returns NewServiceMetrics("runonce").
func NewMetrics() (*Metrics, error) { return NewServiceMetrics("runonce") }

// NewServiceMetrics returns a provider whose instruments appear on Handler, together
// with the Go runtime and process collectors, for the service named service: its
// target_info carries service_name and service_version (the binary's module version,
// "devel" for a build from a checkout). Histograms whose name ends in "duration" use
// LatencyBuckets.
func NewServiceMetrics(service string) (*Metrics, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("obs: metrics resource: %w", err)
	}
	return newMetrics(res)
}

// newMetrics is NewServiceMetrics for the resource res (to which it adds the service's
// version) with more provider options (another reader).
func newMetrics(res *resource.Resource, extra ...sdkmetric.Option) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("obs: register Go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("obs: register process collector: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("obs: Prometheus exporter: %w", err)
	}
	view := sdkmetric.NewView(
		sdkmetric.Instrument{Name: "*duration", Kind: sdkmetric.InstrumentKindHistogram},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: LatencyBuckets()}},
	)
	res, err = resource.Merge(res, resource.NewSchemaless(attribute.String("service.version", Version())))
	if err != nil {
		return nil, fmt.Errorf("obs: metrics resource: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(append([]sdkmetric.Option{sdkmetric.WithReader(exp), sdkmetric.WithView(view), sdkmetric.WithResource(res)}, extra...)...)
	return &Metrics{
		Provider: mp,
		Registry: reg,
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
	}, nil
}

// Meter returns a meter of the provider named after the instrumenting package.
func (m *Metrics) Meter(name string) metric.Meter { return m.Provider.Meter(name) }

// Handler serves the registry in the Prometheus text format (GET /metrics).
func (m *Metrics) Handler() http.Handler { return m.handler }

// Version returns the running binary's module version, "devel" when it was built from a
// checkout (go run, go build), with the VCS revision when the build recorded one.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 && v == "devel" {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

// Shutdown exports what an exporting reader still holds and stops it; /metrics then
// serves nothing new.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if err := m.Provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("obs: metrics shutdown: %w", err)
	}
	return nil
}
