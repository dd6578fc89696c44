package obs

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/chainguard-dev/clog/gcp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Propagator is the trace propagation of both binaries: Google's X-Cloud-Trace-Context
// (what Cloud Run sends; read only) and W3C traceparent (read, and the only one
// written), traceparent winning when both are present.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(gcpPropagator(), propagation.TraceContext{})
}

// Tracing is a process's tracer provider and propagation. A nil *Tracing, or one from
// e.Traces "none", records nothing but still carries a caller's trace context through
// (log lines and outgoing calls keep the caller's trace ID).
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// NewTracing returns e's tracing: spans batched to Cloud Trace ("gcp"), to an OTLP/HTTP
// endpoint ("otlp", configured by the standard OTEL_EXPORTER_OTLP_* variables), or to
// spans (tests). Every request and attempt is sampled, whatever the caller's flag.
func NewTracing(ctx context.Context, e Export, spans sdktrace.SpanExporter) (*Tracing, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	exp := spans
	var err error
	switch {
	case exp != nil:
	case e.Traces == ExportGCP:
		exp, err = gcpSpanExporter(e)
	case e.Traces == ExportOTLP:
		exp, err = otlptracehttp.New(ctx)
		if err != nil {
			err = fmt.Errorf("obs: OTLP trace exporter: %w", err)
		}
	default:
		return &Tracing{Provider: noop.NewTracerProvider(), Propagator: Propagator()}, nil
	}
	if err != nil {
		return nil, err
	}
	res, err := e.Resource(ctx)
	if err != nil {
		return nil, err
	}
	// Every run is recorded, even under a caller that did not sample its request (Cloud
	// Run samples few): runs are few and each is worth following.
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample(), sdktrace.WithRemoteParentNotSampled(sdktrace.AlwaysSample()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	return &Tracing{Provider: tp, Propagator: Propagator(), shutdown: tp.Shutdown}, nil
}

func (t *Tracing) orDefault() *Tracing {
	if t == nil || t.Provider == nil || t.Propagator == nil {
		return &Tracing{Provider: noop.NewTracerProvider(), Propagator: Propagator()}
	}
	return t
}

// Shutdown exports the spans still batched.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("obs: trace shutdown: %w", err)
	}
	return nil
}

// TracerProvider returns the provider (a no-op one for a nil Tracing).
func (t *Tracing) TracerProvider() trace.TracerProvider { return t.orDefault().Provider }

// Tracer returns a tracer named after the instrumenting package.
func (t *Tracing) Tracer(name string) trace.Tracer { return t.orDefault().Provider.Tracer(name) }

// Handler returns h with a server span per request (otelhttp), child of the caller's
// trace context, named by the route pattern (e.g. "POST /v1/jobs/{job}"); probes and
// /metrics get none. Without a tracer (a nil Tracing, Export.Traces "none") it returns
// h itself: spans that record nothing cost each request about 20 µs of CPU, and
// WithTrace under it carries the caller's trace context all the same.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	t = t.orDefault()
	if _, off := t.Provider.(noop.TracerProvider); off {
		return h
	}
	return otelhttp.NewHandler(h, "http.server",
		otelhttp.WithTracerProvider(t.Provider), otelhttp.WithPropagators(t.Propagator),
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

// Transport returns rt with a client span per request and the request's traceparent.
func (t *Tracing) Transport(rt http.RoundTripper) http.RoundTripper {
	t = t.orDefault()
	if rt == nil {
		rt = http.DefaultTransport
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(t.Provider), otelhttp.WithPropagators(t.Propagator))
}

// Extract returns ctx with the remote span context of a W3C traceparent (a message
// attribute), or ctx unchanged without a valid one.
func Extract(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
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

// Traceparent returns the W3C traceparent of ctx's span context, or "" without one.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceFields returns log writing, with every line logged under a span context,
// Cloud Logging's trace (for project's traces), spanId and trace_sampled fields, so that
// the Logs Explorer links the line to its trace and span.
func WithTraceFields(log *slog.Logger, project string) *slog.Logger {
	return slog.New(&traceFields{next: log.Handler(), project: project})
}

type traceFields struct {
	next    slog.Handler
	project string
}

func (h *traceFields) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *traceFields) Handle(ctx context.Context, rec slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		if h.project != "" && gcp.TraceFromContext(ctx) == "" {
			ctx = gcp.WithTrace(ctx, "projects/"+h.project+"/traces/"+sc.TraceID().String())
		}
		rec = rec.Clone()
		rec.AddAttrs(slog.String("logging.googleapis.com/spanId", sc.SpanID().String()),
			slog.Bool("logging.googleapis.com/trace_sampled", sc.IsSampled()))
	}
	return h.next.Handle(ctx, rec)
}

func (h *traceFields) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &traceFields{next: h.next.WithAttrs(attrs), project: h.project}
}

func (h *traceFields) WithGroup(name string) slog.Handler {
	return &traceFields{next: h.next.WithGroup(name), project: h.project}
}
