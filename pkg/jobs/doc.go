// Package jobs reads the jobs file: the JSON file that names the jobs a deployment runs
// (-jobs). The ingress uses only the names (a job the file does not name gets 404); the
// worker calls each job's URL when no Go handler is registered for it, or, for a job of a
// Google Cloud API kind (KindWorkflows, KindCloudRun, KindCloudBuild; see Target and
// package targets), starts an execution of the resource it names.
//
// # Format
//
//	{
//	  "jobs": {
//	    "send-invoices": {
//	      "url": "https://billing.internal/run-invoices",
//	      "method": "POST",
//	      "timeout": "25m",
//	      "headers": {"X-Team": "billing"},
//	      "auth": "none",
//	      "max_attempts": 5
//	    },
//	    "nightly-etl": {
//	      "kind": "workflows",
//	      "resource": "projects/p/locations/us-central1/workflows/etl",
//	      "wait": true,
//	      "poll_interval": "10s"
//	    },
//	    "mine": {},
//	    "hourly-sync": {"schedule": "0 * * * *", "time_zone": "Europe/Berlin", "missed_after": "20m"},
//	    "billing": {"url": "https://billing.internal/run", "scheduler_job": "projects/p/locations/europe-west1/jobs/billing"}
//	  }
//	}
//
// A job with no url ("mine": {}, or only max_attempts) has no target: a Go handler
// registered in some worker runs it, and the ingress only needs its name.
//
// # Schedules
//
// Any job may say when its ticks are due, so that runonce knows which ticks to expect:
// schedule (Cloud Scheduler's unix-cron, package schedule) with time_zone (an IANA name;
// UTC when absent), or scheduler_job, the Cloud Scheduler job whose schedule, time zone,
// state and retry settings runonce reads (package schedule/cloudscheduler); never both.
// catch_up (with schedule only; default none) is how far back runonce's own scheduler
// fires the ticks it missed while down. missed_after is how long after a tick its run may
// still arrive before the tick is missed; by default the scheduler's retry window
// (schedule.Retry.Window): the Cloud Scheduler job's settings for scheduler_job, Cloud
// Scheduler's defaults (no retries, a 3-minute attempt deadline: 4 minutes) for
// schedule.
//
// # Guarantees
//
// Load and Parse return either every job, validated, or an error naming the file, the
// job and the field at fault: unknown fields, a job name ValidName refuses, a URL that is
// not absolute http(s), an unknown method or auth, a timeout that is not a positive Go
// duration ("25m"; "1d" is not Go), a negative max_attempts, or a header the worker sets
// itself; for a Google Cloud API kind, a resource not of its API's form, an HTTP field, a
// field of another kind, or a plaintext endpoint off loopback; a schedule or time zone
// Cloud Scheduler would not take (naming the field and the problem), schedule with
// scheduler_job, time_zone or catch_up without schedule, missed_after without either, a
// scheduler_job not of the form projects/P/locations/L/jobs/J, or a catch_up or
// missed_after that is not a positive Go duration.
package jobs
