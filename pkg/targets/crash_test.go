package targets_test

// The crash test: this test binary, started again with childEnv set, is a worker process
// that runs one delivery of a Workflows target against a shared SQLite ledger and the
// parent's fake; the parent kills it after the API accepted the start and before the
// worker recorded it.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/targets"
	"github.com/runonce/runonce/pkg/targets/targetstest"
	"github.com/runonce/runonce/pkg/worker"
)

const childEnv = "RUNONCE_TARGETS_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		if err := runChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "child worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type childSpec struct {
	Ledger, JobsFile string
	Message          *queue.Message
	Lease            time.Duration
}

// newWorker runs the jobs file's "target" on the ledger.
func newWorker(ctx context.Context, led ledger.Driver, jobsFile string, lease time.Duration, log *slog.Logger) (*worker.Worker, func(), error) {
	js, err := jobs.Load(jobsFile)
	if err != nil {
		return nil, nil, err
	}
	tg, err := targets.New(ctx, js["target"], &targets.Options{Backoff: backoff})
	if err != nil {
		return nil, nil, err
	}
	mux := worker.NewMux()
	mux.Handle("target", tg)
	w, err := worker.New(&worker.Config{Ledger: ledger.New(led, nil), Handler: mux, Lease: lease, Logger: log})
	if err != nil {
		tg.Close()
		return nil, nil, err
	}
	return w, func() { tg.Close() }, nil
}

func runChild(raw string) error {
	var s childSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return err
	}
	ctx := context.Background()
	led, err := sqlite.Open(ctx, s.Ledger, nil)
	if err != nil {
		return err
	}
	defer led.Close()
	w, closeTarget, err := newWorker(ctx, led, s.JobsFile, s.Lease, obs.NewLogger(os.Stderr, -4))
	if err != nil {
		return err
	}
	defer closeTarget()
	v := w.Process(ctx, &queue.Delivery{Message: s.Message, PublishTime: time.Now()})
	return fmt.Errorf("the delivery ended (%s): the parent should have killed this worker first", v.Outcome)
}

func TestWorkflowsCrashBetweenStartAndRecordStartsNoSecondExecution(t *testing.T) {
	fake, err := targetstest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	dir := t.TempDir()
	jobsFile := filepath.Join(dir, "jobs.json")
	file := fmt.Sprintf(`{"jobs": {"target": {"kind": "workflows", "resource": %q, "endpoint": %q, "poll_interval": "%s"}}}`, workflow, fake.Endpoint(), testPoll)
	if err := os.WriteFile(jobsFile, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	ledPath := filepath.Join(dir, "ledger.db")
	led, err := sqlite.Open(t.Context(), ledPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()

	m := newMessage(`{"day":"2026-12-01"}`)
	const lease = time.Second
	spec, _ := json.Marshal(childSpec{Ledger: ledPath, JobsFile: jobsFile, Message: m, Lease: lease})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	killed := make(chan error, 1)
	running := make(chan *exec.Cmd, 1) // hands the started process to the hook
	// The API accepted the start: kill the worker before it hears the answer, so that it
	// can record nothing.
	fake.OnStart(func(method, name string) {
		c := <-running
		err := c.Process.Kill()
		c.Wait()
		killed <- err
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running <- cmd
	select {
	case err := <-killed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the child worker started no execution; its output:\n%s", out.String())
	}
	fake.OnStart(nil)
	if e, err := led.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: m.Identity.RunID, Name: worker.RunEffect}); err != nil || e.Status != ledger.EffectPending || e.Ref != "" {
		t.Fatalf("effect after the kill = %+v, %v; want pending, no ref (the crash window)", e, err)
	}
	started := fake.Started()
	if len(started) != 1 {
		t.Fatalf("started %v before the kill, want one", started)
	}

	// The retry, once the dead worker's lease ran out: another worker finds the
	// execution by its label and follows it.
	time.Sleep(lease + 100*time.Millisecond)
	var logs syncbuf.Buffer
	w, closeTarget, err := newWorker(t.Context(), led, jobsFile, lease, obs.NewLogger(&logs, -4))
	if err != nil {
		t.Fatal(err)
	}
	defer closeTarget()
	ch := make(chan worker.Verdict, 1)
	go func() { ch <- w.Process(t.Context(), &queue.Delivery{Message: m, PublishTime: time.Now()}) }()
	deadline := time.Now().Add(waitForAny)
	for len(fake.Calls(targetstest.WorkflowsGet)) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := fake.Finish(started[0], targetstest.Succeeded); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-ch:
		if v.Outcome != worker.OutcomeCompleted {
			t.Fatalf("retry outcome %s, want completed; log:\n%s", v.Outcome, logs.String())
		}
	case <-time.After(waitForAny):
		t.Fatalf("the retry did not finish; calls %v", fake.Calls())
	}
	if s := fake.Started(); len(s) != 1 {
		t.Fatalf("started %v: the retry started a second execution", s)
	}
	if n := len(fake.Calls(targetstest.WorkflowsList)); n != 1 {
		t.Fatalf("%d list calls, want 1 (the look-up before a create)", n)
	}
	if e, _ := led.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: m.Identity.RunID, Name: worker.RunEffect}); e == nil || e.Ref != started[0] || e.Attempt != 2 {
		t.Fatalf("effect = %+v, want done by attempt 2 with ref %s", e, started[0])
	}
	if !strings.Contains(logs.String(), "found the execution an earlier attempt started") {
		t.Fatalf("the retry's log does not say it found the earlier execution:\n%s", logs.String())
	}
}
