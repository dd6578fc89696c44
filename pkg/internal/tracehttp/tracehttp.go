//lint:file-ignore SA1019 Google's propagator is deprecated in favour of OTLP to its Telemetry API; it remains the way to read Cloud Run's X-Cloud-Trace-Context (see internal/obs/gcp.go).

// Package tracehttp carries a caller's trace through runonce's HTTP servers and
// messages: it reads W3C traceparent and Cloud Run's X-Cloud-Trace-Context, writes
// traceparent only, and puts a server span around each request when a tracer provider
// records. It links the OpenTelemetry API and otelhttp, never the SDK or an exporter:
// the binaries set those up (internal/obs) and hand the packages of pkg/ a
// trace.TracerProvider.
package tracehttp

import (
	"context"
	"net/http"

	gcppropagator "github.com/GoogleCloudPlatform/opentelemetry-operations-go/propagator"
	"github.com/chainguard-dev/clog/gcp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator is the trace propagation of both binaries: Google's X-Cloud-Trace-Context
// (what Cloud Run sends; read only, with Google's one-way propagator) and W3C
// traceparent (read, and the only one written), traceparent winning when both are
// present.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(gcppropagator.CloudTraceOneWayPropagator{}, propagation.TraceContext{})
}

// Handler returns h with a server span per request (otelhttp), child of the caller's
// trace context, named by the route pattern (e.g. "POST /v1/jobs/{job}"); probes and
// /metrics get none. Without a tracer (tp nil or a no-op provider) it returns h itself:
// spans that record nothing cost each request about 20 µs of CPU, and WithTrace under it
// carries the caller's trace context all the same.
func Handler(tp trace.TracerProvider, h http.Handler) http.Handler {
	if tp == nil {
		return h
	}
	if _, off := tp.(noop.TracerProvider); off {
		return h
	}
	return otelhttp.NewHandler(h, "http.server",
		otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(Propagator()),
		otelhttp.WithFilter(func(r *http.Request) bool { // no spans for probes and scrapes
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				return false
			}
			return true
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}))
}

// WithTrace returns h with each request's trace context (traceparent, or Cloud Run's
// X-Cloud-Trace-Context, through Propagator) extracted into its context: as the remote
// parent of any span started under it, and as Cloud Logging's trace field for project's
// traces in every log line written with the request's context. No lookups happen:
// project comes from the configuration (empty: no trace field).
func WithTrace(project string, h http.Handler) http.Handler {
	prop := Propagator()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if !trace.SpanContextFromContext(ctx).IsValid() {
			ctx = prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
		}
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && project != "" {
			ctx = gcp.WithTrace(ctx, "projects/"+project+"/traces/"+sc.TraceID().String())
		}
		r = r.WithContext(ctx)
		h.ServeHTTP(w, r)
		if r.Pattern != "" { // set by a ServeMux: name the server span after the route
			trace.SpanFromContext(ctx).SetName(r.Pattern)
		}
	})
}

// ExtractTrace returns ctx with the remote span context of header's traceparent, or of
// X-Cloud-Trace-Context when there is no valid traceparent.
func ExtractTrace(ctx context.Context, header http.Header) context.Context {
	return Propagator().Extract(ctx, propagation.HeaderCarrier(header))
}

// Extract returns ctx with the remote span context of a W3C traceparent (a message
// attribute), or ctx unchanged without a valid one.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Traceparent returns the W3C traceparent of ctx's span context, or "" without one.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
