package obs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/detectors/gcp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"google.golang.org/api/option"
)

// Export names where a binary sends its telemetry beyond /metrics and its logs, and
// who it is there.
type Export struct {
	// Metrics is "prometheus" (the default: /metrics only) or "gcp": also every
	// MetricsInterval to Cloud Monitoring, as workload.googleapis.com/INSTRUMENT on the
	// generic_task resource whose job is Service.
	Metrics string
	// Traces is "none" (the default), "gcp" (Cloud Trace) or "otlp" (OTLP over HTTP to
	// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
	Traces string
	// Service is the service's name (service.name): the Cloud Run service (K_SERVICE)
	// or the binary's name.
	Service string
	// Project is the Google Cloud project to export to; empty: the credentials'.
	Project string
	// OnGoogleCloud asks the platform (the metadata server) for the region and the
	// instance: set it only where one answers (K_SERVICE is set on Cloud Run).
	OnGoogleCloud bool
	// MetricsInterval is how often metrics are exported; zero: 60 s.
	MetricsInterval time.Duration
	// ClientOptions are passed to the Google API clients (tests point them at a local
	// server).
	ClientOptions []option.ClientOption
}

// The values of Export.Metrics and Export.Traces.
const (
	ExportPrometheus = "prometheus"
	ExportGCP        = "gcp"
	ExportOTLP       = "otlp"
	ExportNone       = "none"
)

// Validate refuses an Export whose Metrics or Traces names no exporter.
func (e Export) Validate() error {
	var errs []error
	switch e.Metrics {
	case "", ExportPrometheus, ExportGCP:
	default:
		errs = append(errs, fmt.Errorf("obs: metrics export %q: want prometheus or gcp", e.Metrics))
	}
	switch e.Traces {
	case "", ExportNone, ExportGCP, ExportOTLP:
	default:
		errs = append(errs, fmt.Errorf("obs: trace export %q: want none, gcp or otlp", e.Traces))
	}
	return errors.Join(errs...)
}

// Resource describes this process: service.name, service.namespace "runonce", a
// service.instance.id of its own, and with OnGoogleCloud what the platform's detector
// finds (cloud.region, faas.*). Cloud Monitoring maps it to generic_task (location, namespace,
// job = service, task_id = instance).
func (e Export) Resource(ctx context.Context) (*resource.Resource, error) {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	opts := []resource.Option{resource.WithAttributes(
		semconv.ServiceName(e.Service), semconv.ServiceNamespace("runonce"), semconv.ServiceInstanceID(hex.EncodeToString(id)),
	)}
	if e.OnGoogleCloud {
		opts = append(opts, resource.WithDetectors(gcp.NewDetector()))
	}
	r, err := resource.New(ctx, opts...)
	if err != nil && r == nil {
		return nil, fmt.Errorf("obs: resource: %w", err)
	}
	return r, nil // a partial detection still names the service
}

// NewMetricsExport returns NewMetrics's provider, also exporting to Cloud Monitoring
// when e.Metrics is "gcp". Shutdown flushes the last points.
func NewMetricsExport(ctx context.Context, e Export) (*Metrics, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	if e.Metrics != ExportGCP {
		return NewServiceMetrics(cmp.Or(e.Service, "runonce"))
	}
	res, err := e.Resource(ctx)
	if err != nil {
		return nil, err
	}
	exp, err := gcpMetricExporter(e)
	if err != nil {
		return nil, err
	}
	interval := e.MetricsInterval
	if interval <= 0 {
		interval = time.Minute
	}
	return newMetrics(res, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(interval))))
}
