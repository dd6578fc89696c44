package targets

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	cloudbuild "cloud.google.com/go/cloudbuild/apiv1/v2"
	"cloud.google.com/go/cloudbuild/apiv1/v2/cloudbuildpb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/worker"
)

// The substitutions a Cloud Build trigger's build receives.
const (
	SubstIdempotencyKey = "_IDEMPOTENCY_KEY"
	SubstRunID          = "_RUNONCE_RUN_ID"
	SubstJob            = "_RUNONCE_JOB"
	SubstAttempt        = "_RUNONCE_ATTEMPT"
	SubstScheduleTime   = "_RUNONCE_SCHEDULE_TIME"
)

// cloudBuild runs a build trigger. triggers.run sets no tags on the build (they come
// from the trigger's config) and builds cannot be filtered by substitution: an earlier
// start whose outcome was not recorded is looked for among the trigger's latest builds by
// their SubstIdempotencyKey substitution, and when none is found the start is not
// repeated (at most once).
type cloudBuild struct {
	c                  *cloudbuild.Client
	name               string
	project, triggerID string
	branch             string
}

func newCloudBuild(ctx context.Context, t *jobs.Target, opts []option.ClientOption) (*cloudBuild, error) {
	c, err := cloudbuild.NewClient(ctx, opts...)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(t.Resource, "/") // projects/P/locations/L/triggers/T
	return &cloudBuild{c: c, name: t.Resource, project: parts[1], triggerID: parts[5], branch: t.Branch}, nil
}

func (b *cloudBuild) Close() error { return b.c.Close() }

// CloudBuildSubstitutions returns the substitutions of a run.
func CloudBuildSubstitutions(id Identity) map[string]string {
	s := map[string]string{
		SubstIdempotencyKey: id.IdempotencyKey, SubstRunID: id.RunID, SubstJob: id.Job,
		SubstAttempt: strconv.FormatInt(id.Attempt, 10),
	}
	if id.ScheduleTime != "" {
		s[SubstScheduleTime] = id.ScheduleTime
	}
	return s
}

func (b *cloudBuild) start(ctx context.Context, _ *worker.Job, id Identity, _ string) (string, error) {
	src := &cloudbuildpb.RepoSource{ProjectId: b.project, Substitutions: CloudBuildSubstitutions(id)}
	if b.branch != "" {
		src.Revision = &cloudbuildpb.RepoSource_BranchName{BranchName: b.branch}
	}
	op, err := b.c.RunBuildTrigger(ctx, &cloudbuildpb.RunBuildTriggerRequest{
		Name: b.name, ProjectId: b.project, TriggerId: b.triggerID, Source: src,
	})
	if err != nil {
		return "", err
	}
	md, err := op.Metadata()
	if err != nil || md.GetBuild().GetId() == "" {
		return op.Name(), nil
	}
	return b.buildName(md.GetBuild()), nil
}

// find looks among the trigger's latest maxScan builds (newest first) for those whose
// substitutions carry the run's key; errNotProven when it finds none.
func (b *cloudBuild) find(ctx context.Context, _ string) ([]execution, error) {
	key := worker.IdempotencyKey(ctx)
	it := b.c.ListBuilds(ctx, &cloudbuildpb.ListBuildsRequest{
		Parent: fmt.Sprintf("projects/%s/locations/%s", b.project, b.location()), ProjectId: b.project,
		Filter: fmt.Sprintf("trigger_id=%q", b.triggerID), PageSize: 100,
	}, gax.WithRetry(nil)) // the target retries a failed look-up itself
	var out []execution
	for range maxScan {
		bl, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, err
		}
		if bl.GetSubstitutions()[SubstIdempotencyKey] == key {
			out = append(out, execution{name: b.buildName(bl), created: bl.GetCreateTime().AsTime()})
		}
	}
	if len(out) == 0 {
		return nil, errNotProven
	}
	return out, nil
}

// location is the trigger's location.
func (b *cloudBuild) location() string { return strings.Split(b.name, "/")[3] }

// buildName is a build's full name, projects/P/locations/L/builds/ID.
func (b *cloudBuild) buildName(bl *cloudbuildpb.Build) string {
	if n := bl.GetName(); n != "" {
		return n
	}
	return fmt.Sprintf("projects/%s/locations/%s/builds/%s", b.project, b.location(), bl.GetId())
}

// cancel cancels a build (builds.cancel).
func (b *cloudBuild) cancel(ctx context.Context, name string) error {
	parts := strings.Split(name, "/") // projects/P/locations/L/builds/ID
	if len(parts) != 6 || parts[4] != "builds" {
		return fmt.Errorf("%s is not a build name", name)
	}
	_, err := b.c.CancelBuild(ctx, &cloudbuildpb.CancelBuildRequest{Name: name, ProjectId: parts[1], Id: parts[5]})
	return err
}

func (b *cloudBuild) describe(ctx context.Context, _ string) string {
	return fmt.Sprintf("a build of trigger %s with substitution %s=%s", b.name, SubstIdempotencyKey, worker.IdempotencyKey(ctx))
}

// poll maps the build's status: SUCCESS completes the run; FAILURE, INTERNAL_ERROR,
// TIMEOUT, CANCELLED and EXPIRED fail it.
func (b *cloudBuild) poll(ctx context.Context, ref string) (bool, error) {
	parts := strings.Split(ref, "/") // projects/P/locations/L/builds/ID
	if len(parts) != 6 || parts[4] != "builds" {
		return true, worker.Permanent(fmt.Errorf("cloud build: %s is not a build name; cannot follow it", ref))
	}
	bl, err := b.c.GetBuild(ctx, &cloudbuildpb.GetBuildRequest{Name: ref, ProjectId: parts[1], Id: parts[5]})
	if err != nil {
		return false, err
	}
	switch bl.GetStatus() {
	case cloudbuildpb.Build_SUCCESS:
		return true, nil
	case cloudbuildpb.Build_FAILURE, cloudbuildpb.Build_TIMEOUT, cloudbuildpb.Build_CANCELLED, cloudbuildpb.Build_EXPIRED, cloudbuildpb.Build_INTERNAL_ERROR:
		return true, worker.Permanent(fmt.Errorf("cloud build %s ended %s: %s", ref, bl.GetStatus(), bl.GetStatusDetail()))
	}
	return false, nil
}
