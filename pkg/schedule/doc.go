// Package schedule knows a job's schedule: the ticks a unix-cron expression in a time
// zone produces, as Cloud Scheduler evaluates it, the grace after which a tick with no
// run is missed (from the scheduler's retry settings), and the accounting of expected
// ticks against the runs that exist (Account), which the tick audit and the missed-tick
// alerts build on. It is pure: reading a job from Cloud Scheduler's API is package
// cloudscheduler's.
//
// # The dialect
//
// Parse takes what Cloud Scheduler's unix-cron takes [1]: five fields, minute (0-59),
// hour (0-23), day of month (1-31), month (1-12 or JAN-DEC) and day of week (0-6 or
// SUN-SAT, and 7 for Sunday); "*", lists "a,b", ranges "a-b", steps "*/n" and "a-b/n",
// names in any case. It refuses what Cloud Scheduler does not document: seconds (six
// fields), descriptors (@daily, @every 1h), L, W, #, ?, a CRON_TZ= prefix (the zone is its
// own field, Job.time_zone [2]), and Cloud Scheduler's English-like alternative format
// ("every 5 minutes"), which runonce does not evaluate. When both day fields are
// restricted, a day matches if either does (inclusive OR) [1]; a field that starts with
// "*" counts as unrestricted, "*/2" included, as in vixie cron's crontab(5) ("if both
// fields are restricted (i.e., don't start with *)") [3]. A schedule that never fires
// ("0 0 31 2 *") is refused.
//
// Parsing and the search for the next tick are robfig/cron v3's, adapted: it takes 7 for
// Sunday only as rewritten to 0, counts "*/2" as restricted (Parse marks it unrestricted),
// and its own Next goes wrong across some offset changes (Next asks it only within one
// span of constant offset; see Schedule.Next).
//
// # Time zones and the days the clocks change
//
// The zone is a tz database name ("" and "utc" in any case are UTC, Cloud Scheduler's
// default [2]). A tick is an instant, to the minute, at which the zone's wall clock reads
// a time the expression matches; Tick.Time is that instant in UTC, what Cloud Scheduler
// sends as X-CloudScheduler-ScheduleTime ("the job schedule time in RFC3339 UTC 'Zulu'
// format" [4]) and what a run of the tick is keyed by. So:
//
//   - A wall time the clocks skip (spring forward) has no tick that day: "30 2 * * *" in
//     America/New_York has none on 2026-03-08. Hourly and "*/15" schedules carry on along
//     UTC (23 hourly ticks that day).
//   - A wall time the clocks repeat (fall back) has two ticks, Tick.DST DSTFirst and
//     DSTSecond: "30 1 * * *" in America/New_York fires at 05:30Z and 06:30Z on
//     2026-11-01 (25 hourly ticks that day).
//
// Cloud Scheduler says only that it "runs on wall clock time", that a job scheduled at a
// time that occurs twice "may observe execution anomalies", and that UTC avoids them [1].
// Its exact choice is undocumented, so runonce expects as little as it can be sure of: no
// tick in a gap (a delivery there is a run for no expected tick, listed, never an alert),
// and both occurrences of a repeated time, of which Account counts one as covered by the
// other (StatusCovered), so that a scheduler firing such a time once raises no alert either.
//
// # Missed ticks
//
// Account gives every expected tick of a window a status: its run's (queued, running,
// waiting, completed, failed, skipped, cancelled) or, without one, upcoming (not due),
// pending (within its grace), paused (the scheduler job was paused at it), covered (see
// above) or missing. The grace is the job's missed_after, or the retry window of the
// scheduler that sends the ticks (Retry.Window): the first attempt starts within one
// attempt deadline of the tick (Cloud Scheduler never has two executions outstanding
// [2]), retries follow for retry_count backoffs or max_retry_duration, never past the
// next tick [2], plus DispatchSlack. Runs that match no expected tick (a changed
// schedule, a forced or manual run) are listed apart, with the reason.
//
// # Sources
//
//	[1] Cloud Scheduler, "Cron job format and time zone",
//	    https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules
//	[2] google.cloud.scheduler.v1.Job (schedule, time_zone, retry_config,
//	    attempt_deadline), cloud.google.com/go/scheduler/apiv1/schedulerpb
//	[3] crontab(5) of vixie cron and cronie; https://blog.healthchecks.io/2022/09/schedule-cron-job-the-funky-way
//	[4] Firebase, scheduler.ScheduledEvent.scheduleTime, "Populated via the
//	    X-CloudScheduler-ScheduleTime header",
//	    https://firebase.google.com/docs/reference/functions/2nd-gen/node/firebase-functions.scheduler.scheduledevent
package schedule
