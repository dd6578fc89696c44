// Package obs sets up what both runonce binaries observe themselves with: JSON logs in
// Cloud Logging's format, OpenTelemetry metrics on /metrics (and, with Export.Metrics
// "gcp", in Cloud Monitoring), and traces (Cloud Trace or OTLP, with Export.Traces).
//
// # Guarantees
//
// Logs are JSON with Cloud Logging's severity, message and logging.googleapis.com/trace
// fields (github.com/chainguard-dev/clog/gcp), or text for a person at a terminal
// (NewTextLogger); durations are strings ("30s") in both. WithTraceFields adds the span
// ID and the sampled flag of the line's span, so the Logs Explorer links a line to its
// trace. Values a caller supplied are passed through cleantext.Clean (pkg/internal)
// before they are logged or echoed back: control and format characters are escaped and
// long values cut, so no caller can forge a log line or hide text in one.
//
// Metrics carry the service's name and version (target_info) and live in a registry of
// their own (never Prometheus's global one), so two components, or two tests, in one
// process never collide. Exported to Cloud Monitoring, an instrument NAME is
// workload.googleapis.com/NAME on the generic_task resource whose job is Export.Service
// (deploy/terraform's dashboard and alerts rely on that).
//
// Traces propagate through Propagator: W3C traceparent, and Cloud Run's
// X-Cloud-Trace-Context read with Google's one-way propagator; only traceparent is
// written. No tracer provider is global: each binary builds its Tracing and passes it on.
// Google's exporters and propagator, deprecated upstream, are used in gcp.go only.
package obs
