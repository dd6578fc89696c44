// Package obs sets up what both runonce binaries observe themselves with: JSON logs in
// Cloud Logging's format, OpenTelemetry metrics exported to Prometheus on /metrics, and
// the request trace that ties a log line to its Cloud Trace.
//
// # Guarantees
//
// Logs are JSON with Cloud Logging's severity, message and logging.googleapis.com/trace
// fields (github.com/chainguard-dev/clog/gcp), or text for a person at a terminal
// (NewTextLogger); durations are strings ("30s") in both. Values a caller supplied are passed
// through Clean before they are logged or echoed back: control and format characters are
// escaped and long values cut, so no caller can forge a log line or hide text in one.
//
// Metrics carry the service's name and version (target_info) and live in a registry of their own (never Prometheus's global one), so two
// components, or two tests, in one process never collide.
package obs
