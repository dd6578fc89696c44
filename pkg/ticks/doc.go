// Package ticks puts a job's expected ticks (package schedule) beside its runs in the
// ledger: the tick audit (Reader.Audit), the missed-tick alerts (Checker) and runonce's
// own scheduler (Scheduler). A Book holds the jobs file's schedules, and the Cloud
// Scheduler readings of its scheduler_job jobs.
//
// # Reading a tick's run, without an index of its own
//
// The run of a tick has a known ID: ledger.ScheduledRunID over the namespace, the job,
// the scheduler job name that X-CloudScheduler-JobName carries (Spec.SchedulerJob: the
// Cloud Scheduler job's ID, or the job's own name for a schedule of the jobs file) and
// the tick's UTC time. The audit reads each expected tick's run by that ID (one Get
// each, at most Reader.Parallel at once) and finds the runs that arrived for no expected
// tick (a changed schedule, a forced or manual run, another scheduler job) through
// ledger.List: the job's runs created in the page's span, which every backend serves
// from an index (docs/design.md, "The tick audit"). Nothing is written: the ingress's
// claim stays as it is.
//
// # Missed ticks
//
// A Checker passes over every scheduled job every minute. A tick whose grace ran out
// since the previous pass and that has no run (schedule.StatusMissing: not paused, not
// covered by its twin of a repeated wall time) is counted in the runonce.job.ticks.missed
// counter (attribute job) and logged at ERROR once, with the backfill command that
// claims it. A checker counts only the ticks whose grace ran out while it ran: each
// process running one counts a missed tick at most once, and a restarted one counts
// nothing twice. Ticks before a Cloud Scheduler job's last update (Spec.Since) are not
// checked: its schedule may have been another then.
//
// # runonce's own scheduler
//
// Where there is no Cloud Scheduler, a Scheduler fires each tick of the jobs file's
// schedules at its time through a FireFunc, which claims it under the run ID Cloud
// Scheduler's delivery of it would have. Replicas firing the same tick make one run; the
// others are duplicates. A tick found late by more than the job's catch_up (at least
// MinLateness) is skipped, as Cloud Scheduler skips the ticks of its downtime.
package ticks
