// Package examples holds programs written as a user writes them, each in its own module
// (see userworker), and the tests that run them against runonce.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/app"
	"github.com/runonce/runonce/internal/syncbuf"
)

// TestUserWorkerAgainstDev runs the user program of examples/userworker, a module of its
// own that imports runonce as a library, with `go run` against -dev's in-process Pub/Sub
// and ledger: -dev accepts the job from its jobs file, leaves it to a worker that joins,
// and the user's worker runs it to completed, then stops on SIGTERM.
func TestUserWorkerAgainstDev(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jobsFile := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(jobsFile, []byte(`{"jobs": {"send-invoice": {}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ledgerURL := "sqlite://" + filepath.ToSlash(filepath.Join(dir, "dev.db"))

	var out, devLogs syncbuf.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	devDone := make(chan error, 1)
	go func() {
		devDone <- app.RunIngress(ctx, []string{"-dev", "-dev-pubsub-port", "0", "-addr", addr, "-ledger", ledgerURL, "-jobs", jobsFile}, nil, &out, &devLogs)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-devDone; err != nil {
			t.Errorf("-dev: %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "/v1/runs/RUN_ID"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no -dev banner within 30s:\n%s\nlogs:\n%s", out.String(), devLogs.String())
		}
	}
	// The banner's command for one's own program, run as printed: its variables, then
	// go run . in the program's directory.
	command := regexp.MustCompile(`(?s)Start\s+it\s+from\s+its\s+directory,\s+in\s+a\s+second\s+shell:\n\n(.*?)go run \.\n`).FindStringSubmatch(out.String())
	if command == nil {
		t.Fatalf("the banner prints no command for one's own program:\n%s", out.String())
	}
	vars := regexp.MustCompile(`([A-Z_]+)=(\S+)`).FindAllStringSubmatch(command[1], -1)
	if len(vars) != 4 {
		t.Fatalf("the banner's command sets %d variables, want PUBSUB_EMULATOR_HOST and three RUNONCE_*:\n%s", len(vars), command[0])
	}

	var stderr syncbuf.Buffer
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = "userworker"
	cmd.Env = append(os.Environ(), "GOWORK=off") // as a user builds it: its own go.mod, runonce by its replace
	for _, v := range vars {
		cmd.Env = append(cmd.Env, v[1]+"="+v[2])
	}
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // go run and the program it starts: one group to signal
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/jobs/send-invoice", strings.NewReader(`{"customer":"c-1"}`))
	req.Header.Set("Idempotency-Key", "invoice:2026-11:c-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		RunID string `json:"run_id"`
	}
	json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || accepted.RunID == "" {
		t.Fatalf("POST /v1/jobs/send-invoice = %d %+v, want 202 with a run_id", resp.StatusCode, accepted)
	}

	// go run compiles the program first: minutes on a loaded 2-core machine.
	status := ""
	for deadline := time.Now().Add(5 * time.Minute); status != "completed"; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the user's worker exited before running the job: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %q after 5m, want completed\nworker:\n%s\n-dev:\n%s", accepted.RunID, status, stderr.String(), devLogs.String())
		}
		resp, err := http.Get("http://" + addr + "/v1/runs/" + accepted.RunID)
		if err != nil {
			t.Fatal(err)
		}
		var run struct {
			Status       string `json:"status"`
			AttemptsMade int    `json:"attempts_made"`
		}
		json.NewDecoder(resp.Body).Decode(&run)
		resp.Body.Close()
		status = run.Status
		if status == "failed" {
			t.Fatalf("run failed\nworker:\n%s", stderr.String())
		}
	}

	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		stopped = true
	case <-time.After(30 * time.Second):
		t.Fatalf("the user's worker did not stop within 30s of SIGTERM:\n%s", stderr.String())
	}
	logs := stderr.String()
	if n := strings.Count(logs, `"msg":"invoice sent"`); n != 1 {
		t.Errorf("the invoice was sent %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs, `"msg":"worker: stopped"`) {
		t.Errorf("the worker did not log its stop after SIGTERM:\n%s", logs)
	}
	if bytes.Contains([]byte(logs), []byte("no handler")) {
		t.Errorf("the user's worker saw a job it has no handler for:\n%s", logs)
	}
}

// TestJobsGuideProgramIsUserworker: the worker program of docs/jobs.md ("A worker
// program") shows the imports examples/userworker needs to run, the backends' blank imports
// included (without pkg/ledger/sqlite it cannot open -dev's ledger), and reads the same
// variables the -dev banner's join command sets.
func TestJobsGuideProgramIsUserworker(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../docs/jobs.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(guide), "## A worker program")
	_, block, found := strings.Cut(section, "```go\n")
	block, _, _ = strings.Cut(block, "```")
	if !found || !strings.Contains(block, "func main()") {
		t.Fatalf("no Go program under docs/jobs.md's \"A worker program\":\n%s", block)
	}
	prog, err := os.ReadFile(filepath.Join("userworker", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	imports := regexp.MustCompile(`(?m)^\t(_ )?("[^"]+")`)
	want := imports.FindAllStringSubmatch(block, -1)
	if len(want) < 5 {
		t.Fatalf("docs/jobs.md's program shows %d imports; want its import block", len(want))
	}
	for _, m := range want {
		if !regexp.MustCompile(`(?m)^\t` + regexp.QuoteMeta(m[1]+m[2])).Match(prog) {
			t.Errorf("docs/jobs.md imports %s%s, examples/userworker does not", m[1], m[2])
		}
	}
	if !strings.Contains(block, `_ "github.com/runonce/runonce/pkg/ledger/sqlite"`) {
		t.Error("docs/jobs.md's program does not import the SQLite backend: it cannot open -dev's ledger")
	}
	for _, v := range []string{"RUNONCE_LEDGER", "RUNONCE_SUBSCRIPTION", "RUNONCE_TOPIC"} {
		if !strings.Contains(block, `os.Getenv("`+v+`")`) || !bytes.Contains(prog, []byte(`os.Getenv("`+v+`")`)) {
			t.Errorf("docs/jobs.md's program and examples/userworker do not both read %s", v)
		}
	}
}
