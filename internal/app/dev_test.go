package app_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/auth"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/worker"
)

// dev runs -dev in this process with args and env until the test ends, and returns its
// banner and its logs.
func dev(t *testing.T, args []string, e config.Env) (banner string, logs *syncbuf.Buffer) {
	t.Helper()
	var out syncbuf.Buffer
	logs = &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- app.RunIngress(ctx, append([]string{"-dev", "-dev-pubsub-port", "0"}, args...), e, &out, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("-dev after shutdown: %v", err)
		}
	})
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "/v1/runs/RUN_ID"); {
		select {
		case err := <-done:
			t.Fatalf("-dev ended before its banner: %v\nlogs:\n%s", err, logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner within 20s:\n%s\nlogs:\n%s", out.String(), logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return out.String(), logs
}

// TestDevPORTStaysOnLoopback: auth is off in -dev, so an exported PORT (Cloud Run's, or
// a shell's) chooses the port but not the interfaces; only -addr may widen it.
func TestDevPORTStaysOnLoopback(t *testing.T) {
	t.Parallel()
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	banner, _ := dev(t, []string{"-ledger", "memory://dev-port", "-dev-concurrency", "0"}, config.Env{"PORT": port})
	if !strings.Contains(banner, "ingress   http://127.0.0.1:"+port+"\n") {
		t.Fatalf("with PORT=%s, -dev does not listen on 127.0.0.1:%s only:\n%s", port, port, banner)
	}
	// Every interface, when asked for explicitly.
	wide := freeAddr(t)
	_, p, _ := net.SplitHostPort(wide)
	banner, _ = dev(t, []string{"-ledger", "memory://dev-port-wide", "-dev-concurrency", "0", "-addr", ":" + p}, config.Env{"PORT": port})
	if !strings.Contains(banner, "ingress   http://[::]:"+p) && !strings.Contains(banner, "ingress   http://0.0.0.0:"+p) {
		t.Fatalf("-addr :%s did not listen on every interface:\n%s", p, banner)
	}
}

// TestDevJobWithoutTarget: a jobs file names a job that only a Go handler runs; -dev
// accepts it, its in-process worker leaves it alone, and a worker that joins with the
// banner's settings runs it. An unknown job's 404 lists the jobs -dev knows.
func TestDevJobWithoutTarget(t *testing.T) {
	dir := t.TempDir()
	jobsFile := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(jobsFile, []byte(`{"jobs": {"mine": {}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ledgerURL := "sqlite://" + filepath.ToSlash(filepath.Join(dir, "dev.db"))
	addr := freeAddr(t)
	banner, logs := dev(t, []string{"-addr", addr, "-ledger", ledgerURL, "-jobs", jobsFile}, nil)
	for _, want := range []string{"mine ", "no target", "demo-http", "/dev/sink", `"sleep"`, `"fail"`,
		"runs the jobs without a target (mine)", "go run .", "cmd/worker has no Go handlers"} {
		if !strings.Contains(strings.Join(strings.Fields(banner), " "), want) {
			t.Errorf("the banner does not show %q:\n%s", want, banner)
		}
	}

	status, body := postJob(t, addr, "nope", "k1")
	if status != http.StatusNotFound || !strings.Contains(body["error"].(string), "demo, demo-http, mine") {
		t.Fatalf("POST of an unknown job = %d %v, want 404 listing demo, demo-http, mine", status, body)
	}
	status, body = postJob(t, addr, "mine", "k1")
	if status != http.StatusAccepted {
		t.Fatalf("POST of the jobs file's job without a target = %d %v, want 202", status, body)
	}
	id := body["run_id"].(string)
	time.Sleep(1500 * time.Millisecond) // the in-process worker would have taken it by now
	if run := getRunJSON(t, addr, id); run["status"] != "queued" || run["attempts_made"] != 0.0 {
		t.Fatalf("the in-process worker touched the run of a job it has no handler for: %v\nlogs:\n%s", run, logs)
	}

	// Join from the banner's command: its Pub/Sub address, ledger, subscription, topic.
	join := map[string]string{}
	for _, k := range []string{"PUBSUB_EMULATOR_HOST=", "RUNONCE_LEDGER=", "RUNONCE_SUBSCRIPTION=", "RUNONCE_TOPIC="} {
		m := regexp.MustCompile(regexp.QuoteMeta(k) + `(\S+)`).FindStringSubmatch(banner)
		if m == nil {
			t.Fatalf("the banner's join command has no %q:\n%s", k, banner)
		}
		join[k] = m[1]
	}
	if join["RUNONCE_LEDGER="] != ledgerURL {
		t.Fatalf("the banner's join command names the ledger %s, want %s", join["RUNONCE_LEDGER="], ledgerURL)
	}
	t.Setenv("PUBSUB_EMULATOR_HOST", join["PUBSUB_EMULATOR_HOST="])
	led, err := ledger.Open(t.Context(), ledgerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	ran := make(chan string, 4)
	mux := worker.NewMux()
	mux.HandleFunc("mine", func(ctx context.Context, j *worker.Job) error { ran <- j.RunID; return nil })
	ctx, cancel := context.WithCancel(t.Context())
	joined := make(chan error, 1)
	go func() {
		joined <- app.ServeWorker(ctx, &app.WorkerSetup{
			Flags: app.WorkerFlags{
				ServerFlags:  app.ServerFlags{Addr: "127.0.0.1:0", Retention: ledger.DefaultRetention},
				Subscription: join["RUNONCE_SUBSCRIPTION="], Topic: join["RUNONCE_TOPIC="],
				Concurrency: 2, Lease: 30 * time.Second, Grace: 2 * time.Second, MaxAttempts: 5,
				RescueInterval: time.Minute, MaxAckExtension: time.Minute,
			},
			Ledger: led, Handler: mux, Auth: auth.None{}, Log: slog.New(slog.DiscardHandler),
		})
	}()
	select {
	case got := <-ran:
		if got != id {
			t.Fatalf("the joined worker ran %s, want %s", got, id)
		}
	case err := <-joined:
		t.Fatalf("the joined worker stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the joined worker never ran the job without a target")
	}
	cancel()
	if err := <-joined; err != nil {
		t.Fatalf("joined worker: %v", err)
	}
	if run := getRunJSON(t, addr, id); run["status"] != "completed" {
		t.Fatalf("run %v, want completed", run)
	}
}

// TestDevWithoutInProcessWorker: with -dev-concurrency 0 the banner and the warning say
// that nothing here runs a job, and offer no demo job.
func TestDevWithoutInProcessWorker(t *testing.T) {
	t.Parallel()
	banner, logs := dev(t, []string{"-addr", freeAddr(t), "-ledger", "memory://dev-none", "-dev-concurrency", "0"}, nil)
	if strings.Contains(banner, "/v1/jobs/demo") || !strings.Contains(banner, "none in this process") || !strings.Contains(banner, "stays queued until a worker") {
		t.Errorf("the banner of -dev-concurrency 0 suggests a job nothing runs:\n%s", banner)
	}
	if l := logs.String(); strings.Contains(l, "workers run in this process") || !strings.Contains(l, "no worker runs in this process") {
		t.Errorf("the warning of -dev-concurrency 0 says workers run here:\n%s", l)
	}
}

// TestDevAcceptsOnlyItsJobs: -dev accepts the jobs it runs (and a jobs file's), so a
// typo is 404, not a run nobody claims; with -accept-any-job it accepts any name, as it
// must without a job to name (-dev-concurrency 0 and no jobs file).
func TestDevAcceptsOnlyItsJobs(t *testing.T) {
	t.Parallel()
	own := freeAddr(t)
	dev(t, []string{"-addr", own, "-ledger", "memory://dev-own-jobs"}, nil)
	if status, body := postJob(t, own, "dmeo", "k"); status != http.StatusNotFound || !strings.Contains(body["error"].(string), "demo, demo-http") {
		t.Errorf("-dev: a typo = %d %v, want 404 listing demo, demo-http", status, body)
	}
	anyJob := freeAddr(t)
	banner, _ := dev(t, []string{"-addr", anyJob, "-ledger", "memory://dev-any-job", "-accept-any-job"}, nil)
	if !strings.Contains(banner, "any other name: every job is accepted") || !strings.Contains(banner, "demo ") {
		t.Errorf("the banner of -dev -accept-any-job does not say it accepts any other name:\n%s", banner)
	}
	if status, body := postJob(t, anyJob, "dmeo", "k"); status != http.StatusAccepted {
		t.Errorf("-dev -accept-any-job: a typo = %d %v, want 202", status, body)
	}
	none := freeAddr(t)
	banner, _ = dev(t, []string{"-addr", none, "-ledger", "memory://dev-none-any", "-dev-concurrency", "0"}, nil)
	if !strings.Contains(banner, "(any name: every job is accepted") {
		t.Errorf("the banner of -dev -dev-concurrency 0 does not say it accepts any name:\n%s", banner)
	}
	if status, body := postJob(t, none, "mine", "k"); status != http.StatusAccepted {
		t.Errorf("-dev -dev-concurrency 0 without a jobs file: a job = %d %v, want 202", status, body)
	}
}

func postJob(t *testing.T, addr, job, key string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/"+job, strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, body
}

func getRunJSON(t *testing.T, addr, id string) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/v1/runs/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var run map[string]any
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&run); err != nil {
		t.Fatal(err)
	}
	return run
}

// TestWarnsUnknownVariables: a misspelt RUNONCE_* variable is named at start, with the
// variable it likely misspells, instead of being ignored silently.
func TestWarnsUnknownVariables(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	err := app.RunWorker(t.Context(), nil, config.Env{"RUNONCE_LEDGR": "memory://x", "RUNONCE_LEASE": "10s"}, io.Discard, &logs)
	if err == nil || !strings.Contains(err.Error(), "-ledger is required") {
		t.Fatalf("RunWorker: %v, want -ledger is required", err)
	}
	if l := logs.String(); !strings.Contains(l, "RUNONCE_LEDGR (did you mean RUNONCE_LEDGER?)") || !strings.Contains(l, "name no flag of worker") || strings.Contains(l, "RUNONCE_LEASE") {
		t.Fatalf("the warning does not name RUNONCE_LEDGR alone, with the variable it likely misspells:\n%s", l)
	}
	if !config.IsUsage(err) {
		t.Errorf("a missing -ledger is not a usage error (exit 2): %v", err)
	}
}

// TestDevDemoFails: the demo job's payload field "fail": "permanent" (the banner and the
// README name it) fails the run, which then carries finished_at.
func TestDevDemoFails(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	dev(t, []string{"-addr", addr, "-ledger", "memory://dev-fails"}, nil)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/"+app.DemoJob, strings.NewReader(`{"fail":"permanent","sleep":"10ms"}`))
	req.Header.Set("Idempotency-Key", "fail-me")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var accepted map[string]any
	json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	id, _ := accepted["run_id"].(string)
	for deadline := time.Now().Add(20 * time.Second); ; {
		run := getRunJSON(t, addr, id)
		if run["status"] == "failed" {
			if _, old := run["completed_at"]; run["finished_at"] == nil || old {
				t.Fatalf("the failed run carries finished_at %v, completed_at %v; want finished_at alone", run["finished_at"], run["completed_at"])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %v, want failed", run)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDevScheduleFiresTheDemoJob: -dev -schedule puts the demo job on a one-minute
// schedule that this process fires, says so in its banner, and audits its ticks.
func TestDevScheduleFiresTheDemoJob(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	banner, logs := dev(t, []string{"-addr", addr, "-ledger", "memory://dev-schedule", "-schedule"}, nil)
	if !strings.Contains(banner, `fires the schedules (-schedule): demo "* * * * *" in UTC`) || !strings.Contains(banner, "runonce jobs ticks demo") {
		t.Fatalf("the banner does not show the demo job's schedule:\n%s", banner)
	}
	resp, err := http.Get("http://" + addr + "/v1/jobs/demo/ticks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var audit struct {
		Schedule string `json:"schedule"`
		Ticks    []any  `json:"ticks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&audit); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/jobs/demo/ticks: %d %v", resp.StatusCode, err)
	}
	if audit.Schedule != "* * * * *" || len(audit.Ticks) != 200 {
		t.Fatalf("the audit of demo: schedule %q, %d ticks; want every minute, a full first page of 200", audit.Schedule, len(audit.Ticks))
	}
	if !strings.Contains(logs.String(), "firing the job's ticks") {
		t.Fatalf("no scheduler started:\n%s", logs)
	}
}
