package jobs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/jobs"
	"github.com/runonce/runonce/pkg/schedule"
)

func TestParseSchedules(t *testing.T) {
	t.Parallel()
	m, err := jobs.Parse(strings.NewReader(`{"jobs": {
		"nightly": {"url": "https://x/run", "schedule": "30 2 * * *", "time_zone": "Europe/Berlin", "catch_up": "6h", "missed_after": "45m"},
		"utc": {"schedule": "*/15 * * * *"},
		"etl": {"kind": "workflows", "resource": "projects/p/locations/l/workflows/w", "scheduler_job": "projects/p/locations/europe-west1/jobs/etl-nightly"},
		"plain": {}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	n := m["nightly"]
	if !n.Schedule.Equal(schedule.MustParse("30 2 * * *", "Europe/Berlin")) || n.CatchUp != 6*time.Hour || n.MissedAfter != 45*time.Minute || !n.HasSchedule() || n.URL == nil {
		t.Errorf("nightly: %+v", n)
	}
	if g := n.Grace(schedule.DefaultRetry); g.For(time.Time{}, time.Time{}) != 45*time.Minute {
		t.Errorf("nightly's grace: %v, want missed_after", g)
	}
	u := m["utc"]
	if u.Schedule.TimeZone() != "UTC" || u.CatchUp != 0 || u.MissedAfter != 0 || u.HasTarget() {
		t.Errorf("utc: %+v", u)
	}
	if g := u.Grace(schedule.DefaultRetry); g.For(time.Time{}, time.Time{}) != 4*time.Minute {
		t.Errorf("utc's grace: %v, want Cloud Scheduler's default window", g.For(time.Time{}, time.Time{}))
	}
	if e := m["etl"]; e.SchedulerJob != "projects/p/locations/europe-west1/jobs/etl-nightly" || e.Schedule != nil || !e.HasSchedule() || e.Target == nil {
		t.Errorf("etl: %+v", e)
	}
	if p := m["plain"]; p.HasSchedule() {
		t.Errorf("plain: %+v", p)
	}
}

func TestParseScheduleErrors(t *testing.T) {
	t.Parallel()
	const sj = `"scheduler_job":"projects/p/locations/l/jobs/j"`
	for _, c := range []struct{ in, want string }{
		{`{"schedule":"0 9 * * *",` + sj + `}`, `job "j": schedule and scheduler_job are both set`},
		{`{"schedule":"61 9 * * *"}`, `job "j": schedule "61 9 * * *": minute value 61 is out of range 0-59`},
		{`{"schedule":"0 9 * * * *"}`, `job "j": schedule "0 9 * * * *": has 6 fields`},
		{`{"schedule":"@daily"}`, `job "j": schedule "@daily": descriptors`},
		{`{"schedule":"0 9 * * *","time_zone":"Europe/Berln"}`, `job "j": time_zone "Europe/Berln": is not a zone of the tz database`},
		{`{"time_zone":"Europe/Berlin"}`, `job "j": time_zone is set without schedule`},
		{`{"time_zone":"Europe/Berlin",` + sj + `}`, `job "j": time_zone is set with scheduler_job: runonce reads the time zone from the Cloud Scheduler job`},
		{`{"scheduler_job":"nightly"}`, `job "j": scheduler_job "nightly" is not a Cloud Scheduler job's name: want projects/PROJECT/locations/LOCATION/jobs/JOB`},
		{`{"catch_up":"1h",` + sj + `}`, `job "j": catch_up is set without schedule`},
		{`{"catch_up":"1h"}`, `job "j": catch_up is set without schedule`},
		{`{"missed_after":"1h"}`, `job "j": missed_after is set without schedule or scheduler_job`},
		{`{"schedule":"0 9 * * *","catch_up":"1d"}`, `job "j": catch_up "1d" is not a positive Go duration`},
		{`{"schedule":"0 9 * * *","missed_after":"-5m"}`, `job "j": missed_after "-5m" is not a positive Go duration`},
		{`{` + sj + `,"missed_after":"0s"}`, `job "j": missed_after "0s" is not a positive Go duration`},
		// The target's own checks still come first, in the same style.
		{`{"schedule":"0 9 * * *","timeout":"5m"}`, `job "j": has no url: method, timeout`},
	} {
		in := `{"jobs":{"j":` + c.in + `}}`
		_, err := jobs.Parse(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): %v, want %q", in, err, c.want)
		}
	}
}

// TestSchedulerGuideExample: the example of schedules in docs/cloud-scheduler.md is a
// valid jobs file.
func TestSchedulerGuideExample(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "cloud-scheduler.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "## Knowing the schedule")
	_, block, ok2 := strings.Cut(section, "```json\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`docs/cloud-scheduler.md has no "## Knowing the schedule" section with a json block`)
	}
	m, err := jobs.Parse(strings.NewReader(block))
	if err != nil {
		t.Fatalf("docs/cloud-scheduler.md's example: %v", err)
	}
	for _, j := range m {
		if !j.HasSchedule() {
			t.Errorf("docs/cloud-scheduler.md's example job %s has no schedule", j.Name)
		}
	}
}
