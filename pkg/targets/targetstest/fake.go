// Package targetstest is a local fake of the gRPC surfaces of the Google Cloud APIs the
// targets call — Workflows executions (create, list with a label filter, get, cancel),
// Cloud Run v2 jobs.run and executions get, list and cancel, and Cloud Build
// triggers.run and builds get, list (by trigger) and cancel — served in-process on a
// loopback port. The official clients reach it through a target's plaintext endpoint
// ("http://127.0.0.1:PORT": option.WithGRPCConn over an insecure connection,
// option.WithoutAuthentication). It records every call and starts every execution in a
// running state until Finish or a cancel ends it.
//
// Faults, per method:
//   - FailNext answers the next calls with errors before they take effect (a refused
//     call, or a look-up that fails); FailEvery answers every call so until cleared.
//   - LoseNextAnswer lets the next starts take effect and then answers an error: the API
//     accepted the call, and the caller cannot tell.
//   - HoldNext holds the next call before it takes effect until the test releases it, as
//     a call already sent by a paused or fenced caller lands late; HoldNextAnswer lets it
//     take effect (a list reads its answer) and holds the answer. A held call takes
//     effect when released even if its caller gave up meanwhile: a request already sent
//     may.
package targetstest

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"

	"cloud.google.com/go/cloudbuild/apiv1/v2/cloudbuildpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"cloud.google.com/go/run/apiv2/runpb"
	"cloud.google.com/go/workflows/executions/apiv1/executionspb"
	"google.golang.org/genproto/googleapis/api/error_reason"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The methods a Call names.
const (
	WorkflowsCreate = "workflows.create"
	WorkflowsList   = "workflows.list"
	WorkflowsGet    = "workflows.get"
	WorkflowsCancel = "workflows.cancel"
	RunJobsRun      = "run.jobs.run"
	RunExecGet      = "run.executions.get"
	RunExecList     = "run.executions.list"
	RunExecCancel   = "run.executions.cancel"
	BuildTriggerRun = "cloudbuild.triggers.run"
	BuildGet        = "cloudbuild.builds.get"
	BuildList       = "cloudbuild.builds.list"
	BuildCancel     = "cloudbuild.builds.cancel"
)

// Call is one recorded call.
type Call struct {
	Method string
	// Name is the resource the call named (the parent for creates and lists).
	Name string
	// Request is the request as received.
	Request proto.Message
	// Err is the error answered, nil for success.
	Err error
}

// Outcome is how Finish ends an execution.
type Outcome int

// Outcomes.
const (
	Succeeded Outcome = iota + 1
	Failed
	Cancelled
)

// Fake is the fake server. Its methods are safe for concurrent use.
type Fake struct {
	srv  *grpc.Server
	lis  net.Listener
	mu   sync.Mutex
	seq  int
	errs map[string][]error
	// every are errors answered to every call of a method (FailEvery).
	every map[string]error
	// holds and answerHolds are the calls to hold before they take effect and before
	// they are answered, per method, in order.
	holds, answerHolds map[string][]*Hold
	// held are every hold handed out, released by Close.
	held []*Hold
	// lost are errors answered after the start was made: the API accepted the call and
	// its answer did not say so.
	lost map[string][]error
	// OnStart, when set, is called after an execution is created and before the start
	// is answered (a crash test kills the worker there).
	onStart func(method, name string)
	calls   []Call
	// startedNames are the executions created, in order.
	startedNames []string
	wf           map[string]*executionspb.Execution
	runs         map[string]*runpb.Execution
	builds       map[string]*cloudbuildpb.Build
}

// New starts a fake on a free loopback port; Close stops it.
func New() (*Fake, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Fake{srv: grpc.NewServer(), lis: lis, errs: map[string][]error{}, lost: map[string][]error{},
		every: map[string]error{}, holds: map[string][]*Hold{}, answerHolds: map[string][]*Hold{},
		wf: map[string]*executionspb.Execution{}, runs: map[string]*runpb.Execution{}, builds: map[string]*cloudbuildpb.Build{}}
	executionspb.RegisterExecutionsServer(f.srv, &wfServer{f: f})
	runpb.RegisterJobsServer(f.srv, &runJobs{f: f})
	runpb.RegisterExecutionsServer(f.srv, &runExecs{f: f})
	cloudbuildpb.RegisterCloudBuildServer(f.srv, &builds{f: f})
	go f.srv.Serve(lis)
	return f, nil
}

// Endpoint is the target endpoint that reaches the fake: "http://127.0.0.1:PORT".
func (f *Fake) Endpoint() string { return "http://" + f.lis.Addr().String() }

// Close releases every held call and stops the fake.
func (f *Fake) Close() {
	f.mu.Lock()
	held := slices.Clone(f.held)
	f.mu.Unlock()
	for _, h := range held {
		h.Release()
	}
	f.srv.Stop()
}

// FailNext makes the next calls of method answer errs, one each, in order, before they
// take effect.
func (f *Fake) FailNext(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = append(f.errs[method], errs...)
}

// FailEvery makes every call of method answer err before it takes effect (after the
// errors FailNext queued), until FailEvery(method, nil).
func (f *Fake) FailEvery(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.every, method)
		return
	}
	f.every[method] = err
}

// Hold is a call the fake holds until Release.
type Hold struct {
	arrived, released chan struct{}
	arrive, release   sync.Once
}

func newHold() *Hold { return &Hold{arrived: make(chan struct{}), released: make(chan struct{})} }

// Arrived is closed once the held call reached the hold.
func (h *Hold) Arrived() <-chan struct{} { return h.arrived }

// Release lets the held call go on; releasing twice is harmless.
func (h *Hold) Release() { h.release.Do(func() { close(h.released) }) }

// wait marks the call arrived and blocks until it is released, whether or not its
// caller still waits for the answer.
func (h *Hold) wait() {
	h.arrive.Do(func() { close(h.arrived) })
	<-h.released
}

// HoldNext holds the next call of method before it takes effect, until the returned
// Hold is released: a start then creates its execution only once released.
func (f *Fake) HoldNext(method string) *Hold {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := newHold()
	f.holds[method] = append(f.holds[method], h)
	f.held = append(f.held, h)
	return h
}

// HoldNextAnswer lets the next call of method take effect (a start creates its
// execution, a list reads the executions there are) and holds its answer until the
// returned Hold is released.
func (f *Fake) HoldNextAnswer(method string) *Hold {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := newHold()
	f.answerHolds[method] = append(f.answerHolds[method], h)
	f.held = append(f.held, h)
	return h
}

// holdAnswer blocks until the answer of a call of method may go, when one is held.
func (f *Fake) holdAnswer(method string) {
	f.mu.Lock()
	var h *Hold
	if q := f.answerHolds[method]; len(q) > 0 {
		h, f.answerHolds[method] = q[0], q[1:]
	}
	f.mu.Unlock()
	if h != nil {
		h.wait()
	}
}

// LoseNextAnswer makes the next starts of method (WorkflowsCreate, RunJobsRun,
// BuildTriggerRun) start their execution and then answer errs, one each: the API
// accepted the call, and the caller cannot tell.
func (f *Fake) LoseNextAnswer(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost[method] = append(f.lost[method], errs...)
}

// Status is a gRPC status error, for FailNext.
func Status(c codes.Code, msg string) error { return status.Error(c, msg) }

// QuotaExceeded is the RESOURCE_EXHAUSTED (429) a Google API answers a call its front end
// denied on a rate quota of service's metric: it carries a google.rpc.ErrorInfo of the
// googleapis.com domain (Service Infrastructure's) with reason RATE_LIMIT_EXCEEDED. For
// FailNext.
func QuotaExceeded(service, metric string) error {
	st, err := status.New(codes.ResourceExhausted, fmt.Sprintf("Quota exceeded for quota metric '%s' of service '%s'", metric, service)).
		WithDetails(&errdetails.ErrorInfo{
			Reason: error_reason.ErrorReason_RATE_LIMIT_EXCEEDED.String(), Domain: "googleapis.com",
			Metadata: map[string]string{"service": service, "quota_metric": metric, "consumer": "projects/p"},
		})
	if err != nil {
		panic(err) // an ErrorInfo always marshals
	}
	return st.Err()
}

// OnStart sets a hook called after an execution is created and before the start is
// answered.
func (f *Fake) OnStart(fn func(method, name string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onStart = fn
}

// Calls returns the calls recorded so far, of the given methods (all when none given).
func (f *Fake) Calls(methods ...string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if len(methods) == 0 || contains(methods, c.Method) {
			out = append(out, c)
		}
	}
	return out
}

// Started returns the names of the executions started (Workflows executions, Cloud Run
// executions, builds), in order, whether or not their start was answered.
func (f *Fake) Started() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.startedNames)
}

// Running returns the names of the executions started and not ended (by Finish or a
// cancel), in the order they were started.
func (f *Fake) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, name := range f.startedNames {
		if e, ok := f.wf[name]; ok && e.GetEndTime() == nil {
			out = append(out, name)
		}
		if e, ok := f.runs[name]; ok && e.GetCompletionTime() == nil {
			out = append(out, name)
		}
		if b, ok := f.builds[name]; ok && b.GetFinishTime() == nil {
			out = append(out, name)
		}
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Finish ends an execution (any kind) with the outcome.
func (f *Fake) Finish(name string, o Outcome) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.finish(name, o)
}

// finish ends an execution; f.mu must be held.
func (f *Fake) finish(name string, o Outcome) error {
	now := timestamppb.Now()
	if e, ok := f.wf[name]; ok {
		e.EndTime = now
		switch o {
		case Succeeded:
			e.State, e.Result = executionspb.Execution_SUCCEEDED, `"ok"`
		case Failed:
			e.State, e.Error = executionspb.Execution_FAILED, &executionspb.Execution_Error{Payload: "step failed"}
		default:
			e.State = executionspb.Execution_CANCELLED
		}
		return nil
	}
	if e, ok := f.runs[name]; ok {
		e.CompletionTime = now
		switch o {
		case Succeeded:
			e.SucceededCount = e.TaskCount
		case Failed:
			e.FailedCount = e.TaskCount
		default:
			e.CancelledCount = e.TaskCount
		}
		return nil
	}
	if b, ok := f.builds[name]; ok {
		b.FinishTime = now
		switch o {
		case Succeeded:
			b.Status = cloudbuildpb.Build_SUCCESS
		case Failed:
			b.Status, b.StatusDetail = cloudbuildpb.Build_FAILURE, "step 0 failed"
		default:
			b.Status = cloudbuildpb.Build_CANCELLED
		}
		return nil
	}
	return fmt.Errorf("targetstest: no execution %s", name)
}

// enter records a call and returns the error injected for it, if any; a call held
// before it takes effect waits here until released.
func (f *Fake) enter(method, name string, req proto.Message) error {
	f.mu.Lock()
	err := f.every[method]
	if q := f.errs[method]; len(q) > 0 {
		err, f.errs[method] = q[0], q[1:]
	}
	var h *Hold
	if q := f.holds[method]; len(q) > 0 && err == nil {
		h, f.holds[method] = q[0], q[1:]
	}
	f.calls = append(f.calls, Call{Method: method, Name: name, Request: proto.Clone(req), Err: err})
	f.mu.Unlock()
	if h != nil {
		h.wait()
	}
	return err
}

// cancel ends a running execution as cancelled: FAILED_PRECONDITION when it already
// ended, NOT_FOUND when there is none.
func (f *Fake) cancel(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ended := false
	switch {
	case f.wf[name] != nil:
		ended = f.wf[name].GetEndTime() != nil
	case f.runs[name] != nil:
		ended = f.runs[name].GetCompletionTime() != nil
	case f.builds[name] != nil:
		ended = f.builds[name].GetFinishTime() != nil
	default:
		return status.Errorf(codes.NotFound, "execution %s not found", name)
	}
	if ended {
		return status.Errorf(codes.FailedPrecondition, "execution %s has already ended", name)
	}
	return f.finish(name, Cancelled)
}

// started records the execution, renames the last call of method to it and runs the hook.
func (f *Fake) started(method, name string) {
	f.mu.Lock()
	f.startedNames = append(f.startedNames, name)
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i].Method == method {
			f.calls[i].Name = name
			break
		}
	}
	hook := f.onStart
	f.mu.Unlock()
	if hook != nil {
		hook(method, name)
	}
}

// lostAnswer returns the error to answer a start that was made, if one is queued.
func (f *Fake) lostAnswer(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.lost[method]
	if len(q) == 0 {
		return nil
	}
	f.lost[method] = q[1:]
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i].Method == method {
			f.calls[i].Err = q[0]
			break
		}
	}
	return q[0]
}

func (f *Fake) next() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	return f.seq
}

type wfServer struct {
	executionspb.UnimplementedExecutionsServer
	f *Fake
}

var labelFilter = regexp.MustCompile(`^labels\.([a-z][a-z0-9_-]*)="([^"]*)"$`)

func (s *wfServer) CreateExecution(ctx context.Context, r *executionspb.CreateExecutionRequest) (*executionspb.Execution, error) {
	if err := s.f.enter(WorkflowsCreate, r.GetParent(), r); err != nil {
		return nil, err
	}
	for k, v := range r.GetExecution().GetLabels() {
		if len(k) > 63 || len(v) > 63 {
			return nil, status.Errorf(codes.InvalidArgument, "label %s=%s: keys and values are at most 63 characters", k, v)
		}
	}
	e := proto.Clone(r.GetExecution()).(*executionspb.Execution)
	e.Name = fmt.Sprintf("%s/executions/exec-%d", r.GetParent(), s.f.next())
	e.State, e.StartTime = executionspb.Execution_ACTIVE, timestamppb.Now()
	s.f.mu.Lock()
	s.f.wf[e.Name] = e
	out := proto.Clone(e).(*executionspb.Execution)
	s.f.mu.Unlock()
	s.f.started(WorkflowsCreate, e.Name)
	s.f.holdAnswer(WorkflowsCreate)
	if err := s.f.lostAnswer(WorkflowsCreate); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *wfServer) ListExecutions(ctx context.Context, r *executionspb.ListExecutionsRequest) (*executionspb.ListExecutionsResponse, error) {
	if err := s.f.enter(WorkflowsList, r.GetParent(), r); err != nil {
		return nil, err
	}
	var key, value string
	if r.GetFilter() != "" {
		m := labelFilter.FindStringSubmatch(r.GetFilter())
		if m == nil {
			return nil, status.Errorf(codes.InvalidArgument, "the fake supports only filters labels.KEY=\"VALUE\", not %q", r.GetFilter())
		}
		key, value = m[1], m[2]
	}
	s.f.mu.Lock()
	out := &executionspb.ListExecutionsResponse{}
	for name, e := range s.f.wf {
		if strings.HasPrefix(name, r.GetParent()+"/executions/") && (key == "" || e.GetLabels()[key] == value) {
			out.Executions = append(out.Executions, proto.Clone(e).(*executionspb.Execution))
		}
	}
	s.f.mu.Unlock()
	s.f.holdAnswer(WorkflowsList)
	return out, nil
}

func (s *wfServer) CancelExecution(ctx context.Context, r *executionspb.CancelExecutionRequest) (*executionspb.Execution, error) {
	if err := s.f.enter(WorkflowsCancel, r.GetName(), r); err != nil {
		return nil, err
	}
	if err := s.f.cancel(r.GetName()); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return proto.Clone(s.f.wf[r.GetName()]).(*executionspb.Execution), nil
}

func (s *wfServer) GetExecution(ctx context.Context, r *executionspb.GetExecutionRequest) (*executionspb.Execution, error) {
	if err := s.f.enter(WorkflowsGet, r.GetName(), r); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	e, ok := s.f.wf[r.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "execution %s not found", r.GetName())
	}
	return proto.Clone(e).(*executionspb.Execution), nil
}

type runJobs struct {
	runpb.UnimplementedJobsServer
	f *Fake
}

func (s *runJobs) RunJob(ctx context.Context, r *runpb.RunJobRequest) (*longrunningpb.Operation, error) {
	if err := s.f.enter(RunJobsRun, r.GetName(), r); err != nil {
		return nil, err
	}
	var container string
	var env []*runpb.EnvVar
	if o := r.GetOverrides().GetContainerOverrides(); len(o) > 0 {
		container, env = o[0].GetName(), o[0].GetEnv()
	}
	n := s.f.next()
	e := &runpb.Execution{
		Name: fmt.Sprintf("%s/executions/exec-%d", r.GetName(), n),
		Job:  r.GetName(), TaskCount: 1, CreateTime: timestamppb.Now(), StartTime: timestamppb.Now(),
		Template: &runpb.TaskTemplate{Containers: []*runpb.Container{{Name: container, Env: env}}},
	}
	md, err := anypb.New(e)
	if err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	s.f.runs[e.Name] = e
	s.f.mu.Unlock()
	s.f.started(RunJobsRun, e.Name)
	s.f.holdAnswer(RunJobsRun)
	if err := s.f.lostAnswer(RunJobsRun); err != nil {
		return nil, err
	}
	return &longrunningpb.Operation{Name: fmt.Sprintf("projects/p/locations/l/operations/op-%d", n), Metadata: md}, nil
}

type runExecs struct {
	runpb.UnimplementedExecutionsServer
	f *Fake
}

func (s *runExecs) GetExecution(ctx context.Context, r *runpb.GetExecutionRequest) (*runpb.Execution, error) {
	if err := s.f.enter(RunExecGet, r.GetName(), r); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	e, ok := s.f.runs[r.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "execution %s not found", r.GetName())
	}
	return proto.Clone(e).(*runpb.Execution), nil
}

// ListExecutions lists the job's executions, newest first, in one page.
func (s *runExecs) ListExecutions(ctx context.Context, r *runpb.ListExecutionsRequest) (*runpb.ListExecutionsResponse, error) {
	if err := s.f.enter(RunExecList, r.GetParent(), r); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	out := &runpb.ListExecutionsResponse{}
	for _, e := range s.f.runs {
		if e.GetJob() == r.GetParent() {
			out.Executions = append(out.Executions, proto.Clone(e).(*runpb.Execution))
		}
	}
	s.f.mu.Unlock()
	slices.SortFunc(out.Executions, func(a, b *runpb.Execution) int { return b.GetCreateTime().AsTime().Compare(a.GetCreateTime().AsTime()) })
	s.f.holdAnswer(RunExecList)
	return out, nil
}

// CancelExecution cancels the execution and answers a done operation.
func (s *runExecs) CancelExecution(ctx context.Context, r *runpb.CancelExecutionRequest) (*longrunningpb.Operation, error) {
	if err := s.f.enter(RunExecCancel, r.GetName(), r); err != nil {
		return nil, err
	}
	if err := s.f.cancel(r.GetName()); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	e := proto.Clone(s.f.runs[r.GetName()]).(*runpb.Execution)
	s.f.mu.Unlock()
	res, err := anypb.New(e)
	if err != nil {
		return nil, err
	}
	return &longrunningpb.Operation{Name: fmt.Sprintf("projects/p/locations/l/operations/op-%d", s.f.next()), Done: true,
		Result: &longrunningpb.Operation_Response{Response: res}}, nil
}

type builds struct {
	cloudbuildpb.UnimplementedCloudBuildServer
	f *Fake
}

func (s *builds) RunBuildTrigger(ctx context.Context, r *cloudbuildpb.RunBuildTriggerRequest) (*longrunningpb.Operation, error) {
	if err := s.f.enter(BuildTriggerRun, r.GetName(), r); err != nil {
		return nil, err
	}
	n := s.f.next()
	parts := strings.Split(r.GetName(), "/")
	if len(parts) != 6 {
		return nil, status.Errorf(codes.InvalidArgument, "trigger name %q", r.GetName())
	}
	id := fmt.Sprintf("build-%d", n)
	b := &cloudbuildpb.Build{
		Name: fmt.Sprintf("projects/%s/locations/%s/builds/%s", parts[1], parts[3], id), Id: id, ProjectId: parts[1],
		BuildTriggerId: parts[5], Status: cloudbuildpb.Build_WORKING, Substitutions: r.GetSource().GetSubstitutions(),
		CreateTime: timestamppb.Now(),
	}
	md, err := anypb.New(&cloudbuildpb.BuildOperationMetadata{Build: b})
	if err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	s.f.builds[b.Name] = b
	s.f.mu.Unlock()
	s.f.started(BuildTriggerRun, b.Name)
	s.f.holdAnswer(BuildTriggerRun)
	if err := s.f.lostAnswer(BuildTriggerRun); err != nil {
		return nil, err
	}
	return &longrunningpb.Operation{Name: fmt.Sprintf("projects/%s/locations/%s/operations/op-%d", parts[1], parts[3], n), Metadata: md}, nil
}

func (s *builds) GetBuild(ctx context.Context, r *cloudbuildpb.GetBuildRequest) (*cloudbuildpb.Build, error) {
	if err := s.f.enter(BuildGet, r.GetName(), r); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	b, ok := s.f.builds[r.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "build %s not found", r.GetName())
	}
	return proto.Clone(b).(*cloudbuildpb.Build), nil
}

var triggerFilter = regexp.MustCompile(`^trigger_id="([^"]*)"$`)

// ListBuilds lists the location's builds, newest first, in one page; the only filter it
// takes is trigger_id="ID".
func (s *builds) ListBuilds(ctx context.Context, r *cloudbuildpb.ListBuildsRequest) (*cloudbuildpb.ListBuildsResponse, error) {
	if err := s.f.enter(BuildList, r.GetParent(), r); err != nil {
		return nil, err
	}
	var trigger string
	if r.GetFilter() != "" {
		m := triggerFilter.FindStringSubmatch(r.GetFilter())
		if m == nil {
			return nil, status.Errorf(codes.InvalidArgument, "the fake supports only the filter trigger_id=\"ID\", not %q", r.GetFilter())
		}
		trigger = m[1]
	}
	s.f.mu.Lock()
	out := &cloudbuildpb.ListBuildsResponse{}
	for name, b := range s.f.builds {
		if strings.HasPrefix(name, r.GetParent()+"/builds/") && (trigger == "" || b.GetBuildTriggerId() == trigger) {
			out.Builds = append(out.Builds, proto.Clone(b).(*cloudbuildpb.Build))
		}
	}
	s.f.mu.Unlock()
	slices.SortFunc(out.Builds, func(a, b *cloudbuildpb.Build) int {
		return b.GetCreateTime().AsTime().Compare(a.GetCreateTime().AsTime())
	})
	s.f.holdAnswer(BuildList)
	return out, nil
}

// CancelBuild cancels the build named by name (projects/P/locations/L/builds/ID).
func (s *builds) CancelBuild(ctx context.Context, r *cloudbuildpb.CancelBuildRequest) (*cloudbuildpb.Build, error) {
	if err := s.f.enter(BuildCancel, r.GetName(), r); err != nil {
		return nil, err
	}
	if err := s.f.cancel(r.GetName()); err != nil {
		return nil, err
	}
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return proto.Clone(s.f.builds[r.GetName()]).(*cloudbuildpb.Build), nil
}
