package targets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/cloudbuild/apiv1/v2/cloudbuildpb"
	"cloud.google.com/go/run/apiv2/runpb"
	"cloud.google.com/go/workflows/executions/apiv1/executionspb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/targets"
	"github.com/runonce/runonce/pkg/targets/targetstest"
	"github.com/runonce/runonce/pkg/worker"
)

const (
	workflow   = "projects/p/locations/us-central1/workflows/nightly"
	runJob     = "projects/p/locations/us-central1/jobs/etl"
	buildTrig  = "projects/p/locations/global/triggers/release"
	backoff    = 20 * time.Millisecond
	testPoll   = 10 * time.Millisecond
	waitForAny = 10 * time.Second
)

var runSeq atomic.Int64

// bench is a fake, a ledger and a way to make workers that run one target.
type bench struct {
	t    testing.TB
	fake *targetstest.Fake
	led  *pausingLedger
	job  *jobs.Job
	// opts are the targets' options; Backoff is set to backoff.
	opts targets.Options
}

// newBench parses a jobs file naming the target "target" of kind with the extra fields.
func newBench(t testing.TB, kind, resource, extra string) *bench {
	t.Helper()
	fake, err := targetstest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	file := fmt.Sprintf(`{"jobs": {"target": {"kind": %q, "resource": %q, "endpoint": %q, "poll_interval": "%s"%s}}}`,
		kind, resource, fake.Endpoint(), testPoll, extra)
	js, err := jobs.Parse(strings.NewReader(file))
	if err != nil {
		t.Fatalf("jobs file %s: %v", file, err)
	}
	return &bench{t: t, fake: fake, led: &pausingLedger{Driver: memory.New(nil)}, job: js["target"]}
}

func (b *bench) worker() *worker.Worker {
	b.t.Helper()
	return b.workerWithLease(3 * time.Second)
}

// workerWithLease makes a worker whose lease (renewed every third of it) is lease.
func (b *bench) workerWithLease(lease time.Duration) *worker.Worker {
	b.t.Helper()
	o := b.opts
	o.Backoff = backoff
	tg, err := targets.New(b.t.Context(), b.job, &o)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { tg.Close() })
	mux := worker.NewMux()
	mux.Handle(b.job.Name, tg)
	w, err := worker.New(&worker.Config{Ledger: ledger.New(b.led, nil), Handler: mux, Lease: lease, MaxAttempts: 5})
	if err != nil {
		b.t.Fatal(err)
	}
	return w
}

func newMessage(payload string) *queue.Message {
	key := fmt.Sprintf("run-%d-%d", time.Now().UnixNano(), runSeq.Add(1))
	return &queue.Message{Identity: ledger.Identity{
		RunID: ledger.KeyedRunID("ns", "target", key), Namespace: "ns", Job: "target", Key: key,
		PayloadHash: ledger.PayloadHash([]byte(payload)), Payload: []byte(payload),
	}}
}

// process runs a delivery in the background; the verdict arrives on the channel.
func process(b *bench, w *worker.Worker, m *queue.Message) <-chan worker.Verdict {
	ch := make(chan worker.Verdict, 1)
	go func() { ch <- w.Process(b.t.Context(), &queue.Delivery{Message: m, PublishTime: time.Now()}) }()
	return ch
}

func (b *bench) verdict(ch <-chan worker.Verdict, want string) worker.Verdict {
	b.t.Helper()
	select {
	case v := <-ch:
		if v.Outcome != want {
			b.t.Fatalf("delivery outcome %s, want %s", v.Outcome, want)
		}
		return v
	case <-time.After(waitForAny):
		b.t.Fatalf("no verdict within %s (want %s); calls %v", waitForAny, want, b.fake.Calls())
	}
	return worker.Verdict{}
}

// verdictRetryingIn waits for a released verdict whose retry is due delay after the
// release: no sooner than delay after the delivery began, no later than delay after its
// verdict (1ms of slack for the ledger's rounding).
func (b *bench) verdictRetryingIn(ch <-chan worker.Verdict, delay time.Duration) worker.Verdict {
	b.t.Helper()
	before := time.Now()
	v := b.verdict(ch, worker.OutcomeReleased)
	after := time.Now()
	if v.RetryAt.Before(before.Add(delay-time.Millisecond)) || v.RetryAt.After(after.Add(delay+time.Millisecond)) {
		b.t.Fatalf("retry at %s after the delivery began, %s after its verdict; want a delay of %s",
			v.RetryAt.Sub(before), v.RetryAt.Sub(after), delay)
	}
	return v
}

// waitStarted waits until n executions were started and returns the last one's name.
func (b *bench) waitStarted(n int) string {
	b.t.Helper()
	deadline := time.Now().Add(waitForAny)
	for time.Now().Before(deadline) {
		if s := b.fake.Started(); len(s) >= n {
			return s[n-1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.t.Fatalf("%d executions started within %s, want %d", len(b.fake.Started()), waitForAny, n)
	return ""
}

func (b *bench) run(m *queue.Message) *ledger.Run {
	b.t.Helper()
	r, err := b.led.Get(b.t.Context(), &ledger.GetParams{RunID: m.Identity.RunID})
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

func (b *bench) ref(m *queue.Message) string {
	b.t.Helper()
	e, err := b.led.GetEffect(b.t.Context(), &ledger.GetEffectParams{RunID: m.Identity.RunID, Name: worker.RunEffect})
	if err != nil {
		b.t.Fatal(err)
	}
	return e.Ref
}

func TestWorkflowsStartsOneExecutionAndWaits(t *testing.T) {
	b := newBench(t, jobs.KindWorkflows, workflow, "")
	w := b.worker()
	m := newMessage(`{"region":"eu"}`)
	ch := process(b, w, m)
	name := b.waitStarted(1)

	req := b.fake.Calls(targetstest.WorkflowsCreate)[0].Request.(*executionspb.CreateExecutionRequest)
	key := ledger.EffectKey(m.Identity.RunID, worker.RunEffect)
	if got := req.GetExecution().GetLabels()[targets.LabelEffect]; got != key[:63] {
		t.Fatalf("execution label %s = %q, want the effect key's first 63 characters %q", targets.LabelEffect, got, key[:63])
	}
	var arg struct {
		Region  string           `json:"region"`
		Runonce targets.Identity `json:"runonce"`
	}
	if err := json.Unmarshal([]byte(req.GetExecution().GetArgument()), &arg); err != nil {
		t.Fatalf("argument %q: %v", req.GetExecution().GetArgument(), err)
	}
	if arg.Region != "eu" || arg.Runonce.IdempotencyKey != key || arg.Runonce.RunID != m.Identity.RunID || arg.Runonce.Job != "target" || arg.Runonce.Attempt != 1 {
		t.Fatalf("argument = %+v, want the payload with the run's identity under runonce", arg)
	}
	select {
	case v := <-ch:
		t.Fatalf("the run finished (%s) while its execution was running", v.Outcome)
	case <-time.After(5 * testPoll):
	}
	if st := b.run(m).Status; st != ledger.StatusRunning {
		t.Fatalf("run is %s while its execution runs, want running", st)
	}
	if err := b.fake.Finish(name, targetstest.Succeeded); err != nil {
		t.Fatal(err)
	}
	b.verdict(ch, worker.OutcomeCompleted)
	if got := b.ref(m); got != name {
		t.Fatalf("effect ref = %q, want the execution %q", got, name)
	}

	// A duplicate delivery starts nothing.
	b.verdict(process(b, w, m), worker.OutcomeTerminal)
	if s := b.fake.Started(); len(s) != 1 {
		t.Fatalf("started %v, want one execution", s)
	}
	if l := b.fake.Calls(targetstest.WorkflowsList); len(l) != 1 {
		t.Fatalf("listed executions %d times, want once, after the start (the duplicate delivery lists nothing)", len(l))
	}
}

func TestWorkflowsPayloadMustBeAnObject(t *testing.T) {
	b := newBench(t, jobs.KindWorkflows, workflow, "")
	m := newMessage(`[1,2]`)
	b.verdict(process(b, b.worker(), m), worker.OutcomeFailed)
	if e := b.run(m).LastError; !strings.Contains(e, "not a JSON object") {
		t.Fatalf("last error %q does not say the payload is not a JSON object", e)
	}
	if s := b.fake.Started(); len(s) != 0 {
		t.Fatalf("started %v", s)
	}
}

func TestFailedExecutionFailsTheRun(t *testing.T) {
	for _, o := range []struct {
		name    string
		outcome targetstest.Outcome
		want    string
	}{{"failed", targetstest.Failed, "FAILED"}, {"cancelled", targetstest.Cancelled, "CANCELLED"}} {
		t.Run(o.name, func(t *testing.T) {
			b := newBench(t, jobs.KindWorkflows, workflow, "")
			m := newMessage(``)
			ch := process(b, b.worker(), m)
			if err := b.fake.Finish(b.waitStarted(1), o.outcome); err != nil {
				t.Fatal(err)
			}
			b.verdict(ch, worker.OutcomeFailed)
			if e := b.run(m).LastError; !strings.Contains(e, o.want) {
				t.Fatalf("last error %q does not name the state %s", e, o.want)
			}
		})
	}
}

func TestShutdownMidWaitResumesOnAnotherWorker(t *testing.T) {
	for _, kind := range []struct{ kind, resource, extra string }{
		{jobs.KindWorkflows, workflow, ""},
		{jobs.KindCloudRun, runJob, ""},
		{jobs.KindCloudBuild, buildTrig, `, "wait": true`},
	} {
		t.Run(kind.kind, func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, kind.extra)
			first := b.worker()
			m := newMessage(`{}`)
			ch := process(b, first, m)
			name := b.waitStarted(1)
			time.Sleep(3 * testPoll) // polling
			first.CancelJobs()       // the shutdown grace is over
			b.verdict(ch, worker.OutcomeReleased)

			ch = process(b, b.worker(), m)
			time.Sleep(3 * testPoll)
			if err := b.fake.Finish(name, targetstest.Succeeded); err != nil {
				t.Fatal(err)
			}
			b.verdict(ch, worker.OutcomeCompleted)
			if s := b.fake.Started(); len(s) != 1 {
				t.Fatalf("started %v, want one execution across both workers", s)
			}
			if r := b.run(m); r.Attempt != 2 {
				t.Fatalf("run completed at attempt %d, want 2", r.Attempt)
			}
		})
	}
}

// A quota denial of the API's front end proves nothing started: the try is recorded as
// not started and the run retried with exponential backoff under the next effect name.
func TestQuotaDenialOnStartRetriesWithBackoff(t *testing.T) {
	b := newBench(t, jobs.KindWorkflows, workflow, "")
	w := b.worker()
	quota := targetstest.QuotaExceeded("workflowexecutions.googleapis.com", "workflowexecutions.googleapis.com/executions")
	b.fake.FailNext(targetstest.WorkflowsCreate, quota, quota)
	m := newMessage(`{}`)
	for _, want := range []time.Duration{backoff, 2 * backoff} { // exponential
		v := b.verdictRetryingIn(process(b, w, m), want)
		time.Sleep(time.Until(v.RetryAt))
	}
	if e := b.run(m).LastError; !strings.Contains(e, "Quota exceeded") || !strings.Contains(e, "not started; retried with backoff") {
		t.Fatalf("last error %q does not say the start was denied and retried with backoff", e)
	}
	ch := process(b, w, m)
	if err := b.fake.Finish(b.waitStarted(1), targetstest.Succeeded); err != nil {
		t.Fatal(err)
	}
	b.verdict(ch, worker.OutcomeCompleted)
	if n := len(b.fake.Calls(targetstest.WorkflowsCreate)); n != 3 {
		t.Fatalf("%d create calls, want 3 (two denied, one started)", n)
	}
	if n := len(b.fake.Calls(targetstest.WorkflowsList)); n != 1 {
		t.Fatalf("%d listings, want one: after the start, none after the denied ones", n)
	}
	started := b.fake.Started()
	if len(started) != 1 {
		t.Fatalf("started %v, want one", started)
	}
	// The two denied tries were recorded as not started; the third holds the execution,
	// and the run's record finds it there.
	if ref, err := ledger.FindRef(t.Context(), ledger.New(b.led, nil), m.Identity.RunID, worker.RunEffect); err != nil || ref != started[0] {
		t.Fatalf("FindRef = %q, %v; want %s (recorded under %s)", ref, err, started[0], ledger.StartTry(worker.RunEffect, 3))
	}
	if e, err := b.led.GetEffect(t.Context(), &ledger.GetEffectParams{RunID: m.Identity.RunID, Name: ledger.StartTry(worker.RunEffect, 3)}); err != nil || e.Ref != started[0] {
		t.Fatalf("effect %s = %+v, %v; want the execution", ledger.StartTry(worker.RunEffect, 3), e, err)
	}
}

func TestPermissionDeniedFailsNamingThePermission(t *testing.T) {
	for _, kind := range []struct{ kind, resource, method, perm string }{
		{jobs.KindWorkflows, workflow, targetstest.WorkflowsCreate, "workflows.executions.create (roles/workflows.invoker)"},
		{jobs.KindCloudRun, runJob, targetstest.RunJobsRun, "run.jobs.runWithOverrides"},
		{jobs.KindCloudBuild, buildTrig, targetstest.BuildTriggerRun, "cloudbuild.builds.create"},
	} {
		t.Run(kind.kind, func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, "")
			b.fake.FailNext(kind.method, targetstest.Status(codes.PermissionDenied, "caller does not have permission"))
			m := newMessage(`{}`)
			b.verdict(process(b, b.worker(), m), worker.OutcomeFailed)
			e := b.run(m).LastError
			if !strings.Contains(e, kind.perm) || !strings.Contains(e, kind.resource) {
				t.Fatalf("last error %q does not name the permission %s on %s", e, kind.perm, kind.resource)
			}
		})
	}
}

func TestCloudRunJobGetsTheIdentityAsEnvironment(t *testing.T) {
	b := newBench(t, jobs.KindCloudRun, runJob, `, "container": "etl"`)
	m := newMessage(`{}`)
	ch := process(b, b.worker(), m)
	name := b.waitStarted(1)
	req := b.fake.Calls(targetstest.RunJobsRun)[0].Request.(*runpb.RunJobRequest)
	o := req.GetOverrides().GetContainerOverrides()
	if len(o) != 1 || o[0].GetName() != "etl" {
		t.Fatalf("container overrides %v, want one for container etl", o)
	}
	env := map[string]string{}
	for _, e := range o[0].GetEnv() {
		env[e.GetName()] = e.GetValue()
	}
	if env[targets.EnvIdempotencyKey] != ledger.EffectKey(m.Identity.RunID, worker.RunEffect) || env[targets.EnvRunID] != m.Identity.RunID ||
		env[targets.EnvJob] != "target" || env[targets.EnvAttempt] != "1" {
		t.Fatalf("environment overrides %v, want the run's identity", env)
	}
	if err := b.fake.Finish(name, targetstest.Failed); err != nil {
		t.Fatal(err)
	}
	b.verdict(ch, worker.OutcomeFailed)
	if e := b.run(m).LastError; !strings.Contains(e, "1 failed") {
		t.Fatalf("last error %q does not say the task failed", e)
	}
}

// An Internal answer may have started the execution: Cloud Run allows no look-up, so
// the next attempt reports it instead of starting another (at most once).
func TestCloudRunUncertainStartIsNotRepeated(t *testing.T) {
	b := newBench(t, jobs.KindCloudRun, runJob, "")
	w := b.worker()
	b.fake.FailNext(targetstest.RunJobsRun, targetstest.Status(codes.Internal, "backend error"))
	m := newMessage(`{}`)
	v := b.verdict(process(b, w, m), worker.OutcomeReleased)
	time.Sleep(time.Until(v.RetryAt))
	b.verdict(process(b, w, m), worker.OutcomeFailed)
	if n := len(b.fake.Calls(targetstest.RunJobsRun)); n != 1 {
		t.Fatalf("%d jobs.run calls, want 1: an uncertain start must not be repeated", n)
	}
	e := b.run(m).LastError
	if !strings.Contains(e, "at most once") || !strings.Contains(e, ledger.EffectKey(m.Identity.RunID, worker.RunEffect)) {
		t.Fatalf("last error %q does not report the uncertain start and the key to look for", e)
	}
}

// An answer that does not prove a refusal may come after the execution started: the
// next attempt lists the workflow's executions by label before it creates one, under
// the same effect.
func TestWorkflowsUncertainStartIsLookedUpFirst(t *testing.T) {
	for _, answer := range []error{
		targetstest.Status(codes.Unavailable, "connection reset"),
		targetstest.Status(codes.DeadlineExceeded, "deadline"),
		targetstest.Status(codes.Internal, "backend error"),
		targetstest.Status(codes.Unknown, "unknown"),
		targetstest.Status(codes.Aborted, "aborted"),
		// gRPC's libraries answer this for a response over the size limit, after the call.
		targetstest.Status(codes.ResourceExhausted, "grpc: received message larger than max"),
	} {
		t.Run(status.Code(answer).String(), func(t *testing.T) {
			b := newBench(t, jobs.KindWorkflows, workflow, `, "wait": false`)
			w := b.worker()
			b.fake.FailNext(targetstest.WorkflowsCreate, answer)
			m := newMessage(`{}`)
			v := b.verdictRetryingIn(process(b, w, m), backoff)
			if e := b.run(m).LastError; !strings.Contains(e, "it may have started") {
				t.Fatalf("last error %q does not say the start may have happened", e)
			}
			time.Sleep(time.Until(v.RetryAt))
			b.verdict(process(b, w, m), worker.OutcomeCompleted)
			calls := b.fake.Calls(targetstest.WorkflowsCreate, targetstest.WorkflowsList)
			// Every start is listed after (found nothing here); the next attempt looks up
			// first.
			want := []string{targetstest.WorkflowsCreate, targetstest.WorkflowsList, targetstest.WorkflowsList, targetstest.WorkflowsCreate, targetstest.WorkflowsList}
			if len(calls) != len(want) {
				t.Fatalf("calls %v, want create (%s), list; list, create, list", calls, status.Code(answer))
			}
			for i, c := range calls {
				if c.Method != want[i] {
					t.Fatalf("calls %v, want create (%s), list; list, create, list", calls, status.Code(answer))
				}
			}
			key := ledger.EffectKey(m.Identity.RunID, worker.RunEffect)
			if f := calls[2].Request.(*executionspb.ListExecutionsRequest).GetFilter(); f != fmt.Sprintf("labels.%s=%q", targets.LabelEffect, key[:63]) {
				t.Fatalf("list filter %q, want the effect key's label", f)
			}
			if l := calls[3].Request.(*executionspb.CreateExecutionRequest).GetExecution().GetLabels()[targets.LabelEffect]; l != key[:63] {
				t.Fatalf("second create labelled %q, want the same effect's key %q", l, key[:63])
			}
		})
	}
}

// The API started the execution and its answer was an error that may mean so: the
// listing after the start finds the execution (Workflows by label, Cloud Run by its
// environment override, Cloud Build by its substitution) and the run follows it; when
// that listing fails too, the next attempt's look-up finds it. Another run's execution
// is passed over either way.
func TestLostAnswerOnStartIsFoundNotRepeated(t *testing.T) {
	for _, kind := range apiKinds {
		for _, listing := range []string{"same-attempt", "next-attempt"} {
			t.Run(kind.kind+"/"+listing, func(t *testing.T) {
				b := newBench(t, kind.kind, kind.resource, `, "wait": true`)
				w := b.worker()
				other := newMessage(`{}`)
				ch := process(b, w, other)
				if err := b.fake.Finish(b.waitStarted(1), targetstest.Succeeded); err != nil {
					t.Fatal(err)
				}
				b.verdict(ch, worker.OutcomeCompleted)
				lists := len(b.fake.Calls(kind.list))

				b.fake.LoseNextAnswer(kind.start, targetstest.Status(codes.DeadlineExceeded, "timed out"))
				m := newMessage(`{}`)
				if listing == "next-attempt" {
					b.fake.FailNext(kind.list, targetstest.Status(codes.Unavailable, "try again"))
					v := b.verdict(process(b, w, m), worker.OutcomeReleased)
					time.Sleep(time.Until(v.RetryAt))
				}
				ch = process(b, w, m)
				name := b.waitStarted(2)
				time.Sleep(3 * testPoll)
				if err := b.fake.Finish(name, targetstest.Succeeded); err != nil {
					t.Fatal(err)
				}
				b.verdict(ch, worker.OutcomeCompleted)
				if s := b.fake.Started(); len(s) != 2 {
					t.Fatalf("started %v, want one execution per run", s)
				}
				if n := len(b.fake.Calls(kind.list)) - lists; n != 1 && listing == "same-attempt" || n != 2 && listing == "next-attempt" {
					t.Fatalf("%d listings, want one per attempt", n)
				}
				if got := b.ref(m); got != name {
					t.Fatalf("recorded %q, want the execution the lost answer started, %s", got, name)
				}
			})
		}
	}
}

func TestCloudBuildCompletesWhenStartedAndPassesSubstitutions(t *testing.T) {
	b := newBench(t, jobs.KindCloudBuild, buildTrig, `, "branch": "main"`)
	w := b.worker()
	m := newMessage(`{}`)
	b.verdict(process(b, w, m), worker.OutcomeCompleted) // wait defaults to false
	started := b.fake.Started()
	if len(started) != 1 || b.ref(m) != started[0] || !strings.HasPrefix(started[0], "projects/p/locations/global/builds/") {
		t.Fatalf("started %v, ref %q: want one build, recorded", started, b.ref(m))
	}
	req := b.fake.Calls(targetstest.BuildTriggerRun)[0].Request.(*cloudbuildpb.RunBuildTriggerRequest)
	s := req.GetSource().GetSubstitutions()
	if s[targets.SubstIdempotencyKey] != ledger.EffectKey(m.Identity.RunID, worker.RunEffect) || s[targets.SubstRunID] != m.Identity.RunID ||
		req.GetSource().GetBranchName() != "main" || req.GetTriggerId() != "release" || req.GetProjectId() != "p" {
		t.Fatalf("trigger run request %v, want the run's substitutions on branch main", req)
	}
	b.verdict(process(b, w, m), worker.OutcomeTerminal)
	if n := len(b.fake.Started()); n != 1 {
		t.Fatalf("%d builds after a duplicate delivery, want 1", n)
	}
}

func TestCloudBuildWaitFollowsTheBuild(t *testing.T) {
	b := newBench(t, jobs.KindCloudBuild, buildTrig, `, "wait": true`)
	m := newMessage(`{}`)
	ch := process(b, b.worker(), m)
	if err := b.fake.Finish(b.waitStarted(1), targetstest.Failed); err != nil {
		t.Fatal(err)
	}
	b.verdict(ch, worker.OutcomeFailed)
	if e := b.run(m).LastError; !strings.Contains(e, "FAILURE") {
		t.Fatalf("last error %q does not name the build's status", e)
	}
}

func TestPollErrorsArePolledThrough(t *testing.T) {
	b := newBench(t, jobs.KindWorkflows, workflow, "")
	b.fake.FailNext(targetstest.WorkflowsGet, targetstest.Status(codes.Unavailable, "blip"), targetstest.Status(codes.Unavailable, "blip"))
	m := newMessage(`{}`)
	ch := process(b, b.worker(), m)
	name := b.waitStarted(1)
	time.Sleep(5 * testPoll)
	if err := b.fake.Finish(name, targetstest.Succeeded); err != nil {
		t.Fatal(err)
	}
	b.verdict(ch, worker.OutcomeCompleted)
}

// apiKinds are the three kinds with their start, look-up and cancel methods on the fake.
var apiKinds = []struct{ kind, resource, start, list, cancel string }{
	{jobs.KindWorkflows, workflow, targetstest.WorkflowsCreate, targetstest.WorkflowsList, targetstest.WorkflowsCancel},
	{jobs.KindCloudRun, runJob, targetstest.RunJobsRun, targetstest.RunExecList, targetstest.RunExecCancel},
	{jobs.KindCloudBuild, buildTrig, targetstest.BuildTriggerRun, targetstest.BuildList, targetstest.BuildCancel},
}

// wantOneRecorded fails the test, saying why, unless exactly one execution was started
// and m's run recorded it.
func (b *bench) wantOneRecorded(m *queue.Message, why string) {
	b.t.Helper()
	started := b.fake.Started()
	if len(started) != 1 {
		b.t.Fatalf("started %v: %s", started, why)
	}
	if ref, err := ledger.FindRef(b.t.Context(), ledger.New(b.led, nil), m.Identity.RunID, worker.RunEffect); err != nil || ref != started[0] {
		b.t.Fatalf("recorded execution %q, %v; want the only one started, %s", ref, err, started[0])
	}
}

// drive delivers m to w until an attempt does not release the run (waiting out each
// retry delay), at most max times, and returns the last verdict.
func (b *bench) drive(w *worker.Worker, m *queue.Message, max int) worker.Verdict {
	b.t.Helper()
	var v worker.Verdict
	for range max {
		select {
		case v = <-process(b, w, m):
		case <-time.After(waitForAny):
			b.t.Fatalf("no verdict within %s; calls %v", waitForAny, b.fake.Calls())
		}
		if v.Outcome != worker.OutcomeReleased {
			return v
		}
		time.Sleep(time.Until(v.RetryAt))
	}
	return v
}

// A start whose answer is lost behind UNAVAILABLE may have been processed (gRPC's own
// status codes say so): it is not a refusal, and no attempt starts a second execution.
func TestLostAnswerBehindUnavailableStartsOnce(t *testing.T) {
	for _, kind := range apiKinds {
		t.Run(kind.kind, func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, `, "wait": false`)
			w := b.worker()
			b.fake.LoseNextAnswer(kind.start, targetstest.Status(codes.Unavailable, "connection reset"))
			m := newMessage(`{}`)
			if v := b.drive(w, m, 5); v.Outcome != worker.OutcomeCompleted {
				t.Fatalf("run ended %s (%s), want completed", v.Outcome, b.run(m).LastError)
			}
			b.wantOneRecorded(m, "a start answered UNAVAILABLE was taken for a refusal and started again")
		})
	}
}

// lookUpFailures are the answers of a failed look-up: a 429 on the read quota,
// UNAVAILABLE, PERMISSION_DENIED, NOT_FOUND.
var lookUpFailures = []struct {
	name string
	err  error
}{
	{"quota", targetstest.QuotaExceeded("workflowexecutions.googleapis.com", "read_requests")},
	{"unavailable", targetstest.Status(codes.Unavailable, "try again")},
	{"denied", targetstest.Status(codes.PermissionDenied, "caller does not have permission")},
	{"notfound", targetstest.Status(codes.NotFound, "not found")},
}

// retryRun is an operator's retry of a failed run, and its republished message.
func (b *bench) retryRun(m *queue.Message) {
	b.t.Helper()
	if _, err := b.led.Retry(b.t.Context(), &ledger.OperatorParams{RunID: m.Identity.RunID, Actor: "ops@example.com", Reason: "test"}); err != nil {
		b.t.Fatal(err)
	}
}

// A start whose outcome is unknown stays so while its look-ups fail: neither a later
// attempt nor an operator's retry of the failed run starts a second execution, and once
// a look-up works it finds the first.
func TestFailedLookUpNeverStartsAgain(t *testing.T) {
	for _, kind := range apiKinds {
		for _, fail := range lookUpFailures {
			t.Run(kind.kind+"/"+fail.name, func(t *testing.T) {
				// The timeout bounds the Cloud Build client's own retries of a list.
				b := newBench(t, kind.kind, kind.resource, `, "wait": false, "timeout": "300ms"`)
				w := b.worker()
				b.fake.LoseNextAnswer(kind.start, targetstest.Status(codes.Internal, "backend error"))
				b.fake.FailEvery(kind.list, fail.err)
				m := newMessage(`{}`)
				if v := b.drive(w, m, 8); v.Outcome != worker.OutcomeFailed {
					t.Fatalf("run ended %s while its look-ups failed, want failed; last error %s", v.Outcome, b.run(m).LastError)
				}
				if s := b.fake.Started(); len(s) != 1 {
					t.Fatalf("started %v while the look-ups failed, want only the first", s)
				}
				wantResolution(t, b.run(m), worker.RunEffect)

				b.fake.FailEvery(kind.list, nil)
				b.retryRun(m)
				if v := b.drive(w, m, 3); v.Outcome != worker.OutcomeCompleted {
					t.Fatalf("retried run ended %s, want completed; last error %s", v.Outcome, b.run(m).LastError)
				}
				b.wantOneRecorded(m, "the operator's retry started again")
			})
		}
	}
}

// wantResolution fails unless the failed run's error tells an operator both ways to
// resolve its uncertain start recorded under effect.
func wantResolution(t *testing.T, r *ledger.Run, effect string) {
	t.Helper()
	if r.Status != ledger.StatusFailed {
		t.Fatalf("run is %s, want failed", r.Status)
	}
	for _, cmd := range []string{
		fmt.Sprintf("runonce runs resolve %s --effect %s --done --ref EXECUTION", r.ID, effect),
		fmt.Sprintf("runonce runs resolve %s --effect %s --not-done", r.ID, effect),
	} {
		if !strings.Contains(r.LastError, cmd) {
			t.Fatalf("last error %q does not name %q", r.LastError, cmd)
		}
	}
}

// A look-up that fails is retried within the attempt, which then finds the execution.
func TestFailedLookUpIsRetriedWithinTheAttempt(t *testing.T) {
	for _, kind := range apiKinds {
		t.Run(kind.kind, func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, `, "wait": false`)
			w := b.worker()
			b.fake.LoseNextAnswer(kind.start, targetstest.Status(codes.Internal, "backend error"))
			b.fake.FailNext(kind.list, targetstest.Status(codes.Unavailable, "try again")) // the listing after the start
			m := newMessage(`{}`)
			v := b.verdict(process(b, w, m), worker.OutcomeReleased)
			time.Sleep(time.Until(v.RetryAt))
			b.fake.FailNext(kind.list, targetstest.QuotaExceeded("read", "read_requests"), targetstest.Status(codes.Unavailable, "try again"))
			b.verdict(process(b, w, m), worker.OutcomeCompleted)
			if n := len(b.fake.Calls(kind.list)); n != 4 {
				t.Fatalf("%d listings, want 4: one after the start, then 3 in the look-up (two failed, then found)", n)
			}
			started := b.fake.Started()
			if r := b.run(m); r.Attempt != 2 || len(started) != 1 || b.ref(m) != started[0] {
				t.Fatalf("run completed at attempt %d with %q, started %v; want attempt 2 following the only execution", r.Attempt, b.ref(m), started)
			}
		})
	}
}

// A start whose outcome stays unknown fails the run, saying what to look for and how an
// operator resolves it: where the API cannot prove there is no execution (Cloud Run,
// Cloud Build), at once; where look-ups keep failing, once MaxUncertain has passed. The
// effect named is the one left uncertain (run/2 after a quota denial).
func TestUncertainStartFailsNamingTheResolution(t *testing.T) {
	quota := targetstest.QuotaExceeded("svc", "requests")
	for _, c := range []struct {
		kind, resource, start, list string
		look                        func(m *queue.Message) string
	}{
		{jobs.KindCloudRun, runJob, targetstest.RunJobsRun, "", func(m *queue.Message) string {
			return targets.EnvIdempotencyKey + "=" + ledger.EffectKey(m.Identity.RunID, worker.RunEffect)
		}},
		{jobs.KindCloudBuild, buildTrig, targetstest.BuildTriggerRun, "", func(m *queue.Message) string {
			return targets.SubstIdempotencyKey + "=" + ledger.EffectKey(m.Identity.RunID, worker.RunEffect)
		}},
		{jobs.KindWorkflows, workflow, targetstest.WorkflowsCreate, targetstest.WorkflowsList, func(m *queue.Message) string {
			return targets.LabelEffect + "=" + ledger.EffectKey(m.Identity.RunID, ledger.StartTry(worker.RunEffect, 2))[:63]
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			b := newBench(t, c.kind, c.resource, `, "wait": false`)
			b.opts.MaxUncertain = time.Nanosecond
			w := b.worker()
			b.fake.FailNext(c.start, quota, targetstest.Status(codes.Unavailable, "connection reset"))
			if c.list != "" {
				b.fake.FailEvery(c.list, targetstest.Status(codes.Unavailable, "try again"))
			}
			m := newMessage(`{}`)
			if v := b.drive(w, m, 5); v.Outcome != worker.OutcomeFailed {
				t.Fatalf("run ended %s, want failed", v.Outcome)
			}
			r := b.run(m)
			if r.Attempt != 3 {
				t.Fatalf("run failed at attempt %d, want 3 (denied, uncertain, looked up)", r.Attempt)
			}
			wantResolution(t, r, ledger.StartTry(worker.RunEffect, 2))
			if look := c.look(m); !strings.Contains(r.LastError, look) {
				t.Fatalf("last error %q does not say to look for %s", r.LastError, look)
			}
			if s := b.fake.Started(); len(s) != 0 {
				t.Fatalf("started %v", s)
			}
		})
	}
}

// A worker shut down while its start is in flight waits for the answer and records the
// execution, instead of leaving the start uncertain: without wait the run completes; with
// wait it is released, and the next attempt follows the execution without a look-up.
func TestStartInFlightAtShutdownIsRecorded(t *testing.T) {
	for _, kind := range apiKinds {
		for _, wait := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wait=%t", kind.kind, wait), func(t *testing.T) {
				b := newBench(t, kind.kind, kind.resource, fmt.Sprintf(`, "wait": %t`, wait))
				first := b.worker()
				h := b.fake.HoldNextAnswer(kind.start)
				m := newMessage(`{}`)
				ch := process(b, first, m)
				<-h.Arrived()
				first.CancelJobs() // the shutdown grace is over
				time.Sleep(20 * time.Millisecond)
				h.Release()
				if wait {
					b.verdict(ch, worker.OutcomeReleased)
				} else {
					b.verdict(ch, worker.OutcomeCompleted)
				}
				started := b.fake.Started()
				if len(started) != 1 || b.ref(m) != started[0] {
					t.Fatalf("recorded %q with %v started: the answer of a start in flight at shutdown was not recorded", b.ref(m), started)
				}
				if wait {
					ch = process(b, b.worker(), m)
					time.Sleep(3 * testPoll)
					if err := b.fake.Finish(started[0], targetstest.Succeeded); err != nil {
						t.Fatal(err)
					}
					b.verdict(ch, worker.OutcomeCompleted)
				}
				// One listing, after the start; none by the next attempt.
				if n := len(b.fake.Calls(kind.list)); n != 1 || len(b.fake.Started()) != 1 {
					t.Fatalf("%d listings and %v started, want one and the one", n, b.fake.Started())
				}
			})
		}
	}
}

// operatorRelease is an operator's release of the run's attempt (its holder looks gone).
func (b *bench) operatorRelease(m *queue.Message) {
	b.t.Helper()
	if _, err := b.led.OperatorRelease(b.t.Context(), &ledger.OperatorParams{RunID: m.Identity.RunID, Actor: "ops@example.com", Reason: "holder looks stuck"}); err != nil {
		b.t.Fatal(err)
	}
}

// pausedLease is the lease of a worker standing for a paused holder: it renews too
// rarely to learn of an operator's release during the test, as a paused process would.
const pausedLease = time.Minute

// The fencing window, a start on the wire: attempt 1's call is held mid-flight and an
// operator releases the run. On Workflows, attempt 2 looks up (nothing), starts and
// records its own; then attempt 1's call lands, attempt 1 learns the fence no longer
// holds, lists the executions carrying the key and cancels its own, the newer: one
// execution runs, the one the run recorded. On Cloud Run and Cloud Build a look-up that
// finds nothing proves nothing, so attempt 2 fails the run for an operator instead of
// starting; attempt 1's late start is then the only execution, and is kept.
func TestFencedStartLandingLateIsCancelled(t *testing.T) {
	for _, kind := range apiKinds {
		t.Run(kind.kind, func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, `, "wait": false`)
			paused, other := b.workerWithLease(pausedLease), b.worker()
			h := b.fake.HoldNext(kind.start)
			m := newMessage(`{}`)
			first := process(b, paused, m)
			<-h.Arrived()
			b.operatorRelease(m)
			if kind.kind != jobs.KindWorkflows {
				b.verdict(process(b, other, m), worker.OutcomeFailed)
				wantResolution(t, b.run(m), worker.RunEffect)
				h.Release()
				b.verdict(first, worker.OutcomeLeaseLost)
				if started, running := b.fake.Started(), b.fake.Running(); len(started) != 1 || len(running) != 1 || len(b.fake.Calls(kind.cancel)) != 0 {
					t.Fatalf("started %v, running %v, cancels %v: want attempt 1's late start, kept", started, running, b.fake.Calls(kind.cancel))
				}
				return
			}
			b.verdict(process(b, other, m), worker.OutcomeCompleted)
			recorded := b.ref(m)
			h.Release()
			b.verdict(first, worker.OutcomeLeaseLost)

			started := b.fake.Started()
			if len(started) != 2 || recorded != started[0] {
				t.Fatalf("started %v, recorded %q: want attempt 2's start recorded, then attempt 1's", started, recorded)
			}
			if running := b.fake.Running(); len(running) != 1 || running[0] != recorded {
				t.Fatalf("running %v, want only the recorded execution %s", running, recorded)
			}
			if c := b.fake.Calls(kind.cancel); len(c) != 1 || c[0].Name != started[1] {
				t.Fatalf("cancels %v, want one, of the late start %s", c, started[1])
			}
		})
	}
}

// The fencing window on Workflows, the other way round: attempt 2 looked up (nothing)
// before attempt 1's held call landed, and starts after it. Attempt 2's start is
// contested (attempt 1 began it), so it lists again, keeps the older execution, records
// it and cancels its own.
func TestWorkflowsStartRacingAnOlderOneFollowsTheOlder(t *testing.T) {
	b := newBench(t, jobs.KindWorkflows, workflow, `, "wait": false`)
	paused, other := b.workerWithLease(pausedLease), b.workerWithLease(pausedLease)
	start := b.fake.HoldNext(targetstest.WorkflowsCreate)
	m := newMessage(`{}`)
	first := process(b, paused, m)
	<-start.Arrived()
	b.operatorRelease(m)
	// Attempt 2's look-up reads "nothing"; its answer waits until attempt 1's start has
	// landed.
	look := b.fake.HoldNextAnswer(targetstest.WorkflowsList)
	second := process(b, other, m)
	<-look.Arrived()
	start.Release()
	b.verdict(first, worker.OutcomeLeaseLost)
	look.Release()
	b.verdict(second, worker.OutcomeCompleted)

	started := b.fake.Started()
	if len(started) != 2 || b.ref(m) != started[0] {
		t.Fatalf("started %v, recorded %q: want attempt 1's late start (the older) recorded", started, b.ref(m))
	}
	if running := b.fake.Running(); len(running) != 1 || running[0] != started[0] {
		t.Fatalf("running %v, want only the older execution %s", running, started[0])
	}
	if c := b.fake.Calls(targetstest.WorkflowsCancel); len(c) != 1 || c[0].Name != started[1] {
		t.Fatalf("cancels %v, want one, of the newer start %s", c, started[1])
	}
}

// The fencing window before the call: attempt 1 recorded the start and was paused
// before making it; meanwhile an operator released the run and attempt 2 took the start
// over (Workflows: looked up, started and recorded it; Cloud Run and Cloud Build: failed
// the run for an operator). Attempt 1 confirms its fence with the ledger immediately
// before the call, finds it lost and starts nothing.
func TestFenceIsConfirmedImmediatelyBeforeTheStart(t *testing.T) {
	for _, kind := range apiKinds {
		t.Run(kind.kind, func(t *testing.T) {
			b := newBench(t, kind.kind, kind.resource, `, "wait": false`)
			arrived, resume := b.led.pauseNextBeginEffect()
			m := newMessage(`{}`)
			paused := process(b, b.workerWithLease(pausedLease), m)
			<-arrived
			b.operatorRelease(m)
			want := worker.OutcomeCompleted
			if kind.kind != jobs.KindWorkflows {
				want = worker.OutcomeFailed
			}
			b.verdict(process(b, b.worker(), m), want)
			resume()
			b.verdict(paused, worker.OutcomeLeaseLost)

			if started := b.fake.Started(); len(started) > 1 || len(started) == 1 && b.ref(m) != started[0] {
				t.Fatalf("started %v, recorded %q: the fenced attempt started after it resumed", started, b.ref(m))
			}
		})
	}
}

// The fencing window on Workflows between a look-up and the start: attempt 2 looked up
// (nothing) and was paused; meanwhile an operator released the run and attempt 3
// started and recorded the execution. Attempt 2 confirms its fence before the call and
// starts nothing.
func TestWorkflowsFenceIsConfirmedAfterTheLookUp(t *testing.T) {
	b := newBench(t, jobs.KindWorkflows, workflow, `, "wait": false`)
	w := b.worker()
	b.fake.FailNext(targetstest.WorkflowsCreate, targetstest.Status(codes.Unavailable, "connection reset"))
	m := newMessage(`{}`)
	v := b.verdict(process(b, w, m), worker.OutcomeReleased)
	time.Sleep(time.Until(v.RetryAt))

	look := b.fake.HoldNextAnswer(targetstest.WorkflowsList)
	paused := process(b, b.workerWithLease(pausedLease), m)
	<-look.Arrived()
	b.operatorRelease(m)
	b.verdict(process(b, w, m), worker.OutcomeCompleted)
	look.Release()
	b.verdict(paused, worker.OutcomeLeaseLost)

	if started := b.fake.Started(); len(started) != 1 || b.ref(m) != started[0] {
		t.Fatalf("started %v, recorded %q: a fenced attempt started after its look-up", started, b.ref(m))
	}
}

// pausingLedger is a real ledger whose next BeginEffect, once armed, is written and then
// answered only when resumed: its attempt is paused between recording a start and
// making it.
type pausingLedger struct {
	ledger.Driver
	mu     sync.Mutex
	armed  bool
	pause  chan struct{}
	resume chan struct{}
}

// pauseNextBeginEffect arms the pause: arrived is closed when the next BeginEffect was
// written, and resume lets it answer.
func (l *pausingLedger) pauseNextBeginEffect() (arrived <-chan struct{}, resume func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.pause, l.resume = true, make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := l.resume
	return l.pause, func() { once.Do(func() { close(r) }) }
}

func (l *pausingLedger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	res, err := l.Driver.BeginEffect(ctx, p)
	l.mu.Lock()
	armed, pause, resume := l.armed, l.pause, l.resume
	l.armed = false
	l.mu.Unlock()
	if armed {
		close(pause)
		<-resume
	}
	return res, err
}
