package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"google.golang.org/protobuf/types/known/durationpb"
)

func run(ctx context.Context, args []string, env config.Env) error {
	return app.RunIngress(ctx, args, env, io.Discard, io.Discard)
}

func env(m map[string]string) config.Env { return m }

func TestRefusesUnsafeConfig(t *testing.T) {
	base := []string{"-ledger", "memory://refuse", "-topic", "pubsub://p/runs"}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no auth", base, nil, "-auth is required"},
		{"oidc without audience", append(base, "-auth", "oidc", "-allow", "a@b.c"), nil, "audience"},
		{"oidc without allow", append(base, "-auth", "oidc", "-audience", "x"), nil, "allowed caller"},
		{"unknown auth", append(base, "-auth", "basic"), nil, `-auth "basic"`},
		{"short retention", append(base, "-auth", "none", "-retention", "168h"), nil, "-retention 168h0m0s is too short"},
		{"short retention from env", append(base, "-auth", "none"), map[string]string{"RUNONCE_RETENTION": "100h"}, "too short"},
		{"no ledger", []string{"-auth", "none", "-topic", "pubsub://p/runs"}, nil, "-ledger and -topic are required"},
		{"bad topic", []string{"-auth", "none", "-accept-any-job", "-ledger", "memory://x", "-topic", "p/runs"}, nil, "scheme must be pubsub"},
		{"neither a jobs file nor -accept-any-job", append(base, "-auth", "none"), nil, "-jobs or -accept-any-job is required"},
		{"a jobs file and -accept-any-job", append(base, "-auth", "none", "-jobs", "jobs.json", "-accept-any-job"), nil, "both given"},
		{"-schedule without a schedule", append(base, "-auth", "none", "-accept-any-job", "-schedule"), nil, "-schedule: no job of the jobs file has a \"schedule\""},
		{"dev with a bad jobs file", []string{"-dev", "-dev-pubsub-port", "0", "-addr", "127.0.0.1:0", "-ledger", "memory://dev-bad", "-jobs", "/nonexistent/jobs.json"}, nil, "jobs file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := run(t.Context(), c.args, env(c.env))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestServes starts the binary's run against an in-process Pub/Sub (as an emulator)
// and the memory ledger, configured from the environment, accepting any job, and stops
// it with its context.
func TestServes(t *testing.T) {
	ps, err := pubsubtest.NewInProcess(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(t.Context(), ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PUBSUB_EMULATOR_HOST", ps.Addr())
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-auth", "none", "-log-level", "error", "-accept-any-job"}, env(map[string]string{
			"RUNONCE_LEDGER": "memory://serves", "RUNONCE_TOPIC": "pubsub://p/runs", "RUNONCE_ADDR": addr,
		}))
	}()
	var resp *http.Response
	for i := 0; i < 100; i++ {
		resp, err = http.Get("http://" + addr + "/readyz")
		if err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("readyz %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/jobs/demo", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "smoke")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 || len(ps.Server.Messages()) != 1 {
		t.Fatalf("POST: %d, %d messages", resp.StatusCode, len(ps.Server.Messages()))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after shutdown: %v", err)
	}
}

func TestWorkerRefusesUnsafeConfig(t *testing.T) {
	ps, err := pubsubtest.NewInProcess(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(t.Context(), ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	// A subscription that keeps messages for 7 days: the retention must outlast that, the
	// scheduler's retry window (24h) and the lease (30s).
	if _, err := queue.EnsureSubscription(t.Context(), ps.Client, "runs", "work", &pubsubpb.Subscription{
		MessageRetentionDuration: durationpb.New(7 * 24 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PUBSUB_EMULATOR_HOST", ps.Addr())
	base := []string{"-ledger", "memory://worker-refuse", "-subscription", "pubsub://p/work", "-addr", "127.0.0.1:0"}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no auth", base, "-auth is required"},
		{"retention shorter than the subscription's", append(base, "-auth", "none", "-retention", "192h"), "subscription's message retention (168h0m0s)"},
		{"no ledger", []string{"-auth", "none"}, "-ledger is required"},
		{"no concurrency", append(base, "-auth", "none", "-concurrency", "0"), "-concurrency 0"},
		{"push without authentication", append(base, "-auth", "none", "-push"), "-push with -auth none"},
		{"negative unhandled bound", append(base, "-auth", "none", "-unhandled-after", "-1h"), "-unhandled-after -1h0m0s: must not be negative"},
		{"neither pull nor push", []string{"-ledger", "memory://worker-refuse", "-auth", "none"}, "no way to receive runs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := app.RunWorker(t.Context(), c.args, env(nil), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("RunWorker: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// A worker that only pulls serves no push endpoint: with -auth none (natural for a
// pull worker), POST /v1/push would let anyone who reaches the port run any job.
func TestPullWorkerServesNoPushEndpoint(t *testing.T) {
	ps, err := pubsubtest.NewInProcess(t.Context(), "p")
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	if _, err := queue.EnsureTopic(t.Context(), ps.Client, "runs"); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(t.Context(), ps.Client, "runs", "work", nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PUBSUB_EMULATOR_HOST", ps.Addr())
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- app.RunWorker(ctx, []string{"-ledger", "memory://pull-only", "-subscription", "pubsub://p/work", "-auth", "none", "-addr", addr}, env(nil), io.Discard, io.Discard)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Post("http://"+addr+"/v1/push", "application/json", strings.NewReader(`{"message":{"attributes":{"run_id":"x","job":"demo"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST /v1/push on a pull-only worker = %d, want 404", resp.StatusCode)
	}
}

// -dev grows with the user: another ledger and a jobs file of their own HTTP targets.
func TestDevCombinesWithALedgerAndAJobsFile(t *testing.T) {
	calls := make(chan http.Header, 4)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- r.Header.Clone()
	}))
	defer target.Close()
	jobsFile := filepath.Join(t.TempDir(), "jobs.json")
	if err := os.WriteFile(jobsFile, []byte(`{"jobs": {"send-invoices": {"url": "`+target.URL+`/run", "timeout": "10s"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- app.RunIngress(ctx, []string{"-dev", "-dev-pubsub-port", "0", "-addr", addr, "-ledger", "memory://dev-grows", "-jobs", jobsFile}, env(nil), io.Discard, io.Discard)
	}()
	post := func(job string) int {
		for range 100 {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/"+job, strings.NewReader(`{"month":"2026-11"}`))
			req.Header.Set("Idempotency-Key", "invoices:2026-11")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		t.Fatal("the -dev ingress never answered")
		return 0
	}
	if got := post("send-invoices"); got != http.StatusAccepted {
		t.Fatalf("POST of the jobs file's job = %d, want 202", got)
	}
	if got := post("not-in-the-jobs-file"); got != http.StatusNotFound {
		t.Fatalf("POST of a job nobody runs = %d, want 404", got)
	}
	select {
	case h := <-calls:
		if h.Get("Idempotency-Key") == "" || h.Get("X-Runonce-Job") != "send-invoices" {
			t.Fatalf("the target was called without the run's headers: %v", h)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the in-process worker never called the jobs file's target")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("-dev after shutdown: %v", err)
	}
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
