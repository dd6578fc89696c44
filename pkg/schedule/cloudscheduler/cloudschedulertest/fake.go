// Package cloudschedulertest is a local fake of Cloud Scheduler's gRPC surface
// (google.cloud.scheduler.v1.CloudScheduler: GetJob, ListJobs, CreateJob, UpdateJob,
// DeleteJob, PauseJob, ResumeJob), served in-process on a loopback port, for tests that
// drive the official client (cloud.google.com/go/scheduler/apiv1) through
// ClientOptions: a plaintext connection without credentials.
//
// It keeps jobs in memory, as the API answers them: a job's state is ENABLED when
// created, PAUSED after PauseJob, ENABLED again after ResumeJob, and a test may set any
// state (DISABLED, UPDATE_FAILED) with SetState. Every user change (create, update,
// pause, resume) sets user_update_time from the fake's clock. Schedules are stored as
// given, never evaluated. It records every call and injects errors per method
// (FailNext).
package cloudschedulertest

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/scheduler/apiv1/schedulerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The methods a Call names and FailNext takes.
const (
	GetJob    = "GetJob"
	ListJobs  = "ListJobs"
	CreateJob = "CreateJob"
	UpdateJob = "UpdateJob"
	DeleteJob = "DeleteJob"
	PauseJob  = "PauseJob"
	ResumeJob = "ResumeJob"
)

// Call is one recorded call.
type Call struct {
	Method string
	// Name is the job (the parent for CreateJob and ListJobs).
	Name string
	// Err is the error answered, nil for success.
	Err error
}

// Fake is the fake server. Its methods are safe for concurrent use.
type Fake struct {
	schedulerpb.UnimplementedCloudSchedulerServer
	srv   *grpc.Server
	lis   net.Listener
	mu    sync.Mutex
	now   func() time.Time
	jobs  map[string]*schedulerpb.Job
	errs  map[string][]error
	calls []Call
}

// New starts a fake on a free loopback port; Close stops it.
func New() (*Fake, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Fake{srv: grpc.NewServer(), lis: lis, now: time.Now, jobs: map[string]*schedulerpb.Job{}, errs: map[string][]error{}}
	schedulerpb.RegisterCloudSchedulerServer(f.srv, f)
	go f.srv.Serve(lis)
	return f, nil
}

// Addr is the fake's HOST:PORT.
func (f *Fake) Addr() string { return f.lis.Addr().String() }

// ClientOptions reach the fake from the official client: a plaintext connection to
// Addr, without credentials. The caller closes the client, which closes the connection.
func (f *Fake) ClientOptions() ([]option.ClientOption, error) {
	conn, err := grpc.NewClient(f.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return []option.ClientOption{option.WithGRPCConn(conn), option.WithoutAuthentication()}, nil
}

// Close stops the fake.
func (f *Fake) Close() { f.srv.Stop() }

// SetClock makes the fake stamp user_update_time with now().
func (f *Fake) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
}

// FailNext makes the next calls of method answer errs, one each, in order, before the
// call takes effect.
func (f *Fake) FailNext(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = append(f.errs[method], errs...)
}

// Status is a gRPC status error, for FailNext.
func Status(c codes.Code, msg string) error { return status.Error(c, msg) }

// Calls returns the calls recorded so far, of the given methods (all when none given).
func (f *Fake) Calls(methods ...string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if len(methods) == 0 || slices.Contains(methods, c.Method) {
			out = append(out, c)
		}
	}
	return out
}

// Put stores job as given (its name must be a job's full name), replacing any job of
// that name, with its state ENABLED unless set and user_update_time now: the job a
// test starts from, even one the API would refuse (an English-like schedule).
func (f *Fake) Put(job *schedulerpb.Job) error {
	if !jobName.MatchString(job.GetName()) {
		return fmt.Errorf("cloudschedulertest: %q is not projects/P/locations/L/jobs/J", job.GetName())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	j := proto.Clone(job).(*schedulerpb.Job)
	if j.State == schedulerpb.Job_STATE_UNSPECIFIED {
		j.State = schedulerpb.Job_ENABLED
	}
	j.UserUpdateTime = timestamppb.New(f.now())
	f.jobs[j.Name] = j
	return nil
}

// SetSchedule changes a job's schedule and time zone, as a user's update does.
func (f *Fake) SetSchedule(name, schedule, timeZone string) error {
	return f.change(name, func(j *schedulerpb.Job) { j.Schedule, j.TimeZone = schedule, timeZone })
}

// SetState sets a job's state, as the system does (DISABLED, UPDATE_FAILED); it does
// not touch user_update_time.
func (f *Fake) SetState(name string, s schedulerpb.Job_State) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[name]
	if !ok {
		return fmt.Errorf("cloudschedulertest: no job %s", name)
	}
	j.State = s
	return nil
}

// Delete removes a job.
func (f *Fake) Delete(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.jobs, name)
}

func (f *Fake) change(name string, fn func(*schedulerpb.Job)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[name]
	if !ok {
		return fmt.Errorf("cloudschedulertest: no job %s", name)
	}
	fn(j)
	j.UserUpdateTime = timestamppb.New(f.now())
	return nil
}

// enter records a call and returns the error injected for it, if any.
func (f *Fake) enter(method, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	if q := f.errs[method]; len(q) > 0 {
		err, f.errs[method] = q[0], q[1:]
	}
	f.calls = append(f.calls, Call{Method: method, Name: name, Err: err})
	return err
}

var (
	jobName    = regexp.MustCompile(`^projects/[^/]+/locations/[^/]+/jobs/[A-Za-z0-9_-]{1,500}$`)
	parentName = regexp.MustCompile(`^projects/[^/]+/locations/[^/]+$`)
)

// get returns a copy of the job, or the API's NOT_FOUND.
func (f *Fake) get(name string) (*schedulerpb.Job, error) {
	if !jobName.MatchString(name) {
		return nil, status.Errorf(codes.InvalidArgument, "invalid resource field value in the request: name %q", name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "Job not found: %s", name)
	}
	return proto.Clone(j).(*schedulerpb.Job), nil
}

// GetJob answers the job.
func (f *Fake) GetJob(ctx context.Context, r *schedulerpb.GetJobRequest) (*schedulerpb.Job, error) {
	if err := f.enter(GetJob, r.GetName()); err != nil {
		return nil, err
	}
	return f.get(r.GetName())
}

// ListJobs answers the parent's jobs, by name, in one page.
func (f *Fake) ListJobs(ctx context.Context, r *schedulerpb.ListJobsRequest) (*schedulerpb.ListJobsResponse, error) {
	if err := f.enter(ListJobs, r.GetParent()); err != nil {
		return nil, err
	}
	if !parentName.MatchString(r.GetParent()) {
		return nil, status.Errorf(codes.InvalidArgument, "invalid resource field value in the request: parent %q", r.GetParent())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &schedulerpb.ListJobsResponse{}
	for name, j := range f.jobs {
		if strings.HasPrefix(name, r.GetParent()+"/jobs/") {
			out.Jobs = append(out.Jobs, proto.Clone(j).(*schedulerpb.Job))
		}
	}
	slices.SortFunc(out.Jobs, func(a, b *schedulerpb.Job) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CreateJob stores a new job, ENABLED.
func (f *Fake) CreateJob(ctx context.Context, r *schedulerpb.CreateJobRequest) (*schedulerpb.Job, error) {
	if err := f.enter(CreateJob, r.GetParent()); err != nil {
		return nil, err
	}
	j := proto.Clone(r.GetJob()).(*schedulerpb.Job)
	if !strings.HasPrefix(j.GetName(), r.GetParent()+"/jobs/") || !jobName.MatchString(j.GetName()) {
		return nil, status.Errorf(codes.InvalidArgument, "job name %q is not in %s", j.GetName(), r.GetParent())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.jobs[j.Name]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Job already exists: %s", j.Name)
	}
	j.State, j.UserUpdateTime = schedulerpb.Job_ENABLED, timestamppb.New(f.now())
	f.jobs[j.Name] = j
	return proto.Clone(j).(*schedulerpb.Job), nil
}

// UpdateJob sets the fields the mask names (all the settable ones without a mask):
// schedule, time_zone, retry_config, attempt_deadline, description.
func (f *Fake) UpdateJob(ctx context.Context, r *schedulerpb.UpdateJobRequest) (*schedulerpb.Job, error) {
	in := r.GetJob()
	if err := f.enter(UpdateJob, in.GetName()); err != nil {
		return nil, err
	}
	if _, err := f.get(in.GetName()); err != nil {
		return nil, err
	}
	paths := r.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		paths = []string{"schedule", "time_zone", "retry_config", "attempt_deadline", "description"}
	}
	var bad []string
	err := f.change(in.GetName(), func(j *schedulerpb.Job) {
		for _, p := range paths {
			switch p {
			case "schedule":
				j.Schedule = in.GetSchedule()
			case "time_zone":
				j.TimeZone = in.GetTimeZone()
			case "retry_config":
				j.RetryConfig = proto.Clone(in.GetRetryConfig()).(*schedulerpb.RetryConfig)
			case "attempt_deadline":
				j.AttemptDeadline = in.GetAttemptDeadline()
			case "description":
				j.Description = in.GetDescription()
			default:
				bad = append(bad, p)
			}
		}
	})
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	if len(bad) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "the fake does not update %v", bad)
	}
	return f.get(in.GetName())
}

// DeleteJob removes the job.
func (f *Fake) DeleteJob(ctx context.Context, r *schedulerpb.DeleteJobRequest) (*emptypb.Empty, error) {
	if err := f.enter(DeleteJob, r.GetName()); err != nil {
		return nil, err
	}
	if _, err := f.get(r.GetName()); err != nil {
		return nil, err
	}
	f.Delete(r.GetName())
	return &emptypb.Empty{}, nil
}

// PauseJob pauses an ENABLED job.
func (f *Fake) PauseJob(ctx context.Context, r *schedulerpb.PauseJobRequest) (*schedulerpb.Job, error) {
	if err := f.enter(PauseJob, r.GetName()); err != nil {
		return nil, err
	}
	return f.transition(r.GetName(), schedulerpb.Job_ENABLED, schedulerpb.Job_PAUSED)
}

// ResumeJob resumes a PAUSED job.
func (f *Fake) ResumeJob(ctx context.Context, r *schedulerpb.ResumeJobRequest) (*schedulerpb.Job, error) {
	if err := f.enter(ResumeJob, r.GetName()); err != nil {
		return nil, err
	}
	return f.transition(r.GetName(), schedulerpb.Job_PAUSED, schedulerpb.Job_ENABLED)
}

func (f *Fake) transition(name string, from, to schedulerpb.Job_State) (*schedulerpb.Job, error) {
	j, err := f.get(name)
	if err != nil {
		return nil, err
	}
	if j.State != from {
		return nil, status.Errorf(codes.FailedPrecondition, "job %s is %s, not %s", name, j.State, from)
	}
	if err := f.change(name, func(j *schedulerpb.Job) { j.State = to }); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return f.get(name)
}
