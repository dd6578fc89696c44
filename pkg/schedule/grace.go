package schedule

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Retry is a Cloud Scheduler job's retry settings (RetryConfig) and attempt deadline:
// how long after a tick its deliveries may still arrive.
type Retry struct {
	// Count is retry_count: retries of a failed attempt (0 to 5; 0: none).
	Count int
	// MaxRetryDuration is max_retry_duration: retries go on, counted from the first
	// attempt, until both it and Count are reached; zero: no limit of its own.
	MaxRetryDuration time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry (min_backoff_duration,
	// max_backoff_duration).
	MinBackoff, MaxBackoff time.Duration
	// MaxDoublings is max_doublings: the wait doubles this many times, then grows
	// linearly, up to MaxBackoff.
	MaxDoublings int
	// AttemptDeadline is attempt_deadline: how long one attempt may take.
	AttemptDeadline time.Duration
}

// DefaultRetry is what a Cloud Scheduler HTTP job has when it sets no retry settings:
// no retries (min backoff 5 s, max backoff 1 h, 5 doublings) and a 3-minute attempt
// deadline (google.cloud.scheduler.v1.RetryConfig and Job.attempt_deadline).
var DefaultRetry = Retry{MinBackoff: 5 * time.Second, MaxBackoff: time.Hour, MaxDoublings: 5, AttemptDeadline: 3 * time.Minute}

// DispatchSlack is added to every grace for the scheduler's own dispatch delay and the
// clocks' skew.
const DispatchSlack = time.Minute

// Backoff returns the wait before the n-th retry (n from 1): MinBackoff, doubled
// MaxDoublings times, then growing by the last doubled wait, at most MaxBackoff. With
// 10 s, 300 s and 3 doublings: 10 s, 20 s, 40 s, 80 s, 160 s, 240 s, 300 s (RetryConfig's
// own example).
func (r Retry) Backoff(n int) time.Duration {
	if n < 1 || r.MinBackoff <= 0 {
		return 0
	}
	d := r.MinBackoff
	doublings := min(n-1, max(r.MaxDoublings, 0))
	for range doublings {
		d *= 2
		if r.MaxBackoff > 0 && d >= r.MaxBackoff {
			return r.MaxBackoff
		}
	}
	d += time.Duration(n-1-doublings) * d
	if r.MaxBackoff > 0 && d > r.MaxBackoff {
		return r.MaxBackoff
	}
	return d
}

// Window returns how long after a tick its last delivery may still start, the next
// tick being interval after it:
//
//   - the first attempt starts within AttemptDeadline of the tick (Cloud Scheduler never
//     has two executions outstanding, and the previous one's retries stop at this tick,
//     so at most its last attempt is still running);
//   - retries follow for at most Count retries, each after its attempt's deadline and
//     its backoff, or MaxRetryDuration when longer (both limits must be reached), and
//     never past the next tick ("until the next scheduled execution time, whichever
//     comes first"); no retries when Count is 0;
//   - plus DispatchSlack.
//
// An interval of zero or less means no next tick is known: no cap.
func (r Retry) Window(interval time.Duration) time.Duration {
	var retries time.Duration
	if r.Count > 0 {
		for n := 1; n <= r.Count; n++ {
			retries += r.AttemptDeadline + r.Backoff(n)
		}
		retries = max(retries, r.MaxRetryDuration)
		if interval > 0 {
			retries = min(retries, interval)
		}
	}
	return r.AttemptDeadline + retries + DispatchSlack
}

// Grace is how long after a tick a run of it may still arrive before the tick counts as
// missing.
type Grace struct {
	// After, when positive, is the grace (a job's missed_after).
	After time.Duration
	// Retry, used when After is zero, is the retry settings of the scheduler that sends
	// the ticks: its Window (Cloud Scheduler's job for scheduler_job, DefaultRetry for a
	// schedule given in the jobs file).
	Retry Retry
}

// For returns the grace of the tick at t, whose next tick is next (zero if none).
func (g Grace) For(t, next time.Time) time.Duration {
	if g.After > 0 {
		return g.After
	}
	var interval time.Duration
	if !next.IsZero() {
		interval = next.Sub(t)
	}
	return g.Retry.Window(interval)
}

var schedulerJobPattern = regexp.MustCompile(`^projects/([A-Za-z0-9:.-]+)/locations/([A-Za-z0-9-]+)/jobs/([A-Za-z0-9_-]{1,500})$`)

// SchedulerJobForm is the form of a Cloud Scheduler job's name.
const SchedulerJobForm = "projects/PROJECT/locations/LOCATION/jobs/JOB"

// ValidSchedulerJob checks a Cloud Scheduler job's full name: SchedulerJobForm, with the
// characters Cloud Scheduler allows in each part.
func ValidSchedulerJob(name string) error {
	if !schedulerJobPattern.MatchString(name) {
		return fmt.Errorf("%q is not a Cloud Scheduler job's name: want %s (JOB: letters, digits, '-' and '_', at most 500)", name, SchedulerJobForm)
	}
	return nil
}

// SchedulerJobID is the last part of a Cloud Scheduler job's name, JOB: what the
// scheduler sends as X-CloudScheduler-JobName, and so the key of the runs of its ticks.
func SchedulerJobID(name string) string {
	return name[strings.LastIndexByte(name, '/')+1:]
}
