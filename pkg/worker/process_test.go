package worker_test

// Tests with worker processes: this test binary, started again with childEnv set, runs a
// worker (pkg/worker with real Go handlers) against a shared SQLite ledger and a Pub/Sub
// (the official emulator when PUBSUB_EMULATOR_HOST is set, else an in-process server the
// parent hosts), and the parent kills, pauses and stops those processes.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/runonce/runonce/internal/obs"
	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/sqlite"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/queue/pubsubtest"
	"github.com/runonce/runonce/pkg/worker"
)

const childEnv = "RUNONCE_WORKER_TEST_CHILD"

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

// childSpec is what a child worker process runs against.
type childSpec struct {
	Ledger, Project, Topic, Subscription, Sink string
	Lease, Grace                               time.Duration
}

func runChild(raw string) error {
	var s childSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	led, err := sqlite.Open(ctx, s.Ledger, nil)
	if err != nil {
		return err
	}
	defer led.Close()
	client, err := queue.NewClient(ctx, s.Project, nil)
	if err != nil {
		return err
	}
	defer client.Close()
	pub := queue.NewPublisher(client, s.Topic, nil)
	defer pub.Close()
	sub := queue.NewSubscriber(client, s.Subscription, &queue.SubscriberOptions{
		Concurrency: 4, MaxDurationPerAckExtension: 10 * time.Second, ShutdownTimeout: s.Grace + time.Second,
	})
	mux := worker.NewMux()
	call := func(ctx context.Context, path, key string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.Sink+path, nil)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Pid", fmt.Sprint(os.Getpid()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("sink answered %d", resp.StatusCode)
		}
		return nil
	}
	mux.HandleFunc("two-effects", func(ctx context.Context, j *worker.Job) error {
		if err := worker.Effect(ctx, "first", func(ctx context.Context, key string) error { return call(ctx, "/first", key) }); err != nil {
			return err
		}
		return worker.Effect(ctx, "second", func(ctx context.Context, key string) error { return call(ctx, "/second", key) })
	})
	mux.HandleFunc("long", func(ctx context.Context, j *worker.Job) error { return call(ctx, "/long", worker.IdempotencyKey(ctx)) })
	mux.HandleFunc("batch", func(ctx context.Context, j *worker.Job) error {
		_, err := worker.Batch(ctx, processBatch, processBatchItems(), func(ctx context.Context, item, key string) error {
			return call(ctx, "/item/"+item, key)
		}, &worker.BatchOptions{Parallelism: 8, Checkpoint: processCheckpoint})
		return err
	})
	w, err := worker.New(&worker.Config{
		Ledger: ledger.New(led, nil), Handler: mux, Lease: s.Lease, Subscriber: sub, Concurrency: 4, Republish: pub, Grace: s.Grace, RescueInterval: 400 * time.Millisecond,
		PickupTimeout: 2 * time.Second, Logger: obs.NewLogger(os.Stderr, -4),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// sink is the downstream the child workers call; it records every call and can hold the
// calls of one process until the test releases them.
type sink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []sinkCall
	holdPid string // calls from this pid wait for release
	release chan struct{}
	arrived chan sinkCall
}

type sinkCall struct{ Path, Key, Pid string }

func newSink(t *testing.T) *sink {
	s := &sink{release: make(chan struct{}), arrived: make(chan sinkCall, 16)}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := sinkCall{r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("X-Pid")}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		hold := s.holdPid != "" && c.Pid == s.holdPid && c.Path != "/first"
		s.mu.Unlock()
		s.arrived <- c
		if hold {
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(func() {
		s.mu.Lock()
		if s.holdPid != "" {
			select {
			case <-s.release:
			default:
				close(s.release)
			}
		}
		s.mu.Unlock()
		s.srv.Close()
	})
	return s
}

func (s *sink) hold(pid int) {
	s.mu.Lock()
	s.holdPid = fmt.Sprint(pid)
	s.mu.Unlock()
}

func (s *sink) waitFor(t *testing.T, path string, pid int) sinkCall {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case c := <-s.arrived:
			if c.Path == path && c.Pid == fmt.Sprint(pid) {
				return c
			}
		case <-timeout:
			t.Fatalf("no call to %s from pid %d within 30s", path, pid)
		}
	}
}

func (s *sink) callsTo(path string) []sinkCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sinkCall
	for _, c := range s.calls {
		if c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

type cluster struct {
	t    *testing.T
	spec childSpec
	led  *sqlite.Ledger
	pub  *queue.Publisher
	sink *sink
	env  []string
}

func newCluster(t *testing.T, lease, grace time.Duration) *cluster {
	t.Helper()
	ctx := t.Context()
	c := &cluster{t: t, sink: newSink(t), env: os.Environ()}
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	c.spec = childSpec{
		Ledger: filepath.Join(t.TempDir(), "ledger.db"), Project: "runonce-test", Topic: "runs-" + id, Subscription: "work-" + id,
		Sink: c.sink.srv.URL, Lease: lease, Grace: grace,
	}
	var client *pubsub.Client
	if os.Getenv("PUBSUB_EMULATOR_HOST") != "" {
		var err error
		if client, err = queue.NewClient(ctx, c.spec.Project, nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
	} else {
		if os.Getenv("CI") == "true" {
			t.Fatal("PUBSUB_EMULATOR_HOST is unset in CI: the test command starts the Pub/Sub emulator")
		}
		ps, err := pubsubtest.NewInProcess(ctx, c.spec.Project)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ps.Close() })
		client = ps.Client
		c.env = append(c.env, "PUBSUB_EMULATOR_HOST="+ps.Addr())
	}
	if _, err := queue.EnsureTopic(ctx, client, c.spec.Topic); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.EnsureSubscription(ctx, client, c.spec.Topic, c.spec.Subscription, &pubsubpb.Subscription{
		AckDeadlineSeconds: 10,
		RetryPolicy:        &pubsubpb.RetryPolicy{MinimumBackoff: durationpb.New(time.Second), MaximumBackoff: durationpb.New(2 * time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	c.pub = queue.NewPublisher(client, c.spec.Topic, nil)
	t.Cleanup(func() { c.pub.Close() })
	var err error
	if c.led, err = sqlite.Open(ctx, c.spec.Ledger, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.led.Close() })
	return c
}

type proc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{} // closed when the process exited; then err is its exit
	err    error
}

func (c *cluster) start() *proc {
	c.t.Helper()
	raw, _ := json.Marshal(c.spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(c.env, childEnv+"="+string(raw))
	p := &proc{cmd: cmd, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	c.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-p.done
		if c.t.Failed() {
			c.t.Logf("worker %d stderr:\n%s", cmd.Process.Pid, tailLines(p.stderr.String(), 40))
		}
	})
	return p
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (c *cluster) submit(job, key string) string {
	c.t.Helper()
	m := message(job, key, `{"n":1}`)
	if _, err := c.pub.Publish(c.t.Context(), m); err != nil {
		c.t.Fatal(err)
	}
	return m.Identity.RunID
}

func (c *cluster) waitCompleted(id string, within time.Duration) *ledger.Run {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := c.led.Get(c.t.Context(), &ledger.GetParams{RunID: id})
		if err == nil && r.Status == ledger.StatusCompleted {
			return r
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("run %s not completed within %v: %+v, %v", id[:8], within, r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestProcessKilledMidJobIsTakenOver(t *testing.T) {
	t.Parallel()
	c := newCluster(t, time.Second, time.Second)
	a := c.start()
	c.sink.hold(a.cmd.Process.Pid)
	id := c.submit("two-effects", "kill")
	c.sink.waitFor(t, "/second", a.cmd.Process.Pid) // the first effect is done, the second in flight
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-a.done
	b := c.start()
	r := c.waitCompleted(id, 45*time.Second)
	if r.Attempt < 2 {
		t.Fatalf("completed at attempt %d, want a takeover", r.Attempt)
	}
	first, second := c.sink.callsTo("/first"), c.sink.callsTo("/second")
	if len(first) != 1 {
		t.Fatalf("the effect done before the kill was done %d times, want once", len(first))
	}
	if len(second) != 2 || second[0].Key != second[1].Key || second[1].Pid != fmt.Sprint(b.cmd.Process.Pid) ||
		second[0].Key != ledger.EffectKey(id, "second") {
		t.Fatalf("the effect in flight at the kill: %+v; want it retried once by the new worker with the same key", second)
	}
}

func TestProcessPausedPastItsLeaseIsFencedOut(t *testing.T) {
	t.Parallel()
	if os.Getenv("PUBSUB_EMULATOR_HOST") == "" && os.Getenv("CI") != "true" {
		// The in-process server hands every message to the first stream, the paused
		// process's among them, so the other worker would never see the run.
		t.Skip("needs the official Pub/Sub emulator (PUBSUB_EMULATOR_HOST); the test command starts it")
	}
	c := newCluster(t, time.Second, time.Second)
	a := c.start()
	c.sink.hold(a.cmd.Process.Pid)
	id := c.submit("two-effects", "pause")
	c.sink.waitFor(t, "/second", a.cmd.Process.Pid)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b := c.start()
	r := c.waitCompleted(id, 45*time.Second)
	c.sink.waitFor(t, "/second", b.cmd.Process.Pid)
	// The paused worker resumes: its renewal finds the lease lost, its job is cancelled,
	// and it writes nothing.
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(a.stderr.String(), "lease lost") {
		if time.Now().After(deadline) {
			t.Fatalf("the resumed worker never reported its lease lost:\n%s", tailLines(a.stderr.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	after, err := c.led.Get(t.Context(), &ledger.GetParams{RunID: id})
	if err != nil || after.Status != ledger.StatusCompleted || after.Attempt != r.Attempt || !after.CompletedAt.Equal(r.CompletedAt) {
		t.Fatalf("after the paused worker resumed: %+v, %v; want the run completed by attempt %d, unchanged", after, err, r.Attempt)
	}
	e, err := c.led.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: id, Name: "second"})
	if err != nil || e.Status != ledger.EffectDone || e.Attempt != r.Attempt {
		t.Fatalf("effect second = %+v, %v; want done by attempt %d", e, err, r.Attempt)
	}
}

func TestSigtermReleasesALongJobWithinTheGrace(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	c := newCluster(t, 3*time.Second, grace)
	a := c.start()
	c.sink.hold(a.cmd.Process.Pid)
	id := c.submit("long", "sigterm")
	c.sink.waitFor(t, "/long", a.cmd.Process.Pid)
	start := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
		if a.err != nil {
			t.Fatalf("worker exited with %v after SIGTERM", a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker still running 10s after SIGTERM (Cloud Run would kill it)")
	}
	took := time.Since(start)
	r, err := c.led.Get(t.Context(), &ledger.GetParams{RunID: id})
	if err != nil || r.Status != ledger.StatusQueued || !strings.Contains(r.LastError, "shutting down") {
		t.Fatalf("after SIGTERM the run is %+v, %v; want released", r, err)
	}
	t.Logf("SIGTERM to exit: %v (grace %v)", took, grace)
	b := c.start()
	r = c.waitCompleted(id, 45*time.Second)
	if calls := c.sink.callsTo("/long"); len(calls) != 2 || calls[1].Pid != fmt.Sprint(b.cmd.Process.Pid) || calls[0].Key != calls[1].Key {
		t.Fatalf("calls = %+v; want the released run completed by the second worker with the same key", calls)
	}
	if r.Attempt != 2 {
		t.Fatalf("completed at attempt %d, want 2", r.Attempt)
	}
}
