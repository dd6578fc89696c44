package targets

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	run "cloud.google.com/go/run/apiv2"
	"cloud.google.com/go/run/apiv2/runpb"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/worker"
)

// The environment overrides a Cloud Run job's container receives.
const (
	EnvIdempotencyKey = "RUNONCE_IDEMPOTENCY_KEY"
	EnvRunID          = "RUNONCE_RUN_ID"
	EnvJob            = "RUNONCE_JOB"
	EnvAttempt        = "RUNONCE_ATTEMPT"
	EnvScheduleTime   = "RUNONCE_SCHEDULE_TIME"
)

// cloudRun runs a Cloud Run job. jobs.run takes no labels and executions.list no filter:
// an earlier start whose outcome was not recorded is looked for among the job's latest
// executions by the EnvIdempotencyKey override their template carries, and when none is
// found the start is not repeated (at most once).
type cloudRun struct {
	jobs      *run.JobsClient
	execs     *run.ExecutionsClient
	job       string
	container string
}

func newCloudRun(ctx context.Context, t *jobs.Target, opts []option.ClientOption) (*cloudRun, error) {
	jc, err := run.NewJobsClient(ctx, opts...)
	if err != nil {
		return nil, err
	}
	ec, err := run.NewExecutionsClient(ctx, opts...)
	if err != nil {
		jc.Close()
		return nil, err
	}
	return &cloudRun{jobs: jc, execs: ec, job: t.Resource, container: t.Container}, nil
}

func (c *cloudRun) Close() error {
	err := c.jobs.Close()
	if e := c.execs.Close(); err == nil {
		err = e
	}
	return err
}

// CloudRunEnv returns the environment overrides of a run.
func CloudRunEnv(id Identity) []*runpb.EnvVar {
	env := []*runpb.EnvVar{
		{Name: EnvIdempotencyKey, Values: &runpb.EnvVar_Value{Value: id.IdempotencyKey}},
		{Name: EnvRunID, Values: &runpb.EnvVar_Value{Value: id.RunID}},
		{Name: EnvJob, Values: &runpb.EnvVar_Value{Value: id.Job}},
		{Name: EnvAttempt, Values: &runpb.EnvVar_Value{Value: strconv.FormatInt(id.Attempt, 10)}},
	}
	if id.ScheduleTime != "" {
		env = append(env, &runpb.EnvVar{Name: EnvScheduleTime, Values: &runpb.EnvVar_Value{Value: id.ScheduleTime}})
	}
	return env
}

func (c *cloudRun) start(ctx context.Context, _ *worker.Job, id Identity, _ string) (string, error) {
	op, err := c.jobs.RunJob(ctx, &runpb.RunJobRequest{
		Name: c.job,
		Overrides: &runpb.RunJobRequest_Overrides{ContainerOverrides: []*runpb.RunJobRequest_Overrides_ContainerOverride{
			{Name: c.container, Env: CloudRunEnv(id)},
		}},
	})
	if err != nil {
		return "", err
	}
	e, err := op.Metadata()
	if err != nil || e.GetName() == "" {
		// Started, but the operation names no execution: record the operation instead.
		return op.Name(), nil
	}
	return e.GetName(), nil
}

// find looks among the job's latest maxScan executions (newest first) for those whose
// template carries the run's key; errNotProven when it finds none.
func (c *cloudRun) find(ctx context.Context, _ string) ([]execution, error) {
	key := worker.IdempotencyKey(ctx)
	it := c.execs.ListExecutions(ctx, &runpb.ListExecutionsRequest{Parent: c.job, PageSize: 100})
	var out []execution
	for range maxScan {
		e, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, err
		}
		if carries(e, key) {
			out = append(out, execution{name: e.GetName(), created: e.GetCreateTime().AsTime()})
		}
	}
	if len(out) == 0 {
		return nil, errNotProven
	}
	return out, nil
}

// carries reports whether an execution's template carries the run's key.
func carries(e *runpb.Execution, key string) bool {
	for _, ctr := range e.GetTemplate().GetContainers() {
		for _, env := range ctr.GetEnv() {
			if env.GetName() == EnvIdempotencyKey && env.GetValue() == key {
				return true
			}
		}
	}
	return false
}

// cancel cancels an execution (executions.cancel); it does not wait for the operation.
func (c *cloudRun) cancel(ctx context.Context, name string) error {
	_, err := c.execs.CancelExecution(ctx, &runpb.CancelExecutionRequest{Name: name})
	return err
}

func (c *cloudRun) describe(ctx context.Context, _ string) string {
	return fmt.Sprintf("an execution of %s whose container has %s=%s", c.job, EnvIdempotencyKey, worker.IdempotencyKey(ctx))
}

// poll maps the execution's end: every task succeeded completes the run; a failed or
// cancelled task fails it (the job's own task retries have run).
func (c *cloudRun) poll(ctx context.Context, ref string) (bool, error) {
	e, err := c.execs.GetExecution(ctx, &runpb.GetExecutionRequest{Name: ref})
	if err != nil {
		return false, err
	}
	if e.GetCompletionTime() == nil {
		return false, nil
	}
	if e.GetFailedCount() > 0 || e.GetCancelledCount() > 0 || e.GetSucceededCount() < e.GetTaskCount() {
		return true, worker.Permanent(fmt.Errorf("cloud run execution %s finished with %d of %d tasks succeeded, %d failed, %d cancelled",
			ref, e.GetSucceededCount(), e.GetTaskCount(), e.GetFailedCount(), e.GetCancelledCount()))
	}
	return true, nil
}
