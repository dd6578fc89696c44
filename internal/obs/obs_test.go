package obs_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runonce/runonce/internal/obs"
)

func TestClean(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain-key:2026":  "plain-key:2026",
		"a\nb":            `a\nb`,
		"a\x00b":          `a\x00b`,
		"bidi\u202eevil":  `bidi\u202eevil`,
		"zero\u200bwidth": `zero\u200bwidth`,
		"bad\xffutf8":     `bad\xffutf8`,
		`back\slash`:      `back\\slash`,
		`"quoted"`:        `"quoted"`,
		"日本":              "日本",
	} {
		if got := obs.Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("x", 1000)
	if got := obs.Clean(long); !strings.HasSuffix(got, "…(1000 bytes)") || len(got) > obs.MaxCleanLen+20 {
		t.Errorf("long value: %q", got)
	}
}

func TestLoggerCloudFields(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	log := obs.NewLogger(&b, 0)
	h := obs.WithTrace("proj", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	sc := trace.SpanContextFromContext(obs.ExtractTrace(context.Background(), h))
	if sc.TraceID().String() != "105445aa7843bc8bf206b12000100000" || sc.SpanID().String() != "0000000000000001" || !sc.IsSampled() {
		t.Errorf("X-Cloud-Trace-Context: %v", sc)
	}
	ctx := obs.ExtractTrace(context.Background(), http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	if got := obs.Traceparent(ctx); got != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Errorf("Traceparent %q", got)
	}
	for _, bad := range []string{"", "zz/1", "105445aa7843bc8bf206b12000100000/notanumber", "105445aa7843bc8bf206b12000100000/99999999999999999999999"} {
		h := http.Header{"X-Cloud-Trace-Context": {bad}}
		if sc := trace.SpanContextFromContext(obs.ExtractTrace(context.Background(), h)); sc.IsValid() {
			t.Errorf("%q gave %v", bad, sc)
		}
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	m, err := obs.NewServiceMetrics("ingress")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Meter("t").Int64Counter("runonce.test.things")
	c.Add(context.Background(), 3)
	hist, _ := m.Meter("t").Float64Histogram("runonce.test.duration")
	hist.Record(context.Background(), 0.0015)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"runonce_test_things_total 3", `runonce_test_duration_bucket{le="0.002"} 1`, "go_goroutines",
		`service_name="ingress"`, `service_version="` + obs.Version() + `"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// A second registry in the same process does not collide.
	if _, err := obs.NewMetrics(); err != nil {
		t.Fatal(err)
	}
}

// TestLoggerDurations: durations are logged as Go duration strings, in attributes, in
// groups and in attributes added with With.
func TestLoggerDurations(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	log := obs.NewLogger(&b, 0).With(slog.Duration("lease", 30*time.Second))
	log.Info("hello", slog.Duration("grace", 8*time.Second), slog.Group("g", slog.Duration("d", time.Millisecond)), slog.Any("any", 2*time.Minute))
	var rec map[string]any
	if err := json.Unmarshal([]byte(b.String()), &rec); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"lease": "30s", "grace": "8s", "any": "2m0s"} {
		if rec[k] != want {
			t.Errorf("%s = %v, want %v", k, rec[k], want)
		}
	}
	if g, _ := rec["g"].(map[string]any); g["d"] != "1ms" {
		t.Errorf("g.d = %v, want 1ms", rec["g"])
	}
	if rec["severity"] != "INFO" || rec["message"] != "hello" {
		t.Errorf("not Cloud Logging's format: %v", rec)
	}
}

// TestTextLogger: the terminal form is one line of text, durations as strings, no
// source paths.
func TestTextLogger(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	obs.NewTextLogger(&b, 0).With(slog.String("component", "worker")).Info("worker listening", slog.Duration("lease", 30*time.Second))
	line := b.String()
	for _, want := range []string{"level=INFO", `msg="worker listening"`, "component=worker", "lease=30s"} {
		if !strings.Contains(line, want) {
			t.Errorf("text log %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "{") || strings.Contains(line, ".go:") || strings.Count(line, "\n") != 1 {
		t.Errorf("text log is not one plain line without source: %q", line)
	}
	if obs.IsTerminal(&b) {
		t.Error("a strings.Builder is a terminal")
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
		tr.Handler(obs.WithTrace("proj", mux)).ServeHTTP(rec, req)
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
