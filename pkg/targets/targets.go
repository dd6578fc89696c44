package targets

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/api/error_reason"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sethvargo/go-retry"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/worker"
)

// Options configure the targets New builds.
type Options struct {
	// ClientOptions are passed to every API client (after the endpoint's).
	ClientOptions []option.ClientOption
	// Backoff is the delay before the first retry of a run released by a start the API
	// denied on a quota, or whose outcome is unknown; it doubles with each attempt, up to
	// 30 minutes. Defaults to 10s.
	Backoff time.Duration
	// CallTimeout bounds one API call when the job sets no timeout. Defaults to 1m.
	CallTimeout time.Duration
	// LookupRetries is how many times an attempt retries a look-up of an uncertain start
	// that failed, with exponential backoff from a tenth of Backoff, before it releases
	// the run. Defaults to 4; negative: none.
	LookupRetries int
	// MaxUncertain bounds how long a start whose outcome is unknown may stay so because
	// its look-ups fail: once it has passed since the start was begun, a failed look-up
	// fails the run, for an operator to resolve (see worker.StartEffect). The run's
	// attempts may run out sooner, with the same error. Defaults to 1h.
	MaxUncertain time.Duration
}

func (o *Options) withDefaults() *Options {
	out := Options{}
	if o != nil {
		out = *o
	}
	out.Backoff = cmp.Or(out.Backoff, 10*time.Second)
	out.CallTimeout = cmp.Or(out.CallTimeout, time.Minute)
	out.LookupRetries = cmp.Or(out.LookupRetries, 4)
	out.MaxUncertain = cmp.Or(out.MaxUncertain, time.Hour)
	return &out
}

// Identity is the run's identity as a target receives it (the Workflows argument's
// "runonce" field; the Cloud Run and Cloud Build forms carry the same values).
type Identity struct {
	// IdempotencyKey is the run's key, stable across every attempt: deduplicate on it.
	IdempotencyKey string `json:"idempotency_key"`
	RunID          string `json:"run_id"`
	Job            string `json:"job"`
	// Attempt is the worker attempt that started the execution.
	Attempt int64 `json:"attempt"`
	// ScheduleTime is the scheduler's UTC schedule time (RFC 3339), empty for keyed runs.
	ScheduleTime string `json:"schedule_time,omitempty"`
}

func identity(ctx context.Context, j *worker.Job) Identity {
	id := Identity{IdempotencyKey: worker.IdempotencyKey(ctx), RunID: j.RunID, Job: j.Name, Attempt: j.Attempt}
	if !j.ScheduleTime.IsZero() {
		id.ScheduleTime = j.ScheduleTime.UTC().Format(time.RFC3339)
	}
	return id
}

// api is one kind's calls.
type api interface {
	// start starts an execution labelled (where the API allows) with the effect key and
	// returns its name.
	start(ctx context.Context, j *worker.Job, id Identity, effectKey string) (string, error)
	// find returns the executions carrying the start's key (the effect key, or for Cloud
	// Run and Cloud Build the run's key), in any order: none when the API proves there is
	// none; errNotProven when it found none and cannot prove there is none.
	find(ctx context.Context, effectKey string) ([]execution, error)
	// cancel cancels an execution.
	cancel(ctx context.Context, name string) error
	// describe says, for an operator, which execution find looks for.
	describe(ctx context.Context, effectKey string) string
	// poll reports whether the execution finished, and its failure (already mapped to the
	// run's fate) when it did not succeed.
	poll(ctx context.Context, ref string) (done bool, err error)
	io.Closer
}

// execution is one execution a look-up found.
type execution struct {
	name    string
	created time.Time
}

var errNotProven = errors.New("no execution carrying the run's key was found among the latest ones, and this API cannot prove that none was started")

// maxScan bounds the executions or builds a look-up without a server-side filter reads.
const maxScan = 500

// Target is a handler that starts a Google Cloud API execution once per run.
type Target struct {
	job  *jobs.Job
	api  api
	opts *Options
	// perm, readPerm and cancelPerm are the permissions and roles a start, a look-up or
	// poll, and a cancel need, for errors.
	perm, readPerm, cancelPerm string
}

// New returns the target of a jobs-file entry whose Kind is a Google Cloud API's, with
// clients on the API's endpoint (Application Default Credentials), the target's endpoint
// override, or a plaintext loopback endpoint ("http://127.0.0.1:PORT", no credentials:
// the local fakes of pkg/targets/targetstest). Close it to close its clients.
func New(ctx context.Context, j *jobs.Job, o *Options) (*Target, error) {
	if j.Target == nil {
		return nil, fmt.Errorf("targets: job %s has no Google Cloud API target (kind %q)", j.Name, j.Kind)
	}
	o = o.withDefaults()
	copts, err := clientOptions(j.Target)
	if err != nil {
		return nil, fmt.Errorf("targets: job %s: %w", j.Name, err)
	}
	copts = append(copts, o.ClientOptions...)
	t := &Target{job: j, opts: o}
	switch j.Kind {
	case jobs.KindWorkflows:
		t.api, err = newWorkflows(ctx, j.Target, copts)
		t.perm = "workflows.executions.create (roles/workflows.invoker)"
		t.readPerm = "workflows.executions.get and .list (roles/workflows.invoker)"
		t.cancelPerm = "workflows.executions.cancel (roles/workflows.invoker)"
	case jobs.KindCloudRun:
		t.api, err = newCloudRun(ctx, j.Target, copts)
		t.perm = "run.jobs.runWithOverrides (roles/run.jobsExecutorWithOverrides)"
		t.readPerm = "run.executions.get and .list (roles/run.viewer)"
		t.cancelPerm = "run.executions.cancel (roles/run.jobsExecutorWithOverrides)"
	case jobs.KindCloudBuild:
		t.api, err = newCloudBuild(ctx, j.Target, copts)
		t.perm = "cloudbuild.builds.create (roles/cloudbuild.builds.editor)"
		t.readPerm = "cloudbuild.builds.get and .list (roles/cloudbuild.builds.editor)"
		t.cancelPerm = "cloudbuild.builds.update (roles/cloudbuild.builds.editor)"
	default:
		return nil, fmt.Errorf("targets: job %s: kind %q is not a Google Cloud API target", j.Name, j.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("targets: job %s: %s client: %w", j.Name, j.Kind, err)
	}
	return t, nil
}

// clientOptions returns the options of the target's endpoint.
func clientOptions(t *jobs.Target) ([]option.ClientOption, error) {
	if t.Endpoint == "" {
		return nil, nil
	}
	hostport, plain := t.Plaintext()
	if !plain {
		return []option.ClientOption{option.WithEndpoint(hostport)}, nil
	}
	conn, err := grpc.NewClient(hostport, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", t.Endpoint, err)
	}
	return []option.ClientOption{option.WithGRPCConn(conn), option.WithoutAuthentication()}, nil
}

// Close closes the target's clients.
func (t *Target) Close() error { return t.api.Close() }

// HandleJob starts the run's execution once (see the package doc) and, with wait, follows
// it until it finishes.
func (t *Target) HandleJob(ctx context.Context, j *worker.Job) error {
	st, err := worker.StartEffect(ctx, worker.RunEffect, func(ctx context.Context, p *worker.PendingStart) (string, error) {
		if p.Prior != 0 {
			ref, err := t.lookUp(ctx, j, p)
			if err != nil || ref != "" {
				return ref, err
			}
		}
		return t.start(ctx, j, p)
	})
	if err != nil {
		return err
	}
	if !t.job.Target.Wait {
		return nil
	}
	return t.follow(ctx, j, st.Ref)
}

// logger is the job's logger, or slog.Default() outside a job.
func (t *Target) logger(ctx context.Context) *slog.Logger {
	if log := worker.Logger(ctx); log != nil {
		return log
	}
	return slog.Default()
}

// lookUp looks for the execution an earlier attempt's start made (p.Prior began it and
// its outcome is unknown) and returns its name, or "" when the API proves there is none.
// A look-up that fails is retried within the attempt, LookupRetries times with
// exponential backoff from a tenth of Backoff, unless its answer is one a retry cannot
// change (definitive). A start it cannot settle stays uncertain and is never started
// again: errNotProven fails the run at once; look-ups that keep failing release it with
// backoff, and fail it once MaxUncertain has passed since the start was begun (or when
// its attempts are exhausted). Both errors say what to look for; StartEffect adds how an
// operator resolves the start.
func (t *Target) lookUp(ctx context.Context, j *worker.Job, p *worker.PendingStart) (string, error) {
	log := t.logger(ctx)
	b := retry.WithMaxRetries(uint64(max(t.opts.LookupRetries, 0)),
		retry.WithCappedDuration(t.opts.Backoff, retry.WithJitterPercent(20, retry.NewExponential(max(t.opts.Backoff/10, time.Millisecond)))))
	tries := 0
	ref, err := retry.DoValue(ctx, b, func(ctx context.Context) (string, error) {
		tries++
		ref, err := t.call(ctx, func(ctx context.Context) (string, error) { return t.settle(ctx, p, "") })
		if err != nil && !errors.Is(err, errNotProven) && !definitive(status.Code(err)) && ctx.Err() == nil {
			log.WarnContext(ctx, "looking up the start failed; looking again", slog.Int("try", tries), slog.Any("error", err))
			return "", retry.RetryableError(err)
		}
		return ref, err
	})
	if err == nil {
		if ref != "" {
			log.InfoContext(ctx, "found the execution an earlier attempt started; not starting another", slog.String("effect_ref", ref), slog.Int64("begun_by", p.Prior))
		}
		return ref, nil
	}
	res := t.job.Target.Resource
	what := fmt.Sprintf("%s %s: attempt %d began the start and did not record its outcome", t.job.Kind, res, p.Prior)
	look := t.api.describe(ctx, p.Key)
	uncertain := &worker.UncertainEffectError{Name: p.Name, Key: p.Key, Attempt: p.Prior}
	switch {
	case errors.Is(err, errNotProven):
		return "", worker.Permanent(fmt.Errorf("%s, and %s; not started again (at most once): look for %s: %w", what, errNotProven, look, uncertain))
	case ctx.Err() != nil:
		return "", fmt.Errorf("%s; looking it up stopped: %w", what, err) // shutdown or lease lost
	}
	e := fmt.Errorf("%s, and looking it up failed (%d tries; last: %w)", what, tries, err)
	if status.Code(err) == codes.PermissionDenied {
		e = fmt.Errorf("%w: the worker's service account lacks %s on %s", e, t.readPerm, res)
	}
	if since := time.Since(p.BegunAt); since >= t.opts.MaxUncertain {
		return "", worker.Permanent(fmt.Errorf("%w; not started again: its outcome has been unknown for %s (the bound is %s): look for %s: %w",
			e, since.Round(time.Second), t.opts.MaxUncertain, look, uncertain))
	}
	return "", worker.RetryAfter(t.backoff(j), fmt.Errorf("%w; not started again while its outcome is unknown: the next attempt looks again, and %s after the start the run fails: look for %s: %w",
		e, t.opts.MaxUncertain, look, uncertain))
}

// start starts the execution, within the narrowest window the APIs allow (none takes a
// request ID). The fence is confirmed with the ledger immediately before the call, so an
// attempt taken over meanwhile (a lease that ran out while it was paused, an operator's
// release) does not start. The call is not abandoned when the job's context ends, so its
// answer is known. After any answer but a refusal, the executions carrying the key are
// listed (settle): the oldest is the one the run follows, and newer ones, starts that
// raced it, are cancelled; an answer lost behind an error is settled so too when the
// listing shows the execution.
func (t *Target) start(ctx context.Context, j *worker.Job, p *worker.PendingStart) (string, error) {
	log := t.logger(ctx)
	if err := worker.ConfirmFence(ctx); err != nil {
		if errors.Is(err, ledger.ErrLeaseLost) || ctx.Err() != nil {
			return "", err
		}
		return "", worker.NotStarted(worker.RetryAfter(t.backoff(j), fmt.Errorf("%s %s: not started: %w", t.job.Kind, t.job.Target.Resource, err)))
	}
	detached := context.WithoutCancel(ctx)
	ref, err := t.call(detached, func(ctx context.Context) (string, error) { return t.api.start(ctx, j, identity(ctx, j), p.Key) })
	if err != nil && refused(err) {
		return "", t.startError(ctx, j, err)
	}
	if err == nil {
		log.InfoContext(ctx, "execution started", slog.String("kind", t.job.Kind), slog.String("effect_ref", ref))
	}
	oldest, serr := t.call(detached, func(ctx context.Context) (string, error) { return t.settle(ctx, p, ref) })
	switch {
	case serr != nil:
		log.WarnContext(ctx, "listing the executions carrying the key after the start failed", slog.Any("error", serr))
	case oldest != "" && err != nil:
		log.InfoContext(ctx, "the start's answer was lost and its execution is listed: following it", slog.String("effect_ref", oldest), slog.Any("answer", err))
		ref, err = oldest, nil
	case oldest != ref:
		log.WarnContext(ctx, "an older execution carries the key: following it", slog.String("effect_ref", oldest), slog.String("started", ref))
		ref = oldest
	}
	if err != nil {
		return "", t.startError(ctx, j, err)
	}
	return ref, nil
}

// settle lists the executions carrying the start's key and returns the oldest ("" when
// none): the one the run follows. Newer ones are starts that raced it (a fenced attempt's
// call that landed late, or one sent after another attempt's look-up): they are
// cancelled. Every attempt that lists keeps the oldest, so two attempts that both settle
// agree on it. own, when set, is the execution this attempt just started: the listing may
// not show it yet, and then it counts as the newest; when own names an operation (the
// answer named no execution) and the listing shows an execution, the run follows that. An execution whose creation time the
// API does not give (a Workflows execution still queued has no start time) counts as
// newer than every one that has it; ties go by name.
func (t *Target) settle(ctx context.Context, p *worker.PendingStart, own string) (string, error) {
	execs, err := t.api.find(ctx, p.Key)
	if err != nil {
		return "", err
	}
	// An operation's name (an answer that named no execution) is no execution to cancel.
	if own != "" && !strings.Contains(own, "/operations/") && !slices.ContainsFunc(execs, func(e execution) bool { return e.name == own }) {
		execs = append(execs, execution{name: own})
	}
	if len(execs) == 0 {
		return "", nil
	}
	slices.SortStableFunc(execs, func(a, b execution) int {
		if a.created.IsZero() != b.created.IsZero() {
			return cmp.Compare(btoi(a.created.IsZero()), btoi(b.created.IsZero()))
		}
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.name, b.name))
	})
	log := t.logger(ctx)
	for _, e := range execs[1:] {
		err := t.api.cancel(ctx, e.name)
		switch status.Code(err) {
		case codes.OK:
			log.WarnContext(ctx, "cancelled a second execution carrying the run's key; the run follows the oldest",
				slog.String("cancelled", e.name), slog.String("effect_ref", execs[0].name))
		case codes.FailedPrecondition: // it has ended already
		default:
			log.ErrorContext(ctx, "a second execution carries the run's key and could not be cancelled: cancel it by hand; the run follows the oldest",
				slog.String("execution", e.name), slog.String("effect_ref", execs[0].name), slog.String("permission", t.cancelPerm), slog.Any("error", err))
		}
	}
	return execs[0].name, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// definitive reports whether a look-up's answer is one a retry within the attempt
// cannot change.
func definitive(c codes.Code) bool {
	switch c {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented:
		return true
	}
	return false
}

// call runs one API call under the call timeout.
func (t *Target) call(ctx context.Context, fn func(context.Context) (string, error)) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(t.job.Timeout, t.opts.CallTimeout))
	defer cancel()
	return fn(ctx)
}

// follow polls the execution until it finishes; transient poll errors are retried within
// the job's context (the worker holds the run's lease meanwhile).
func (t *Target) follow(ctx context.Context, j *worker.Job, ref string) error {
	every := t.job.Target.PollInterval
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %s: stopped following %s: %w", t.job.Kind, t.job.Target.Resource, ref, context.Cause(ctx))
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, cmp.Or(t.job.Timeout, t.opts.CallTimeout))
		done, err := t.api.poll(pctx, ref)
		cancel()
		switch {
		case err != nil && (errors.Is(err, worker.ErrPermanent) || isRetryAfter(err)):
			return err
		case err != nil && retryableCode(status.Code(err)):
			if l := worker.Logger(ctx); l != nil {
				l.WarnContext(ctx, "polling the execution failed; polling again", slog.String("effect_ref", ref), slog.Any("error", err))
			}
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("%s: stopped following %s: %w", t.job.Kind, ref, context.Cause(ctx))
		case err != nil:
			return t.apiError(ctx, "poll "+ref, j, err)
		case done:
			return nil
		}
		tick.Reset(every)
	}
}

func isRetryAfter(err error) bool {
	var ra *worker.RetryAfterError
	return errors.As(err, &ra)
}

func retryableCode(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.ResourceExhausted || c == codes.DeadlineExceeded || c == codes.Internal || c == codes.Aborted
}

// refused reports whether a start's error proves the API refused the call before it
// reached the service, so that nothing was started. Only answers a service gives before
// it acts prove that: PERMISSION_DENIED, UNAUTHENTICATED, INVALID_ARGUMENT, NOT_FOUND
// (the workflow, job or trigger), FAILED_PRECONDITION and OUT_OF_RANGE, which gRPC's
// libraries never generate after a call was processed, and a RESOURCE_EXHAUSTED that
// Service Infrastructure's quota check denied (quotaDenied). Every other answer —
// UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, ABORTED, CANCELLED, any other
// RESOURCE_EXHAUSTED, a transport error, no answer — may come after the service
// started the execution.
func refused(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange:
		return true
	case codes.ResourceExhausted:
		return quotaDenied(st)
	}
	return false
}

// quotaDenied reports whether a RESOURCE_EXHAUSTED is a quota denial of Google's API
// front end: it carries a google.rpc.ErrorInfo of the googleapis.com domain, which is
// reserved for Service Infrastructure, with reason RATE_LIMIT_EXCEEDED or
// RESOURCE_QUOTA_EXCEEDED ("the request is denied because there is not enough rate
// quota", google/api/error_reason.proto), and Service Control's quota check is made
// "before the operation is executed" (services.check, services.allocateQuota). A
// RESOURCE_EXHAUSTED without it is no proof: gRPC's libraries answer it on both sides
// for a message over the size limit, including a response, which the server sent
// after processing the call.
func quotaDenied(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "googleapis.com" &&
			(info.GetReason() == error_reason.ErrorReason_RATE_LIMIT_EXCEEDED.String() ||
				info.GetReason() == error_reason.ErrorReason_RESOURCE_QUOTA_EXCEEDED.String()) {
			return true
		}
	}
	return false
}

// backoff is the delay before the retry of a run released at attempt j.Attempt.
func (t *Target) backoff(j *worker.Job) time.Duration {
	return min(t.opts.Backoff<<min(max(j.Attempt-1, 0), 32), 30*time.Minute)
}

// startError maps a start's error to the run's fate:
//   - a quota denial (quotaDenied): nothing started; the try is recorded as not started
//     (worker.NotStarted) and the run released with exponential backoff.
//   - PERMISSION_DENIED, UNAUTHENTICATED and the other answers refused proves: nothing
//     started; the try is recorded as not started and the run fails, naming the
//     permission and role the worker's service account lacks for a denial.
//   - every other answer (refused does not prove a refusal): the start may have
//     happened; it stays begun, the run is released with the same backoff, and the next
//     attempt looks it up before any new start.
func (t *Target) startError(ctx context.Context, j *worker.Job, err error) error {
	if errors.Is(err, worker.ErrPermanent) {
		return err
	}
	e := fmt.Errorf("%s %s: start: %w", t.job.Kind, t.job.Target.Resource, err)
	if !refused(err) {
		if ctx.Err() != nil {
			return e // shutdown or lease lost: the worker releases the run
		}
		return worker.RetryAfter(t.backoff(j), fmt.Errorf("%w (it may have started: the next attempt looks it up before starting again; retried with backoff)", e))
	}
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return worker.NotStarted(worker.RetryAfter(t.backoff(j), fmt.Errorf("%w (a quota denial: not started; retried with backoff)", e)))
	case codes.PermissionDenied:
		return worker.NotStarted(worker.Permanent(fmt.Errorf("%w: the worker's service account lacks %s on %s", e, t.perm, t.job.Target.Resource)))
	case codes.Unauthenticated:
		return worker.NotStarted(worker.Permanent(fmt.Errorf("%w: the worker's Application Default Credentials were refused", e)))
	}
	return worker.NotStarted(worker.Permanent(e))
}

// apiError maps the error of a look-up or a poll to the run's fate (nothing is started
// by either): PERMISSION_DENIED fails the run, naming the permission and role the
// worker's service account lacks; the transient answers (retryableCode) release it with
// exponential backoff; any other answer fails it.
func (t *Target) apiError(ctx context.Context, what string, j *worker.Job, err error) error {
	if errors.Is(err, worker.ErrPermanent) {
		return err
	}
	res := t.job.Target.Resource
	e := fmt.Errorf("%s %s: %s: %w", t.job.Kind, res, what, err)
	if ctx.Err() != nil {
		return e // shutdown or lease lost: the worker releases the run
	}
	switch c := status.Code(err); {
	case c == codes.PermissionDenied:
		return worker.Permanent(fmt.Errorf("%w: the worker's service account lacks %s on %s", e, t.readPerm, res))
	case retryableCode(c) || c == codes.Unknown || c == codes.Canceled:
		return worker.RetryAfter(t.backoff(j), fmt.Errorf("%w (retried with backoff)", e))
	}
	return worker.Permanent(e)
}

// HandleJobs registers a Target on mux, with the job's max_attempts, for each job of js
// whose kind is a Google Cloud API's and that mux has no handler for yet (worker.MuxFromJobs
// does the same for HTTP targets; call HandleJobs first). It returns a function that
// closes the targets' clients.
func HandleJobs(ctx context.Context, mux *worker.Mux, js map[string]*jobs.Job, o *Options) (func(), error) {
	have := map[string]bool{}
	for _, name := range mux.Jobs() {
		have[name] = true
	}
	var opened []*Target
	closeAll := func() {
		for _, t := range opened {
			t.Close()
		}
	}
	for _, name := range jobs.Names(js) {
		j := js[name]
		if j.Target == nil || have[name] {
			continue
		}
		t, err := New(ctx, j, o)
		if err != nil {
			closeAll()
			return nil, err
		}
		opened = append(opened, t)
		mux.HandleWith(name, t, &worker.HandleOptions{MaxAttempts: j.MaxAttempts, MaxRunTime: maxRunTime(j)})
	}
	return closeAll, nil
}

// MaxWait bounds how long a run follows an execution it waits for (Target.Wait), as
// the worker's maximum run time of the job; a start without waiting is bounded by the
// job's timeout.
const MaxWait = 7 * 24 * time.Hour

func maxRunTime(j *jobs.Job) time.Duration {
	if j.Target != nil && j.Target.Wait {
		return MaxWait
	}
	if j.Timeout > 0 {
		return j.Timeout + time.Minute
	}
	return 0
}
