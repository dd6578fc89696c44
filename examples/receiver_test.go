package examples_test

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/runonce/runonce/pkg/worker"
)

// receiverProcess is examples/receiver running as a process of its own.
type receiverProcess struct {
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
	done chan error
}

// startReceiver starts the built receiver on addr over the SQLite file db.
func startReceiver(t *testing.T, bin, addr, db, token string) *receiverProcess {
	t.Helper()
	p := &receiverProcess{logs: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "-addr", addr, "-db", db, "-work", "5s", "-lease", "2s")
	p.cmd.Env = append(os.Environ(), "RECEIVER_WORKER_TOKEN="+token)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(p.kill)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/charges"); err == nil {
			resp.Body.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver did not answer within 30s:\n%s", p.logs.String())
		}
	}
}

func (p *receiverProcess) kill() {
	select {
	case <-p.done:
		p.done <- nil
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		p.done <- <-p.done
	}
}

type charge struct {
	ChargeID       int64  `json:"charge_id"`
	IdempotencyKey string `json:"idempotency_key"`
	RunID          string `json:"run_id"`
	Attempt        int64  `json:"attempt"`
	Customer       string `json:"customer"`
}

func charges(t *testing.T, addr string) []charge {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/charges")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []charge
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type runStatus struct {
	Status       string `json:"status"`
	AttemptsMade int    `json:"attempts_made"`
	Attempt      int64  `json:"attempt"`
	LastError    string `json:"last_error"`
}

// TestReceiverBehindDev runs examples/receiver, a module of its own built as a user
// builds it, as the HTTP target of -dev's worker. The target's timeout (1s) is shorter
// than a charge (5s), so the worker's first call times out and its retry meets the
// charge in flight (409 with Retry-After, which releases the run until then), and the
// next one its stored answer; a second run's charge dies with its process and is charged by the
// process that replaces it once the dead claim's lease passed. Each run charges once,
// and a request of a superseded attempt is refused.
func TestReceiverBehindDev(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "receiver")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "receiver"
	build.Env = append(os.Environ(), "GOWORK=off") // as a user builds it: its own go.mod
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/receiver: %v\n%s", err, out)
	}
	recvAddr, devAddr, token := freeAddr(t), freeAddr(t), "test-token"
	db := filepath.Join(dir, "receiver.db")
	recv := startReceiver(t, bin, recvAddr, db, token)

	jobs := fmt.Sprintf(`{"jobs": {"charge": {"url": "http://%s/charges", "timeout": "1s", "max_attempts": 10,
		"headers": {"X-Worker-Token": %q}}}}`, recvAddr, token)
	jobsFile := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(jobsFile, []byte(jobs), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, devLogs syncbuf.Buffer
	ctx, cancel := context.WithCancel(t.Context())
	devDone := make(chan error, 1)
	go func() {
		devDone <- app.RunIngress(ctx, []string{"-dev", "-addr", devAddr, "-ledger", "sqlite://" + filepath.Join(dir, "dev.db"), "-jobs", jobsFile}, nil, &out, &devLogs)
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

	post := func(key, customer string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+devAddr+"/v1/jobs/charge", strings.NewReader(fmt.Sprintf(`{"customer":%q,"amount":100}`, customer)))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var accepted struct {
			RunID string `json:"run_id"`
		}
		json.NewDecoder(resp.Body).Decode(&accepted)
		if resp.StatusCode != http.StatusAccepted || accepted.RunID == "" {
			t.Fatalf("POST /v1/jobs/charge = %d, want 202 with a run_id", resp.StatusCode)
		}
		return accepted.RunID
	}
	finished := func(runID string) runStatus {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			resp, err := http.Get("http://" + devAddr + "/v1/runs/" + runID)
			if err != nil {
				t.Fatal(err)
			}
			var r runStatus
			json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			switch {
			case r.Status == "completed":
				return r
			case r.Status == "failed" || time.Now().After(deadline):
				t.Fatalf("run %s is %s (%s), want completed\n-dev:\n%s\nreceiver:\n%s", runID, r.Status, r.LastError, devLogs.String(), recv.logs.String())
			}
		}
	}
	chargesOf := func(runID string) []charge {
		var mine []charge
		for _, c := range charges(t, recvAddr) {
			if c.RunID == runID {
				mine = append(mine, c)
			}
		}
		return mine
	}

	// Retries: the first call times out while the charge runs.
	first := post("invoice-2026-11-c1", "c-1")
	r := finished(first)
	if r.AttemptsMade < 2 {
		t.Fatalf("run %s completed in %d attempt(s); the test wants the first call's timeout to have been retried", first, r.AttemptsMade)
	}
	got := chargesOf(first)
	if len(got) != 1 {
		t.Fatalf("run %s charged %d times in %d attempts, want once: %+v\nreceiver:\n%s", first, len(got), r.AttemptsMade, got, recv.logs.String())
	}
	inFlight := false
	for _, line := range strings.Split(devLogs.String(), "\n") {
		inFlight = inFlight || strings.Contains(line, first) && strings.Contains(line, "answered 409") && strings.Contains(line, `"outcome":"released"`)
	}
	if !inFlight {
		t.Fatalf("no retry of run %s met the charge in flight (409 with Retry-After, released):\n%s", first, devLogs.String())
	}

	// A superseded attempt's call, delivered late, is refused and charges nothing;
	// the newest attempt's duplicate gets the stored answer.
	key := ledger.EffectKey(first, worker.RunEffect)
	call := func(attempt int64) (int, http.Header) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+recvAddr+"/charges", strings.NewReader(`{"customer":"c-1","amount":100}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Runonce-Run-Id", first)
		req.Header.Set("X-Runonce-Attempt", fmt.Sprint(attempt))
		req.Header.Set("X-Worker-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	if status, h := call(1); status != http.StatusConflict || h.Get("Retry-After") != "" {
		t.Fatalf("attempt 1's late call = %d (Retry-After %q), want 409 without Retry-After", status, h.Get("Retry-After"))
	}
	if status, h := call(r.Attempt); status != http.StatusCreated || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("attempt %d's duplicate call = %d, want the stored 201, replayed", r.Attempt, status)
	}
	if got := chargesOf(first); len(got) != 1 {
		t.Fatalf("after the late calls run %s has %d charges, want 1", first, len(got))
	}

	// A crash: the receiver dies mid-charge, another process takes its place.
	second := post("invoice-2026-11-c2", "c-2")
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(recv.logs.String(), `"customer":"c-2"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second charge did not start within 30s:\n%s", recv.logs.String())
		}
	}
	recv.kill()
	recv = startReceiver(t, bin, recvAddr, db, token)
	r = finished(second)
	if got := chargesOf(second); len(got) != 1 {
		t.Fatalf("run %s charged %d times across the crash, want once: %+v", second, len(got), got)
	}
	if n := len(charges(t, recvAddr)); n != 2 {
		t.Fatalf("%d charges in all, want 2", n)
	}
}
