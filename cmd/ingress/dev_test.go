package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
)

// TestDevModeEndToEnd is the quick start as a newcomer runs it: build cmd/ingress, run
// it with -dev, post a scheduler run twice, see it completed with one effect, restart on
// the same data file, and see the run still completed and a new duplicate answered
// without running it again.
func TestDevModeEndToEnd(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "ingress")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	// A tick an hour ago, written with a UTC offset as some callers do; the second post
	// writes the same instant in UTC.
	tick := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	schedule := tick.In(time.FixedZone("PST", -8*3600)).Format(time.RFC3339)

	first := startDev(t, bin, dir, addr)
	a := post(t, addr, "nightly", schedule)
	if a.status != http.StatusAccepted || a.body["duplicate"] == true || a.body["status"] != "queued" || a.location == "" {
		t.Fatalf("first post = %d %v (Location %q); want 202 queued with a Location", a.status, a.body, a.location)
	}
	id := a.body["run_id"].(string)
	if want := ledger.ScheduledRunID("", app.DemoJob, "nightly", tick); id != want {
		t.Fatalf("run_id %s, want the scheduled run ID %s", id, want)
	}
	b := post(t, addr, "nightly", tick.Format(time.RFC3339))
	if b.body["run_id"] != id || b.body["duplicate"] != true || (b.status != http.StatusAccepted && b.status != http.StatusOK) {
		t.Fatalf("second post = %d %v; want a duplicate of %s", b.status, b.body, id)
	}
	run := waitCompleted(t, addr, id)
	if _, has := run["payload"]; has {
		t.Fatal("GET /v1/runs shows the payload")
	}
	if c := post(t, addr, "nightly", schedule); c.status != http.StatusOK || c.body["duplicate"] != true || c.body["status"] != "completed" {
		t.Fatalf("post after completion = %d %v; want 200 duplicate completed", c.status, c.body)
	}
	first.stop(t)
	if n := strings.Count(first.logs.String(), "demo effect: hello, once per run"); n != 1 {
		t.Fatalf("the demo effect ran %d times, want once:\n%s", n, first.logs.String())
	}
	checkEffect(t, filepath.Join(dir, app.DevLedgerFile), id)

	second := startDev(t, bin, dir, addr)
	if got := getRun(t, addr, id); got["status"] != "completed" {
		t.Fatalf("after a restart the run is %v, want completed", got)
	}
	if d := post(t, addr, "nightly", schedule); d.status != http.StatusOK || d.body["duplicate"] != true {
		t.Fatalf("post after restart = %d %v; want 200 duplicate", d.status, d.body)
	}
	time.Sleep(500 * time.Millisecond)
	second.stop(t)
	if strings.Contains(second.logs.String(), "demo job running") {
		t.Fatalf("the restarted process ran the completed run again:\n%s", second.logs.String())
	}
}

type devProc struct {
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
	done chan struct{}
}

func startDev(t *testing.T, bin, dir, addr string) *devProc {
	t.Helper()
	cmd := exec.Command(bin, "-dev", "-dev-pubsub-port", "0", "-addr", addr, "-demo-delay", "300ms")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUNONCE_LEDGER=") // the default: the file in the working directory
	p := &devProc{cmd: cmd, logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	// The banner names the address, the ledger file and the curl to try.
	banner := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "/v1/runs/RUN_ID") {
				banner <- b.String()
				io.Copy(io.Discard, stdout)
				return
			}
		}
		banner <- b.String()
	}()
	select {
	case text := <-banner:
		for _, want := range []string{"http://" + addr, filepath.Join(dir, app.DevLedgerFile), "X-CloudScheduler-JobName", "X-CloudScheduler-ScheduleTime", "curl -i -X POST"} {
			if !strings.Contains(text, want) {
				t.Fatalf("the banner does not show %q:\n%s\nlogs:\n%s", want, text, p.logs.String())
			}
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("no banner within 60s; logs:\n%s", p.logs.String())
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.logs.String(), "authentication is OFF"); {
		if time.Now().After(deadline) {
			t.Fatalf("-dev does not say loudly that authentication is off:\n%s", p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

func (p *devProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("-dev did not stop within 15s of SIGTERM")
	}
}

type answer struct {
	status   int
	body     map[string]any
	location string
}

func post(t *testing.T, addr, schedJob, schedTime string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/"+app.DemoJob, strings.NewReader(`{"hello":"world"}`))
	req.Header.Set("x-cloudscheduler-jobname", schedJob)
	req.Header.Set("X-CLOUDSCHEDULER-SCHEDULETIME", schedTime)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return answer{resp.StatusCode, body, resp.Header.Get("Location")}
}

func getRun(t *testing.T, addr, id string) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/v1/runs/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var run map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&run); err != nil {
		t.Fatal(err)
	}
	return run
}

func waitCompleted(t *testing.T, addr, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		run := getRun(t, addr, id)
		if run["status"] == "completed" {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %v after 30s, want completed", id, run)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkEffect(t *testing.T, path, id string) {
	t.Helper()
	l, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e, err := l.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: id, Name: app.DemoEffect})
	if err != nil || e.Status != ledger.EffectDone || e.Attempt != 1 {
		t.Fatalf("the demo run's effect = %+v, %v; want done by attempt 1", e, err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr())
}

// TestDevSecondSignalAndRestart: Ctrl-C with a run in flight waits for the grace; a
// second Ctrl-C stops at once, releasing the run. After a restart the released run is
// running again within seconds: -dev republishes the queued runs whose messages its
// in-process Pub/Sub lost, instead of leaving them to the rescuer (~5 minutes).
func TestDevSecondSignalAndRestart(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "ingress")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir, addr := t.TempDir(), freeAddr(t)
	first := startDev(t, bin, dir, addr)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/"+app.DemoJob, strings.NewReader(`{"sleep":"60s"}`))
	req.Header.Set("Idempotency-Key", "long-one")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		RunID string `json:"run_id"`
	}
	json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	waitStatus(t, addr, accepted.RunID, "running", 1)

	first.cmd.Process.Signal(os.Interrupt)
	time.Sleep(300 * time.Millisecond)
	begin := time.Now()
	first.cmd.Process.Signal(os.Interrupt)
	select {
	case <-first.done:
	case <-time.After(6 * time.Second):
		t.Fatalf("-dev still runs 6s after a second Ctrl-C (the grace is 8s):\n%s", first.logs.String())
	}
	if d := time.Since(begin); d > 4*time.Second {
		t.Fatalf("-dev took %s to stop after a second Ctrl-C", d)
	}
	l, err := sqlite.Open(t.Context(), filepath.Join(dir, app.DevLedgerFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	run, err := l.Get(t.Context(), &ledger.GetParams{RunID: accepted.RunID})
	l.Close()
	if err != nil || run.Status != ledger.StatusQueued {
		t.Fatalf("after a second Ctrl-C the run is %+v, %v; want it released (queued)\n%s", run, err, first.logs.String())
	}

	second := startDev(t, bin, dir, addr)
	waitStatus(t, addr, accepted.RunID, "running", 2)
	if !strings.Contains(second.logs.String(), "republished the runs left queued") {
		t.Errorf("the restart does not say it republished the queued run:\n%s", second.logs.String())
	}
	second.cmd.Process.Signal(os.Interrupt)
	time.Sleep(100 * time.Millisecond)
	second.cmd.Process.Signal(os.Interrupt)
	<-second.done
}

// waitStatus waits up to 10s for run id to have status at attempt.
func waitStatus(t *testing.T, addr, id, status string, attempt float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		run := getRun(t, addr, id)
		if run["status"] == status && run["attempt"] == attempt {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %v after 10s, want %s at attempt %v", id, run, status, attempt)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
