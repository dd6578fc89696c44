package tracehttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/pkg/internal/tracehttp"
)

func TestLoggerCloudFields(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	log := obs.NewLogger(&b, 0)
	h := tracehttp.WithTrace("proj", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.InfoContext(r.Context(), "hello", "k", "v")
	}))
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), r)
	var rec map[string]any
	if err := json.Unmarshal([]byte(b.String()), &rec); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"severity": "INFO", "message": "hello", "k": "v",
		"logging.googleapis.com/trace": "projects/proj/traces/4bf92f3577b34da6a3ce929d0e0e4736"} {
		if rec[k] != want {
			t.Errorf("%s = %v, want %v", k, rec[k], want)
		}
	}
}

func TestExtractTrace(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("X-Cloud-Trace-Context", "105445aa7843bc8bf206b12000100000/1;o=1")
	sc := trace.SpanContextFromContext(tracehttp.ExtractTrace(context.Background(), h))
	if sc.TraceID().String() != "105445aa7843bc8bf206b12000100000" || sc.SpanID().String() != "0000000000000001" || !sc.IsSampled() {
		t.Errorf("X-Cloud-Trace-Context: %v", sc)
	}
	ctx := tracehttp.ExtractTrace(context.Background(), http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	if got := tracehttp.Traceparent(ctx); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("Traceparent %q", got)
	}
	for _, bad := range []string{"", "zz/1", "105445aa7843bc8bf206b12000100000/notanumber", "105445aa7843bc8bf206b12000100000/99999999999999999999999"} {
		h := http.Header{"X-Cloud-Trace-Context": {bad}}
		if sc := trace.SpanContextFromContext(tracehttp.ExtractTrace(context.Background(), h)); sc.IsValid() {
			t.Errorf("%q gave %v", bad, sc)
		}
	}
}

// TestHandlerTracing: with no tracer, Handler puts nothing between the server and the
// handler (no wrapped writer, no span) and WithTrace still hands it the caller's trace;
// with one, each request is a server span, child of the caller's, named by its route.
func TestHandlerTracing(t *testing.T) {
	t.Parallel()
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	serve := func(t *testing.T, tr *obs.Tracing) (w http.ResponseWriter, rec *httptest.ResponseRecorder, sc trace.SpanContext) {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/jobs/{job}", func(got http.ResponseWriter, r *http.Request) {
			w, sc = got, trace.SpanContextFromContext(r.Context())
		})
		req := httptest.NewRequest(http.MethodPost, "/v1/jobs/etl", nil)
		req.Header.Set("Traceparent", caller)
		rec = httptest.NewRecorder()
		tracehttp.Handler(tr.TracerProvider(), tracehttp.WithTrace("proj", mux)).ServeHTTP(rec, req)
		return w, rec, sc
	}
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		for name, tr := range map[string]*obs.Tracing{"nil": nil, "none": mustTracing(t, nil)} {
			w, rec, sc := serve(t, tr)
			if w != http.ResponseWriter(rec) {
				t.Errorf("%s: the handler got a %T, want the server's own writer", name, w)
			}
			if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("%s: the handler's span context %v, want the caller's", name, sc)
			}
		}
	})
	t.Run("recorded", func(t *testing.T) {
		t.Parallel()
		spans := tracetest.NewInMemoryExporter()
		tr := mustTracing(t, spans)
		_, _, sc := serve(t, tr)
		// Shutdown would flush, then empty the exporter.
		if err := tr.TracerProvider().(*sdktrace.TracerProvider).ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := spans.GetSpans()
		if len(got) != 1 {
			t.Fatalf("%d spans, want the request's server span", len(got))
		}
		s := got[0]
		if s.Name != "POST /v1/jobs/{job}" || s.SpanKind != trace.SpanKindServer || s.Parent.SpanID().String() != "00f067aa0ba902b7" || !s.Parent.IsRemote() {
			t.Errorf("span %q kind %v parent %v (remote %v): want the route's server span under the caller's", s.Name, s.SpanKind, s.Parent.SpanID(), s.Parent.IsRemote())
		}
		if sc.SpanID() != s.SpanContext.SpanID() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("the handler's span context %v, want the server span's %v", sc, s.SpanContext)
		}
	})
}

// mustTracing returns the tracing of Export.Traces "none", or one that records into
// spans.
func mustTracing(t *testing.T, spans sdktrace.SpanExporter) *obs.Tracing {
	t.Helper()
	tr, err := obs.NewTracing(context.Background(), obs.Export{Traces: obs.ExportNone, Service: "test"}, spans)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// A process that exports nothing still carries its caller's trace.
func TestNoTracingCarriesTheTrace(t *testing.T) {
	t.Parallel()
	tr, err := obs.NewTracing(context.Background(), obs.Export{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := tracehttp.Extract(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx, span := tr.Tracer("test").Start(ctx, "x")
	defer span.End()
	if got := tracehttp.Traceparent(ctx); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("traceparent %q", got)
	}
}
