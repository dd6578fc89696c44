package obs

import (
	"context"
	"net/http"
	"strings"

	"github.com/chainguard-dev/clog/gcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// WithTrace returns h with each request's W3C trace context (traceparent, or Cloud
// Run's X-Cloud-Trace-Context) extracted into its context: as the remote parent of any
// span started under it, and as Cloud Logging's trace field for project's traces in
// every log line written with the request's context. No lookups happen: project comes
// from the configuration (empty: no trace field).
func WithTrace(project string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := ExtractTrace(r.Context(), r.Header)
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && project != "" {
			ctx = gcp.WithTrace(ctx, "projects/"+project+"/traces/"+sc.TraceID().String())
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// ExtractTrace returns ctx with the remote span context of header's traceparent, or of
// X-Cloud-Trace-Context (TRACE_ID/SPAN_ID;o=1) when there is no valid traceparent.
func ExtractTrace(ctx context.Context, header http.Header) context.Context {
	ctx2 := propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(header))
	if trace.SpanContextFromContext(ctx2).IsValid() {
		return ctx2
	}
	v := header.Get("X-Cloud-Trace-Context")
	traceID, rest, ok := strings.Cut(v, "/")
	if !ok {
		return ctx
	}
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return ctx
	}
	spanDec, opts, _ := strings.Cut(rest, ";")
	sid, ok := parseDecimalSpanID(spanDec)
	if !ok {
		return ctx
	}
	var flags trace.TraceFlags
	if opts == "o=1" {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

func parseDecimalSpanID(s string) (trace.SpanID, bool) {
	var id trace.SpanID
	if s == "" || len(s) > 20 {
		return id, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return id, false
		}
		d := uint64(c - '0')
		if n > (^uint64(0)-d)/10 {
			return id, false
		}
		n = n*10 + d
	}
	for i := 7; i >= 0; i-- {
		id[i] = byte(n)
		n >>= 8
	}
	return id, true
}

// Traceparent returns the W3C traceparent of ctx's span context, or "" without one.
func Traceparent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
