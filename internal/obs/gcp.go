//lint:file-ignore SA1019 Google's exporters and propagator are deprecated in favour of OTLP to its Telemetry API and archived after 2027-01-01; they remain the documented way to reach Cloud Monitoring and Cloud Trace without a collector, and are all used here only.

package obs

import (
	"fmt"

	mexporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/metric"
	texporter "github.com/GoogleCloudPlatform/opentelemetry-operations-go/exporter/trace"
	gcppropagator "github.com/GoogleCloudPlatform/opentelemetry-operations-go/propagator"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// gcpMetricExporter exports to Cloud Monitoring: workload.googleapis.com/INSTRUMENT,
// the resource mapped to generic_task.
func gcpMetricExporter(e Export) (sdkmetric.Exporter, error) {
	opts := []mexporter.Option{mexporter.WithMonitoringClientOptions(e.ClientOptions...)}
	if e.Project != "" {
		opts = append(opts, mexporter.WithProjectID(e.Project))
	}
	exp, err := mexporter.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("obs: Cloud Monitoring exporter: %w", err)
	}
	return exp, nil
}

// gcpPropagator reads Cloud Run's X-Cloud-Trace-Context (TRACE_ID/SPAN_ID;o=1) and
// writes nothing: traces leave a process as W3C traceparent only.
func gcpPropagator() propagation.TextMapPropagator { return gcppropagator.CloudTraceOneWayPropagator{} }

// gcpSpanExporter exports spans to Cloud Trace.
func gcpSpanExporter(e Export) (sdktrace.SpanExporter, error) {
	opts := []texporter.Option{texporter.WithTraceClientOptions(e.ClientOptions)}
	if e.Project != "" {
		opts = append(opts, texporter.WithProjectID(e.Project))
	}
	exp, err := texporter.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("obs: Cloud Trace exporter: %w", err)
	}
	return exp, nil
}
