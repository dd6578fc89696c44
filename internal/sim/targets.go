package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/run/apiv2/runpb"
	"cloud.google.com/go/workflows/executions/apiv1/executionspb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/targets"
	"github.com/runonce/runonce/pkg/targets/targetstest"
	"github.com/runonce/runonce/pkg/worker"
)

// LostAnswerRefused names the mutant whose lost start answers read as refusals, as the
// targets' old mapping (ResourceExhausted, Unavailable → NotStarted) took an UNAVAILABLE
// for one (issue 40): the try is recorded as not started, and the next attempt starts
// afresh, without a look-up. It is a switch of the fake's faults (a start that applied
// answers a quota denial, which the targets rightly read as a refusal), not a ledger.
const LostAnswerRefused = "lost-answer-refused"

// simTargets is the Google Cloud API target (targets.Target, through its official
// client) the jobs of some schedules start an execution through (worker.StartEffect),
// served by the fake (targetstest.Fake). Every API call is a scheduling point of the
// calling actor (a client interceptor), and the schedule's faults act through the fake:
// a call fails before it takes effect (a refused start, a failed look-up: FailNext), a
// start applies and its answer is lost (LoseNextAnswer), a call's answer is held
// (HoldNextAnswer), or the call itself is held before it takes effect (HoldNext). A
// held call's actor parks; the call goes on when the schedule lets the actor go on. An
// actor that crashes with a call held leaves the call on the wire: the schedule may
// land it later, as a request a dead process sent.
type simTargets struct {
	kind   string
	fake   *targetstest.Fake
	conn   *grpc.ClientConn
	target *targets.Target
	s      *sched
	f      *faults
	log    func(format string, args ...any)
	// refuseLost is the mutant lost-answer-refused.
	refuseLost bool
	// rate is the chance of each fault per API call (its own: the look-ups and starts
	// are few), and quiet reports the quiet phase, which has none.
	rate  float64
	quiet func() bool

	mu sync.Mutex
	// held: the call each parked actor has held at the fake.
	held map[*actor]*heldCall
	// orphans: held calls of crashed actors, which the schedule may land.
	orphans []*heldCall
	// unsettled: the run of each actor that sent a start and has not listed the
	// executions since (its settle); excused: by run, the starts whose actor crashed so.
	unsettled map[*actor]string
	excused   map[string]int
}

// heldCall is a call held at the fake, whose answer done delivers once released.
type heldCall struct {
	what string
	h    *targetstest.Hold
	done chan error
}

// targetKinds are the kinds a schedule's target is drawn from: Workflows, whose look-up
// proves there is no execution, and Cloud Run, whose look-up cannot (Cloud Build's
// guarantee is Cloud Run's, and its client retries on its own clock).
var targetKinds = []string{jobs.KindWorkflows, jobs.KindCloudRun}

// The fake's methods, by the gRPC method the client calls, and whether each starts.
var targetMethods = map[string]struct {
	name  string
	start bool
}{
	executionspb.Executions_CreateExecution_FullMethodName: {targetstest.WorkflowsCreate, true},
	executionspb.Executions_ListExecutions_FullMethodName:  {targetstest.WorkflowsList, false},
	executionspb.Executions_CancelExecution_FullMethodName: {targetstest.WorkflowsCancel, false},
	executionspb.Executions_GetExecution_FullMethodName:    {targetstest.WorkflowsGet, false},
	runpb.Jobs_RunJob_FullMethodName:                       {targetstest.RunJobsRun, true},
	runpb.Executions_ListExecutions_FullMethodName:         {targetstest.RunExecList, false},
	runpb.Executions_CancelExecution_FullMethodName:        {targetstest.RunExecCancel, false},
	runpb.Executions_GetExecution_FullMethodName:           {targetstest.RunExecGet, false},
}

type runKey struct{}

// newTargets starts the fake and a target of kind on it.
func newTargets(ctx context.Context, kind string, rate float64, s *sched, f *faults, quiet func() bool, log func(string, ...any), refuseLost bool) (*simTargets, error) {
	fake, err := targetstest.New()
	if err != nil {
		return nil, err
	}
	st := &simTargets{kind: kind, fake: fake, s: s, f: f, log: log, refuseLost: refuseLost, rate: rate, quiet: quiet,
		held: map[*actor]*heldCall{}, unsettled: map[*actor]string{}, excused: map[string]int{}}
	hostport, _ := strings.CutPrefix(fake.Endpoint(), "http://")
	st.conn, err = grpc.NewClient(hostport, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(st.intercept))
	if err != nil {
		fake.Close()
		return nil, err
	}
	resource := map[string]string{
		jobs.KindWorkflows: "projects/p/locations/l/workflows/sim",
		jobs.KindCloudRun:  "projects/p/locations/l/jobs/sim",
	}[kind]
	st.target, err = targets.New(ctx, &jobs.Job{Name: jobName, Kind: kind, Target: &jobs.Target{Resource: resource}}, &targets.Options{
		ClientOptions: []option.ClientOption{option.WithGRPCConn(st.conn), option.WithoutAuthentication()},
		// Backoff is a Retry-After on the simulation's clock, and the look-ups' retries
		// sleep a tenth of it, in real time: short. No call times out in real time.
		Backoff: 10 * time.Millisecond, CallTimeout: time.Hour,
	})
	if err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}

// close releases every held call and stops the fake.
func (st *simTargets) close() {
	if st.target != nil {
		st.target.Close()
	}
	st.fake.Close()
	st.conn.Close()
}

// start runs the target's handler for the job's run: its start, as worker.StartEffect
// records it (no wait: the run does not follow the execution).
func (st *simTargets) start(ctx context.Context, a *actor, j *worker.Job) error {
	defer func() {
		st.mu.Lock()
		if !a.crashed { // it ended: a start it did not list since is no crash's
			delete(st.unsettled, a)
		}
		st.mu.Unlock()
	}()
	err := st.target.HandleJob(context.WithValue(ctx, runKey{}, j.RunID), j)
	if !a.crashed { // what happened, not the error's text: it names attempt IDs, which are not the seed's
		st.log("target: attempt %d of run %s: start recorded %v, permanent failure %v, uncertain %v, lease lost %v", j.Attempt, short(j.RunID),
			err == nil, errors.Is(err, worker.ErrPermanent), errors.Is(err, worker.ErrEffectUncertain), errors.Is(err, ledger.ErrLeaseLost))
	}
	return err
}

// intercept makes each API call a scheduling point and applies the fault the schedule
// draws for it through the fake.
func (st *simTargets) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	m, ok := targetMethods[method]
	if !ok {
		return fmt.Errorf("sim: the target called %s, which the simulation does not drive", method)
	}
	if err := st.s.point(ctx); err != nil {
		return err
	}
	a := actorFrom(ctx)
	call := func() error { return invoker(ctx, method, req, reply, cc, opts...) }
	if m.start && a != nil {
		st.mu.Lock()
		st.unsettled[a], _ = ctx.Value(runKey{}).(string)
		st.mu.Unlock()
	}
	what := "target " + m.name
	var err error
	rate := st.rate
	if st.quiet() {
		rate = 0
	}
	switch st.f.drawAt(ctx, what, rate) {
	case faultBefore:
		st.fake.FailNext(m.name, st.refusal(m.start))
		err = call()
	case faultAfter:
		if !m.start { // a look-up or a cancel: its answer is lost before it takes effect
			st.fake.FailNext(m.name, status.Error(codes.Unavailable, "sim: the connection broke"))
			err = call()
			break
		}
		lost := status.Error(codes.Unavailable, "sim: the start applied, then the connection broke")
		if st.f.rng.IntN(2) == 0 {
			lost = status.Error(codes.DeadlineExceeded, "sim: the start applied, then the call timed out")
		}
		if st.refuseLost {
			lost = targetstest.QuotaExceeded("sim.googleapis.com", "starts")
		}
		st.fake.LoseNextAnswer(m.name, lost)
		err = call()
	case faultSlow, faultHang:
		if m.name == targetstest.WorkflowsCancel || m.name == targetstest.RunExecCancel {
			err = call() // a cancel is not held: released after its caller gave up, it would race the schedule
			break
		}
		var h *targetstest.Hold
		if st.f.rng.IntN(2) == 0 {
			h = st.fake.HoldNextAnswer(m.name) // it takes effect; its answer waits
		} else {
			h = st.fake.HoldNext(m.name) // it waits before it takes effect: it lands late
		}
		err = st.hold(ctx, a, what, h, call)
	default:
		err = call()
	}
	if err == nil && !m.start && a != nil && (m.name == targetstest.WorkflowsList || m.name == targetstest.RunExecList) {
		st.mu.Lock()
		delete(st.unsettled, a) // it listed the executions since its start
		st.mu.Unlock()
	}
	return err
}

// refusal is the error of a call that fails before it takes effect: for a start, an
// ambiguous answer (which the targets look up), a quota denial or a denied permission
// (refusals); for a look-up, the answers a failed look-up gives.
func (st *simTargets) refusal(start bool) error {
	if start {
		switch st.f.rng.IntN(4) {
		case 0:
			return targetstest.QuotaExceeded("sim.googleapis.com", "starts")
		case 1:
			return status.Error(codes.PermissionDenied, "sim: permission denied")
		}
		return status.Error(codes.Unavailable, "sim: unavailable")
	}
	return []error{
		status.Error(codes.Unavailable, "sim: unavailable"),
		status.Error(codes.ResourceExhausted, "sim: read quota exceeded"),
		status.Error(codes.PermissionDenied, "sim: permission denied"),
		status.Error(codes.NotFound, "sim: not found"),
	}[st.f.rng.IntN(4)]
}

// hold sends a call the fake holds and parks the actor: the call goes on when the
// schedule lets the actor go on. A crashed actor's call stays held, an orphan the
// schedule may land (land).
func (st *simTargets) hold(ctx context.Context, a *actor, what string, h *targetstest.Hold, call func() error) error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case <-h.Arrived():
	case err := <-done: // it never reached the hold
		h.Release()
		return err
	}
	if a == nil {
		h.Release()
		return <-done
	}
	hc := &heldCall{what: what, h: h, done: done}
	st.mu.Lock()
	st.held[a] = hc
	st.mu.Unlock()
	st.log("target: actor %d: %s held at the fake", a.id, what)
	perr := st.s.point(ctx)
	st.mu.Lock()
	delete(st.held, a)
	st.mu.Unlock()
	if perr != nil {
		return perr // the schedule is over; the fake's Close releases the call
	}
	h.Release()
	err := <-done
	if ctx.Err() != nil { // the caller gave up meanwhile, whatever came first on the wire
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

// crashed takes note that actor a crashed: a call it had held is left on the wire, and
// a start it sent and did not list since is a crash's (excused on Workflows).
func (st *simTargets) crashed(a *actor) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if hc, ok := st.held[a]; ok {
		delete(st.held, a)
		st.orphans = append(st.orphans, hc)
	}
	if run, ok := st.unsettled[a]; ok {
		delete(st.unsettled, a)
		st.excused[run]++
	}
}

// norphans counts the held calls of crashed actors.
func (st *simTargets) norphans() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.orphans)
}

// land lets the i-th orphaned call go on, and waits for it to be answered (to nobody).
func (st *simTargets) land(i int) {
	st.mu.Lock()
	hc := st.orphans[i]
	st.orphans = slices.Delete(st.orphans, i, i+1)
	st.mu.Unlock()
	hc.h.Release()
	err := <-hc.done
	st.log("target: %s a crashed actor sent lands: %v", hc.what, err)
}

// executions returns, by run, the executions started and not cancelled, named by the
// run ID their start carried.
func (st *simTargets) executions() map[string][]string {
	running := st.fake.Running()
	out := map[string][]string{}
	for _, c := range st.fake.Calls(targetstest.WorkflowsCreate, targetstest.RunJobsRun) {
		if !slices.Contains(running, c.Name) {
			continue
		}
		run := "?"
		switch r := c.Request.(type) {
		case *executionspb.CreateExecutionRequest:
			var arg struct {
				ID targets.Identity `json:"runonce"`
			}
			if json.Unmarshal([]byte(r.GetExecution().GetArgument()), &arg) == nil {
				run = arg.ID.RunID
			}
		case *runpb.RunJobRequest:
			for _, o := range r.GetOverrides().GetContainerOverrides() {
				for _, e := range o.GetEnv() {
					if e.GetName() == targets.EnvRunID {
						run = e.GetValue()
					}
				}
			}
		}
		out[run] = append(out[run], c.Name)
	}
	return out
}

// check: a run's start leaves at most one execution running (settle cancels the newer
// ones), and one more per operator's resolution of its start as not done; on Workflows,
// one more per start whose actor crashed before it listed the executions (docs/targets.md:
// its call may land after the other attempt's listing).
func (st *simTargets) check(notDone func(runID string) int) []string {
	var out []string
	byRun := st.executions()
	runs := slices.Sorted(func(yield func(string) bool) {
		for r := range byRun {
			if !yield(r) {
				return
			}
		}
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, run := range runs {
		execs := byRun[run]
		allowed, excused := 1+notDone(run), 0
		if st.kind == jobs.KindWorkflows {
			excused = st.excused[run]
			for a, r := range st.unsettled { // let go as crashed at the schedule's end
				if r == run && a.crashed {
					excused++
				}
			}
		}
		if len(execs) > allowed+excused {
			out = append(out, fmt.Sprintf("invariant 7: run %s's start left %d %s executions running (%s); an operator resolved it as not done %d times, and %d of its starts' actors crashed before they listed",
				short(run), len(execs), st.kind, strings.Join(execs, ", "), allowed-1, excused))
		}
	}
	return out
}

// startNames are the effect names a run's start may take (worker.StartEffect: one more
// per refused start), as an operator's run page lists them.
var startNames = []string{worker.RunEffect, ledger.StartTry(worker.RunEffect, 2), ledger.StartTry(worker.RunEffect, 3)}

// isStart reports whether effect name is a start's.
func isStart(name string) bool {
	return name == worker.RunEffect || strings.HasPrefix(name, worker.RunEffect+"/")
}

// drawTargets decides from the seed whether a schedule's jobs start an execution
// through a target, of which kind, and the chance of each fault per API call, from a
// source of its own: the other schedules draw as before.
func drawTargets(seed uint64) (kind string, rate float64, ok bool) {
	r := rand.New(rand.NewPCG(seed, 0x74617267))
	if r.IntN(4) != 0 {
		return "", 0, false
	}
	return targetKinds[r.IntN(len(targetKinds))], []float64{0.05, 0.1, 0.2, 0.3}[r.IntN(4)], true
}
