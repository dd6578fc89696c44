package cloudscheduler_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	scheduler "cloud.google.com/go/scheduler/apiv1"
	"cloud.google.com/go/scheduler/apiv1/schedulerpb"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/runonce/runonce/pkg/schedule"
	"github.com/runonce/runonce/pkg/schedule/cloudscheduler"
	"github.com/runonce/runonce/pkg/schedule/cloudscheduler/cloudschedulertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}

const jobName = "projects/acme/locations/europe-west1/jobs/nightly"

type bundle struct {
	fake   *cloudschedulertest.Fake
	client *cloudscheduler.Client
	// admin is the official client a user changes jobs with (pause, resume, update).
	admin *scheduler.CloudSchedulerClient
}

func setup(t *testing.T) *bundle {
	t.Helper()
	f, err := cloudschedulertest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	b := &bundle{fake: f}
	opts, err := f.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	if b.client, err = cloudscheduler.NewClient(t.Context(), opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.client.Close() })
	if opts, err = f.ClientOptions(); err != nil {
		t.Fatal(err)
	}
	if b.admin, err = scheduler.NewCloudSchedulerClient(t.Context(), opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.admin.Close() })
	return b
}

func httpJob(name, sched, zone string) *schedulerpb.Job {
	return &schedulerpb.Job{Name: name, Schedule: sched, TimeZone: zone,
		Target: &schedulerpb.Job_HttpTarget{HttpTarget: &schedulerpb.HttpTarget{Uri: "https://ingress/v1/jobs/nightly"}}}
}

func TestGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := httpJob(jobName, "0 9 * * 1-5", "Europe/Berlin")
	j.RetryConfig = &schedulerpb.RetryConfig{RetryCount: 3, MaxRetryDuration: durationpb.New(10 * time.Minute),
		MinBackoffDuration: durationpb.New(10 * time.Second), MaxBackoffDuration: durationpb.New(5 * time.Minute), MaxDoublings: 4}
	j.AttemptDeadline = durationpb.New(time.Minute)
	j.GetHttpTarget().Body = []byte(`{"region":"eu"}`)
	if err := b.fake.Put(j); err != nil {
		t.Fatal(err)
	}
	got, err := b.client.Get(t.Context(), jobName)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != jobName || got.ID() != "nightly" || got.State != cloudscheduler.StateEnabled ||
		!got.Schedule.Equal(schedule.MustParse("0 9 * * 1-5", "Europe/Berlin")) || got.UpdatedAt.IsZero() || string(got.Body) != `{"region":"eu"}` {
		t.Errorf("Get = %+v", got)
	}
	want := schedule.Retry{Count: 3, MaxRetryDuration: 10 * time.Minute, MinBackoff: 10 * time.Second, MaxBackoff: 5 * time.Minute,
		MaxDoublings: 4, AttemptDeadline: time.Minute}
	if diff := cmp.Diff(want, got.Retry); diff != "" {
		t.Errorf("retry (-want +got):\n%s", diff)
	}

	// Unset settings are the API's defaults; an App Engine target's deadline is its
	// service's (10 minutes for standard automatic scaling).
	plain := httpJob("projects/acme/locations/europe-west1/jobs/plain", "*/5 * * * *", "")
	ae := &schedulerpb.Job{Name: "projects/acme/locations/europe-west1/jobs/ae", Schedule: "0 * * * *",
		Target: &schedulerpb.Job_AppEngineHttpTarget{AppEngineHttpTarget: &schedulerpb.AppEngineHttpTarget{RelativeUri: "/run", Body: []byte("ae")}}}
	for _, j := range []*schedulerpb.Job{plain, ae} {
		if err := b.fake.Put(j); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := b.client.Get(t.Context(), plain.Name); err != nil || got.Retry != schedule.DefaultRetry || got.Schedule.TimeZone() != "UTC" {
		t.Errorf("plain: %+v, %v; want the default retry settings in UTC", got, err)
	}
	if got, err := b.client.Get(t.Context(), ae.Name); err != nil || got.Retry.AttemptDeadline != 10*time.Minute || string(got.Body) != "ae" {
		t.Errorf("App Engine: %+v, %v; want a 10-minute deadline and its body", got, err)
	}
}

func TestGetErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.fake.Put(httpJob(jobName, "0 9 * * *", "UTC")); err != nil {
		t.Fatal(err)
	}
	english := "projects/acme/locations/europe-west1/jobs/english"
	if err := b.fake.Put(httpJob(english, "every monday 09:00", "Europe/Berlin")); err != nil {
		t.Fatal(err)
	}
	b.fake.FailNext(cloudschedulertest.GetJob,
		cloudschedulertest.Status(codes.PermissionDenied, "The caller does not have permission"),
		cloudschedulertest.Status(codes.Unauthenticated, "Request had invalid authentication credentials"))
	for _, c := range []struct {
		name   string
		is     error
		saying []string
	}{
		{jobName, cloudscheduler.ErrPermissionDenied, []string{"roles/cloudscheduler.viewer", "project acme", jobName}},
		{jobName, cloudscheduler.ErrUnauthenticated, []string{"Application Default Credentials were refused"}},
		{"projects/acme/locations/europe-west1/jobs/gone", cloudscheduler.ErrNotFound, []string{"projects/acme/locations/europe-west1/jobs/gone does not exist", "scheduler_job"}},
		{english, cloudscheduler.ErrSchedule, []string{`schedule "every monday 09:00"`, "English-like"}},
	} {
		_, err := b.client.Get(t.Context(), c.name)
		if !errors.Is(err, c.is) {
			t.Errorf("Get(%s) = %v, want %v", c.name, err, c.is)
			continue
		}
		for _, s := range c.saying {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Get(%s) = %q, want it to say %q", c.name, err, s)
			}
		}
	}
	calls := len(b.fake.Calls())
	if _, err := b.client.Get(t.Context(), "nightly"); err == nil || !strings.Contains(err.Error(), schedule.SchedulerJobForm) {
		t.Errorf("a short name: %v, want the form named", err)
	}
	if len(b.fake.Calls()) != calls {
		t.Error("a malformed name was sent to the API")
	}
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(hhmm string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = must(time.Parse(time.RFC3339, "2026-05-01T"+hhmm+":00Z"))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func at(hhmm string) time.Time { return must(time.Parse(time.RFC3339, "2026-05-01T"+hhmm+":00Z")) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestSourcePausedResumedChanged drives a job through the official client as a user
// would (pause, resume, a new schedule) and the system would (disabled), and checks what
// the source reads and the paused spans it keeps.
func TestSourcePausedResumedChanged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	api, src := &clock{}, &clock{} // Cloud Scheduler's clock (user_update_time), runonce's
	b.fake.SetClock(api.now)
	api.set("09:00")
	if err := b.fake.Put(httpJob(jobName, "*/15 * * * *", "UTC")); err != nil {
		t.Fatal(err)
	}
	s, err := cloudscheduler.NewSource(b.client, jobName, &cloudscheduler.SourceOptions{Now: src.now, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	refresh := func(hhmm string, want cloudscheduler.State) *cloudscheduler.Job {
		t.Helper()
		src.set(hhmm)
		j, err := s.Refresh(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", hhmm, err)
		}
		if j.State != want || !j.ReadAt.Equal(at(hhmm)) {
			t.Fatalf("%s: state %s read at %v, want %s at %s", hhmm, j.State, j.ReadAt, want, hhmm)
		}
		if cur, err := s.Current(); cur != j || err != nil {
			t.Fatalf("%s: Current() = %v, %v; want the reading", hhmm, cur, err)
		}
		return j
	}
	refresh("10:00", cloudscheduler.StateEnabled)

	// Paused at 10:03 (user_update_time), seen at 10:05 and 10:10, resumed at 10:20,
	// seen at 10:25: one span, [10:03, 10:20).
	api.set("10:03")
	if _, err := b.admin.PauseJob(t.Context(), &schedulerpb.PauseJobRequest{Name: jobName}); err != nil {
		t.Fatal(err)
	}
	refresh("10:05", cloudscheduler.StatePaused)
	if diff := cmp.Diff([]schedule.Period{{From: at("10:03")}}, s.Paused()); diff != "" {
		t.Errorf("paused, not resumed (-want +got):\n%s", diff)
	}
	refresh("10:10", cloudscheduler.StatePaused)
	api.set("10:20")
	if _, err := b.admin.ResumeJob(t.Context(), &schedulerpb.ResumeJobRequest{Name: jobName}); err != nil {
		t.Fatal(err)
	}
	refresh("10:25", cloudscheduler.StateEnabled)
	if diff := cmp.Diff([]schedule.Period{{From: at("10:03"), To: at("10:20")}}, s.Paused()); diff != "" {
		t.Errorf("paused and resumed (-want +got):\n%s", diff)
	}

	// The schedule changed: the next reading has it.
	api.set("10:30")
	if _, err := b.admin.UpdateJob(t.Context(), &schedulerpb.UpdateJobRequest{Job: httpJob(jobName, "0 9 * * *", "America/New_York"),
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"schedule", "time_zone"}}}); err != nil {
		t.Fatal(err)
	}
	if j := refresh("10:35", cloudscheduler.StateEnabled); !j.Schedule.Equal(schedule.MustParse("0 9 * * *", "America/New_York")) {
		t.Errorf("after the update: %s", j.Schedule)
	}

	// A pause whose user_update_time says nothing newer than the last reading (a clock
	// behind, or a stamp of another change): the span starts at that reading, 10:35,
	// and a resume stamped no later than the last paused reading ends at the reading
	// that saw it, 10:50.
	api.set("09:00")
	if _, err := b.admin.PauseJob(t.Context(), &schedulerpb.PauseJobRequest{Name: jobName}); err != nil {
		t.Fatal(err)
	}
	refresh("10:40", cloudscheduler.StatePaused)
	if _, err := b.admin.ResumeJob(t.Context(), &schedulerpb.ResumeJobRequest{Name: jobName}); err != nil {
		t.Fatal(err)
	}
	refresh("10:50", cloudscheduler.StateEnabled)
	if diff := cmp.Diff([]schedule.Period{{From: at("10:03"), To: at("10:20")}, {From: at("10:35"), To: at("10:50")}}, s.Paused()); diff != "" {
		t.Errorf("spans from readings (-want +got):\n%s", diff)
	}

	// Disabled by the system: not a pause (its ticks are missed).
	if err := b.fake.SetState(jobName, schedulerpb.Job_DISABLED); err != nil {
		t.Fatal(err)
	}
	refresh("11:00", cloudscheduler.StateDisabled)
	if n := len(s.Paused()); n != 2 {
		t.Errorf("%d spans after DISABLED, want still 2", n)
	}

	// A failed refresh keeps the last reading and reports the error; the next good one
	// clears it.
	b.fake.FailNext(cloudschedulertest.GetJob, cloudschedulertest.Status(codes.PermissionDenied, "denied"))
	src.set("11:05")
	if _, err := s.Refresh(t.Context()); !errors.Is(err, cloudscheduler.ErrPermissionDenied) {
		t.Fatalf("refresh: %v, want permission denied", err)
	}
	if cur, err := s.Current(); cur == nil || cur.State != cloudscheduler.StateDisabled || !errors.Is(err, cloudscheduler.ErrPermissionDenied) {
		t.Errorf("Current() = %v, %v; want the 11:00 reading and the error", cur, err)
	}
	refresh("11:10", cloudscheduler.StateDisabled)
}

// TestSourceFirstSeenPaused: a job paused before runonce first reads it is paused from
// its user_update_time; the span stays open.
func TestSourceFirstSeenPaused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	api := &clock{}
	api.set("08:00")
	b.fake.SetClock(api.now)
	j := httpJob(jobName, "0 * * * *", "UTC")
	j.State = schedulerpb.Job_PAUSED
	if err := b.fake.Put(j); err != nil {
		t.Fatal(err)
	}
	s, err := cloudscheduler.NewSource(b.client, jobName, &cloudscheduler.SourceOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]schedule.Period{{From: at("08:00")}}, s.Paused()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := cloudscheduler.NewSource(b.client, "jobs/nightly", nil); err == nil {
		t.Error("NewSource took a malformed name")
	}
}

// TestSourceRun: the loop refreshes periodically, picks up a pause, keeps going through
// a failed read, and returns when its context ends.
func TestSourceRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.fake.Put(httpJob(jobName, "0 * * * *", "UTC")); err != nil {
		t.Fatal(err)
	}
	s, err := cloudscheduler.NewSource(b.client, jobName, &cloudscheduler.SourceOptions{Every: 10 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	b.fake.FailNext(cloudschedulertest.GetJob, cloudschedulertest.Status(codes.NotFound, "gone for a moment"))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	waitFor(t, "three reads", func() bool { return len(b.fake.Calls(cloudschedulertest.GetJob)) >= 3 })
	if _, err := b.admin.PauseJob(t.Context(), &schedulerpb.PauseJobRequest{Name: jobName}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pause read", func() bool {
		j, err := s.Current()
		return err == nil && j != nil && j.State == cloudscheduler.StatePaused
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if calls := b.fake.Calls(cloudschedulertest.GetJob); calls[0].Err == nil {
		t.Error("the first read did not fail: the loop's recovery is untested")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
