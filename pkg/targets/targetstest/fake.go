// Package targetstest is a local fake of the gRPC surfaces of the Google Cloud APIs the
// targets call — Workflows executions (create, list with a label filter, get), Cloud Run
// v2 jobs.run and executions get and list, and Cloud Build triggers.run and builds get and
// list (by trigger) — served
// in-process on a loopback port. The official clients reach it through a target's
// plaintext endpoint ("http://127.0.0.1:PORT": option.WithGRPCConn over an insecure
// connection, option.WithoutAuthentication). It records every call, starts every
// execution in a running state until Finish ends it, and injects errors per method, before
// the call takes effect (FailNext) or after (LoseNextAnswer).
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
	RunJobsRun      = "run.jobs.run"
	RunExecGet      = "run.executions.get"
	RunExecList     = "run.executions.list"
	BuildTriggerRun = "cloudbuild.triggers.run"
	BuildGet        = "cloudbuild.builds.get"
	BuildList       = "cloudbuild.builds.list"
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

// Close stops the fake.
func (f *Fake) Close() { f.srv.Stop() }

// FailNext makes the next calls of method answer errs, one each, in order.
func (f *Fake) FailNext(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = append(f.errs[method], errs...)
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

// enter records a call and returns the error injected for it, if any.
func (f *Fake) enter(method, name string, req proto.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if q := f.errs[method]; len(q) > 0 {
		err, f.errs[method] = q[0], q[1:]
	}
	f.calls = append(f.calls, Call{Method: method, Name: name, Request: proto.Clone(req), Err: err})
	return err
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
	defer s.f.mu.Unlock()
	out := &executionspb.ListExecutionsResponse{}
	for name, e := range s.f.wf {
		if strings.HasPrefix(name, r.GetParent()+"/executions/") && (key == "" || e.GetLabels()[key] == value) {
			out.Executions = append(out.Executions, proto.Clone(e).(*executionspb.Execution))
		}
	}
	return out, nil
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
		Job:  r.GetName(), TaskCount: 1, StartTime: timestamppb.Now(),
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
	defer s.f.mu.Unlock()
	out := &runpb.ListExecutionsResponse{}
	for _, e := range s.f.runs {
		if e.GetJob() == r.GetParent() {
			out.Executions = append(out.Executions, proto.Clone(e).(*runpb.Execution))
		}
	}
	slices.SortFunc(out.Executions, func(a, b *runpb.Execution) int { return b.GetStartTime().AsTime().Compare(a.GetStartTime().AsTime()) })
	return out, nil
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
	defer s.f.mu.Unlock()
	out := &cloudbuildpb.ListBuildsResponse{}
	for name, b := range s.f.builds {
		if strings.HasPrefix(name, r.GetParent()+"/builds/") && (trigger == "" || b.GetBuildTriggerId() == trigger) {
			out.Builds = append(out.Builds, proto.Clone(b).(*cloudbuildpb.Build))
		}
	}
	slices.SortFunc(out.Builds, func(a, b *cloudbuildpb.Build) int {
		return b.GetCreateTime().AsTime().Compare(a.GetCreateTime().AsTime())
	})
	return out, nil
}
