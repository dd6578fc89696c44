package jobs

import (
	"errors"
	"fmt"
	"time"

	"github.com/runonce/runonce/pkg/schedule"
)

// scheduleJSON holds the jobs file's fields of a job's schedule.
type scheduleJSON struct {
	Schedule     string `json:"schedule"`
	TimeZone     string `json:"time_zone"`
	SchedulerJob string `json:"scheduler_job"`
	CatchUp      string `json:"catch_up"`
	MissedAfter  string `json:"missed_after"`
}

// apply validates the schedule fields and sets them on j.
func (in *scheduleJSON) apply(j *Job) error {
	switch {
	case in.Schedule != "" && in.SchedulerJob != "":
		return errors.New("schedule and scheduler_job are both set: give the schedule (with time_zone), or the Cloud Scheduler job runonce reads it from, not both")
	case in.TimeZone != "" && in.Schedule == "":
		if in.SchedulerJob != "" {
			return errors.New("time_zone is set with scheduler_job: runonce reads the time zone from the Cloud Scheduler job")
		}
		return errors.New("time_zone is set without schedule: it is the zone the schedule is read in")
	case in.CatchUp != "" && in.Schedule == "":
		return errors.New("catch_up is set without schedule: it is how far back runonce's own scheduler (-schedule) fires missed ticks, and Cloud Scheduler has no catch-up")
	case in.MissedAfter != "" && in.Schedule == "" && in.SchedulerJob == "":
		return errors.New("missed_after is set without schedule or scheduler_job: a job without a schedule has no ticks to miss")
	}
	if in.Schedule != "" {
		s, err := schedule.Parse(in.Schedule, in.TimeZone)
		if err != nil {
			return err // names the field: schedule "…": … or time_zone "…": …
		}
		j.Schedule = s
	}
	if in.SchedulerJob != "" {
		if err := schedule.ValidSchedulerJob(in.SchedulerJob); err != nil {
			return fmt.Errorf("scheduler_job %w", err)
		}
		j.SchedulerJob = in.SchedulerJob
	}
	for field, p := range map[string]struct {
		v   string
		dst *time.Duration
	}{"catch_up": {in.CatchUp, &j.CatchUp}, "missed_after": {in.MissedAfter, &j.MissedAfter}} {
		if p.v == "" {
			continue
		}
		d, err := time.ParseDuration(p.v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s %q is not a positive Go duration (e.g. \"90m\"; write days as hours: \"48h\")", field, p.v)
		}
		*p.dst = d
	}
	return nil
}
