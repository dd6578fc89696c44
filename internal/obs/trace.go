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

// Transport returns rt with a client span per request and the request's traceparent.
func (t *Tracing) Transport(rt http.RoundTripper) http.RoundTripper {
	t = t.orDefault()
	if rt == nil {
		rt = http.DefaultTransport
	}
	return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(t.Provider), otelhttp.WithPropagators(t.Propagator))
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
