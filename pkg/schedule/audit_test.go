package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/pkg/schedule"
)

func TestBackoffAndWindow(t *testing.T) {
	t.Parallel()
	// RetryConfig's own example: 10 s, 300 s, 3 doublings.
	r := schedule.Retry{MinBackoff: 10 * time.Second, MaxBackoff: 300 * time.Second, MaxDoublings: 3}
	var got []time.Duration
	for n := 1; n <= 8; n++ {
		got = append(got, r.Backoff(n)/time.Second)
	}
	if diff := cmp.Diff([]time.Duration{10, 20, 40, 80, 160, 240, 300, 300}, got); diff != "" {
		t.Errorf("backoffs in seconds (-want +got):\n%s", diff)
	}
	// deploy/'s defaults: 5 retries, 10 s to 300 s, 4 doublings, 1 h, 180 s deadline.
	deploy := schedule.Retry{Count: 5, MinBackoff: 10 * time.Second, MaxBackoff: 300 * time.Second, MaxDoublings: 4,
		MaxRetryDuration: time.Hour, AttemptDeadline: 180 * time.Second}
	for _, c := range []struct {
		name     string
		r        schedule.Retry
		interval time.Duration
		want     time.Duration
	}{
		// 3 m for the first attempt, no retries, 1 m slack.
		{"Cloud Scheduler's defaults", schedule.DefaultRetry, 0, 4 * time.Minute},
		// retries: 5 x 180 s + (10+20+40+80+160) s = 1210 s, less than the 1 h duration,
		// which wins: 3 m + 1 h + 1 m.
		{"deploy defaults, daily", deploy, 24 * time.Hour, time.Hour + 4*time.Minute},
		// never past the next tick: 3 m + 15 m + 1 m.
		{"deploy defaults, every 15 minutes", deploy, 15 * time.Minute, 19 * time.Minute},
		// 3 x 30 s + (5+10+20) s = 125 s; 30 s + 125 s + 60 s.
		{"three retries, no duration", schedule.Retry{Count: 3, MinBackoff: 5 * time.Second, MaxBackoff: time.Hour, MaxDoublings: 5, AttemptDeadline: 30 * time.Second}, 0, 215 * time.Second},
		{"a duration without a count retries nothing", schedule.Retry{MaxRetryDuration: time.Hour, AttemptDeadline: time.Minute}, 0, 2 * time.Minute},
	} {
		if got := c.r.Window(c.interval); got != c.want {
			t.Errorf("%s: Window(%s) = %s, want %s", c.name, c.interval, got, c.want)
		}
	}
	if g := (schedule.Grace{After: 2 * time.Hour, Retry: deploy}); g.For(time.Time{}, time.Time{}) != 2*time.Hour {
		t.Error("missed_after does not win over the retry window")
	}
}

func TestSchedulerJobName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"projects/p/locations/us-central1/jobs/nightly_etl-2", "projects/example.com:p-1/locations/europe-west1/jobs/J"} {
		if err := schedule.ValidSchedulerJob(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "nightly", "projects/p/locations/l/jobs/", "projects/p/locations/l/jobs/a.b", "projects/p/jobs/j", "projects/p/locations/l/jobs/j/x", "projects/p/locations/l/jobs/" + strings.Repeat("j", 501)} {
		if err := schedule.ValidSchedulerJob(bad); err == nil || !strings.Contains(err.Error(), schedule.SchedulerJobForm) {
			t.Errorf("%q: %v, want an error naming %s", bad, err, schedule.SchedulerJobForm)
		}
	}
	if id := schedule.SchedulerJobID("projects/p/locations/l/jobs/nightly"); id != "nightly" {
		t.Errorf("SchedulerJobID = %q", id)
	}
}

func at(hhmmss string) time.Time { return utc("2026-05-01T" + hhmmss + "Z") }

// row is a Row in a form that compares by hand: the tick's UTC time, the status, the run's
// ID, lateness and duration.
type row struct {
	Tick, Status, Run string
	Late, Took        time.Duration
}

func rows(a *schedule.Audit) []row {
	var out []row
	for _, r := range a.Rows {
		x := row{Tick: r.Tick.Time.Format("15:04"), Status: string(r.Status), Late: r.Late, Took: r.Took}
		if r.Run != nil {
			x.Run = r.Run.ID
		}
		out = append(out, x)
	}
	return out
}

func unmatched(a *schedule.Audit) []string {
	var out []string
	for _, u := range a.Unmatched {
		out = append(out, u.Run.ID+":"+u.Reason)
	}
	return out
}

func TestAccount(t *testing.T) {
	t.Parallel()
	hourly := schedule.MustParse("0 * * * *", "UTC")
	runs := []schedule.Run{
		{ID: "r00", ScheduleTime: at("00:00:00"), Status: schedule.StatusCompleted, CreatedAt: at("00:00:02"), StartedAt: at("00:00:03"), FinishedAt: at("00:01:03")},
		{ID: "r00b", ScheduleTime: at("00:00:00"), Status: schedule.StatusCompleted, CreatedAt: at("00:00:09"), StartedAt: at("00:00:10"), FinishedAt: at("00:00:20")},
		{ID: "r01", ScheduleTime: at("01:00:00"), Status: schedule.StatusFailed, CreatedAt: at("01:00:05"), StartedAt: at("01:00:06"), FinishedAt: at("01:05:06")},
		{ID: "r04", ScheduleTime: at("04:00:00"), Status: schedule.StatusRunning, CreatedAt: at("04:00:01"), StartedAt: at("04:00:01")},
		// The scheduler was held back half an hour (its previous execution): late, queued.
		{ID: "r05", ScheduleTime: at("05:00:00"), Status: schedule.StatusQueued, CreatedAt: at("05:30:00")},
		// A schedule time with seconds matches the tick of its minute.
		{ID: "r07", ScheduleTime: at("07:00:00").Add(372 * time.Millisecond), Status: schedule.StatusQueued, CreatedAt: at("06:59:58")},
		{ID: "manual", Status: schedule.StatusCompleted, CreatedAt: at("03:10:00"), StartedAt: at("03:10:01"), FinishedAt: at("03:10:02")},
		{ID: "old-schedule", ScheduleTime: at("03:30:00"), Status: schedule.StatusCompleted, CreatedAt: at("03:30:01")},
		{ID: "outside", ScheduleTime: at("09:00:00"), Status: schedule.StatusQueued, CreatedAt: at("09:00:01")},
	}
	p := &schedule.AuditParams{
		Schedule: hourly, From: at("00:00:00"), To: at("09:00:00"), Now: at("06:10:00"),
		Runs: runs, Grace: schedule.Grace{After: 15 * time.Minute},
		Paused: []schedule.Period{{From: at("01:30:00"), To: at("02:30:00")}, {From: at("07:45:00")}},
	}
	a, err := schedule.Account(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{Tick: "00:00", Status: "completed", Run: "r00", Late: 2 * time.Second, Took: time.Minute},
		{Tick: "01:00", Status: "failed", Run: "r01", Late: 5 * time.Second, Took: 5 * time.Minute},
		{Tick: "02:00", Status: "paused"},
		{Tick: "03:00", Status: "missing"},
		{Tick: "04:00", Status: "running", Run: "r04", Late: time.Second, Took: 2*time.Hour + 9*time.Minute + 59*time.Second},
		{Tick: "05:00", Status: "queued", Run: "r05", Late: 30 * time.Minute},
		{Tick: "06:00", Status: "pending"}, // 10 minutes after it, within 15
		{Tick: "07:00", Status: "queued", Run: "r07", Late: -2 * time.Second},
		{Tick: "08:00", Status: "upcoming"},
	}
	if diff := cmp.Diff(want, rows(a)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"r00b:second-run", "manual:keyed", "old-schedule:no-tick"}, unmatched(a)); diff != "" {
		t.Errorf("unmatched (-want +got):\n%s", diff)
	}
	if !a.Next.IsZero() {
		t.Errorf("Next = %v: every tick fitted", a.Next)
	}

	// The same window later: 06:00 is missing once its grace has passed, 08:00 is due
	// and paused, and a tick past the grace while paused stays paused.
	p.Now = at("08:40:00")
	a, err = schedule.Account(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := []schedule.Status{a.Rows[2].Status, a.Rows[6].Status, a.Rows[8].Status}; !cmp.Equal(got, []schedule.Status{"paused", "missing", "paused"}) {
		t.Errorf("02:00, 06:00, 08:00 at 08:40: %v, want paused, missing, paused", got)
	}

	// Pages: three rows, the next page from 03:00, and only the runs of [00:00, 03:00).
	p.Limit = 3
	a, err = schedule.Account(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Rows) != 3 || !a.Next.Equal(at("03:00:00")) {
		t.Errorf("limit 3: %d rows, next %v; want 3 and 03:00", len(a.Rows), a.Next)
	}
	if diff := cmp.Diff([]string{"r00b:second-run"}, unmatched(a)); diff != "" {
		t.Errorf("unmatched of the first page (-want +got):\n%s", diff)
	}
}

func TestAccountRunStatuses(t *testing.T) {
	t.Parallel()
	s := schedule.MustParse("*/10 * * * *", "UTC")
	var runs []schedule.Run
	for i, st := range schedule.RunStatuses {
		tick := at("00:00:00").Add(time.Duration(i) * 10 * time.Minute)
		runs = append(runs, schedule.Run{ID: string(st), ScheduleTime: tick, Status: st, CreatedAt: tick})
	}
	a, err := schedule.Account(&schedule.AuditParams{Schedule: s, From: at("00:00:00"), To: at("01:10:00"), Now: at("02:00:00"), Runs: runs})
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range schedule.RunStatuses {
		if a.Rows[i].Status != st || a.Rows[i].Run.ID != string(st) {
			t.Errorf("row %d: %s with run %v, want %s", i, a.Rows[i].Status, a.Rows[i].Run, st)
		}
	}
}

// TestAccountDSTRepeat: a wall time the clocks repeat has two ticks; whichever one the
// scheduler fired, the other is covered, not missing; with neither, both are missing.
func TestAccountDSTRepeat(t *testing.T) {
	t.Parallel()
	s := schedule.MustParse("30 1 * * *", "America/New_York")
	first, second := utc("2026-11-01T05:30:00Z"), utc("2026-11-01T06:30:00Z")
	for _, c := range []struct {
		name string
		runs []time.Time
		want []schedule.Status
	}{
		{"the first ran", []time.Time{first}, []schedule.Status{"completed", "covered"}},
		{"the second ran", []time.Time{second}, []schedule.Status{"covered", "completed"}},
		{"both ran", []time.Time{first, second}, []schedule.Status{"completed", "completed"}},
		{"neither ran", nil, []schedule.Status{"missing", "missing"}},
	} {
		var runs []schedule.Run
		for _, st := range c.runs {
			runs = append(runs, schedule.Run{ID: st.String(), ScheduleTime: st, Status: schedule.StatusCompleted, CreatedAt: st})
		}
		a, err := schedule.Account(&schedule.AuditParams{Schedule: s, From: utc("2026-11-01T00:00:00Z"), To: utc("2026-11-02T00:00:00Z"),
			Now: utc("2026-11-01T12:00:00Z"), Runs: runs, Grace: schedule.Grace{Retry: schedule.DefaultRetry}})
		if err != nil {
			t.Fatal(err)
		}
		var got []schedule.Status
		for _, r := range a.Rows {
			got = append(got, r.Status)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestAccountGraceFromRetry: the grace of each tick is the scheduler's retry window,
// never past the next tick.
func TestAccountGraceFromRetry(t *testing.T) {
	t.Parallel()
	deploy := schedule.Retry{Count: 5, MinBackoff: 10 * time.Second, MaxBackoff: 300 * time.Second, MaxDoublings: 4,
		MaxRetryDuration: time.Hour, AttemptDeadline: 180 * time.Second}
	s := schedule.MustParse("0,15 9 * * *", "UTC")
	a, err := schedule.Account(&schedule.AuditParams{Schedule: s, From: at("09:00:00"), To: at("10:00:00"), Now: at("09:30:00"),
		Grace: schedule.Grace{Retry: deploy}})
	if err != nil {
		t.Fatal(err)
	}
	// 09:00: capped at the 09:15 tick (3 m + 15 m + 1 m): missing at 09:30. 09:15: the
	// next tick is tomorrow, so the hour of retries counts (3 m + 1 h + 1 m): pending.
	got := []string{a.Rows[0].Grace.String(), string(a.Rows[0].Status), a.Rows[1].Grace.String(), string(a.Rows[1].Status)}
	if diff := cmp.Diff([]string{"19m0s", "missing", "1h4m0s", "pending"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestAccountRefuses(t *testing.T) {
	t.Parallel()
	s := schedule.MustParse("0 * * * *", "UTC")
	for _, c := range []struct {
		p    schedule.AuditParams
		want string
	}{
		{schedule.AuditParams{From: at("00:00:00"), To: at("01:00:00"), Now: at("02:00:00")}, "no schedule"},
		{schedule.AuditParams{Schedule: s, From: at("01:00:00"), To: at("01:00:00"), Now: at("02:00:00")}, "from must be before to"},
		{schedule.AuditParams{Schedule: s, From: at("00:00:00"), To: at("01:00:00")}, "no present time"},
		{schedule.AuditParams{Schedule: s, From: at("00:00:00"), To: at("01:00:00"), Now: at("02:00:00"), Limit: 5001}, "limit 5001"},
		{schedule.AuditParams{Schedule: s, From: at("00:00:00"), To: at("01:00:00"), Now: at("02:00:00"),
			Runs: []schedule.Run{{ID: "x", Status: "done"}}}, `run x has status "done"`},
	} {
		if _, err := schedule.Account(&c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Account: %v, want an error saying %q", err, c.want)
		}
	}
}
