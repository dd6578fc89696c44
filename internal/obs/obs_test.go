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

	"github.com/runonce/runonce/internal/obs"
)

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
