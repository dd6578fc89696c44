package ticks_test

import (
	"encoding/json"
	"github.com/runonce/runonce/pkg/ledger"
	"strings"
	"testing"
	"time"

	scheduler "cloud.google.com/go/scheduler/apiv1"
	"cloud.google.com/go/scheduler/apiv1/schedulerpb"
	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/internal/syncbuf"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/schedule/cloudscheduler"
	"github.com/runonce/runonce/pkg/schedule/cloudscheduler/cloudschedulertest"
	"github.com/runonce/runonce/pkg/ticks"
)

// missedLines returns the tick of each "tick missed" line of logs, by job.
func missedLines(t *testing.T, logs *syncbuf.Buffer) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for l := range strings.Lines(logs.String()) {
		var e struct {
			Level, Msg, Job, Tick, Backfill string
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if strings.HasPrefix(e.Msg, "tick missed") {
			if e.Level != "ERROR" || !strings.HasPrefix(e.Backfill, "runonce jobs backfill "+e.Job+" --from "+e.Tick) {
				t.Errorf("a missed tick's line %s: want ERROR with the backfill command", l)
			}
			out[e.Job] = append(out[e.Job], e.Tick)
		}
	}
	return out
}

// TestCheckerCountsEachMissedTickOnce: a tick with no run is counted and logged at ERROR
// once, by the pass during which its grace ran out; a tick with a run is not; a tick
// whose grace ran out before the checker started is not; a second pass and a restarted
// checker count nothing again.
func TestCheckerCountsEachMissedTickOnce(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 5, 4, 0, 0, 0, 0, time.UTC)
	at := func(hms string) time.Time {
		d, err := time.Parse("15:04:05", hms)
		if err != nil {
			t.Fatal(err)
		}
		return day.Add(d.Sub(d.Truncate(24 * time.Hour)))
	}
	clk := newClock(at("12:00:10"))
	l := memory.New(&memory.Options{Clock: clk.Now})
	b := book(t, `{"jobs": {"every": {"schedule": "* * * * *", "missed_after": "30s"}, "daily": {"schedule": "0 9 * * *"}}}`, nil)
	mp, counted := meter()
	log, buf := logs()
	newChecker := func() *ticks.Checker {
		c, err := ticks.NewChecker(&ticks.CheckerConfig{Book: b, Reader: &ticks.Reader{Ledger: ledger.New(l, nil), Namespace: "ns"},
			Meter: mp.Meter("test"), Logger: log, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	check := func(c *ticks.Checker, want int) {
		t.Helper()
		n, err := c.Check(t.Context())
		if err != nil || n != want {
			t.Fatalf("check at %s = %d, %v; want %d", clk.Now().Format(time.TimeOnly), n, err, want)
		}
	}
	c := newChecker()
	check(c, 0) // 11:59's grace ran out before the start, 12:00's has not yet
	clk.Set(at("12:01:05"))
	claimTick(t, l, "ns", "every", "every", at("12:01:00"), clk.Now())
	clk.Set(at("12:02:40"))
	check(c, 2) // 12:00 and 12:02; 12:01 has its run
	check(c, 0)
	clk.Set(at("12:02:50"))
	check(c, 0)

	restarted := newChecker()
	clk.Set(at("12:03:40"))
	check(restarted, 1) // 12:03 only
	if got := counted(t); !cmp.Equal(got, map[string]int64{"every": 3}) {
		t.Errorf("runonce.job.ticks.missed = %v, want every: 3", got)
	}
	want := map[string][]string{"every": {"2026-05-04T12:00:00Z", "2026-05-04T12:02:00Z", "2026-05-04T12:03:00Z"}}
	if diff := cmp.Diff(want, missedLines(t, buf)); diff != "" {
		t.Errorf("ERROR lines (-want +got):\n%s", diff)
	}
}

// TestCheckerSparesPausedAndCoveredTicks: the ticks of a Cloud Scheduler job while it was
// paused are not missed (its ticks before the pause and after the resume are); of the two
// ticks of a wall time the clocks repeat, one run covers both.
func TestCheckerSparesPausedAndCoveredTicks(t *testing.T) {
	t.Parallel()
	const name = "projects/acme/locations/europe-west1/jobs/nightly"
	fake, err := cloudschedulertest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	base := time.Date(2026, 5, 4, 0, 0, 0, 0, time.UTC)
	at := func(h, m, s int) time.Time {
		return base.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
	}
	clk := newClock(at(11, 50, 0))
	fake.SetClock(clk.Now)
	if err := fake.Put(&schedulerpb.Job{Name: name, Schedule: "* * * * *", TimeZone: "Europe/Berlin",
		Target: &schedulerpb.Job_HttpTarget{HttpTarget: &schedulerpb.HttpTarget{Uri: "https://ingress/v1/jobs/nightly"}}}); err != nil {
		t.Fatal(err)
	}
	opts, err := fake.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := scheduler.NewCloudSchedulerClient(t.Context(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	if opts, err = fake.ClientOptions(); err != nil {
		t.Fatal(err)
	}
	clk.Set(at(12, 0, 10))
	b := book(t, `{"jobs": {"nightly": {"scheduler_job": "`+name+`", "missed_after": "30s"},
		"fallback": {"schedule": "30 1 * * *", "time_zone": "America/New_York", "missed_after": "10m"},
		"neither": {"schedule": "30 1 * * *", "time_zone": "America/New_York", "missed_after": "10m"}}}`,
		&ticks.BookOptions{ClientOptions: opts, Source: cloudscheduler.SourceOptions{Now: clk.Now}})
	l := memory.New(&memory.Options{Clock: clk.Now})
	mp, counted := meter()
	log, buf := logs()
	c, err := ticks.NewChecker(&ticks.CheckerConfig{Book: b, Reader: &ticks.Reader{Ledger: ledger.New(l, nil)}, Meter: mp.Meter("test"), Logger: log, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	step := func(h, m, s int, do func()) {
		t.Helper()
		clk.Set(at(h, m, s))
		if do != nil {
			do()
		}
		if err := b.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Check(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	claimTick(t, l, "", "nightly", "nightly", at(12, 0, 0), at(12, 0, 5))
	step(12, 0, 40, nil)
	step(12, 1, 10, func() {
		if _, err := admin.PauseJob(t.Context(), &schedulerpb.PauseJobRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	})
	step(12, 3, 50, nil) // 12:01 was missed; 12:02 and 12:03 were paused
	step(12, 4, 10, func() {
		if _, err := admin.ResumeJob(t.Context(), &schedulerpb.ResumeJobRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	})
	step(12, 5, 40, nil) // 12:04 was paused, 12:05 missed
	if spec, err := b.Spec("nightly"); err != nil || len(spec.Paused) != 1 || !spec.Paused[0].From.Equal(at(12, 1, 10)) || !spec.Paused[0].To.Equal(at(12, 4, 10)) {
		t.Fatalf("spec %+v, %v; want one pause, 12:01:10 to 12:04:10", spec, err)
	}

	want := map[string][]string{"nightly": {"2026-05-04T12:01:00Z", "2026-05-04T12:05:00Z"}}
	if diff := cmp.Diff(want, missedLines(t, buf)); diff != "" {
		t.Errorf("ERROR lines (-want +got):\n%s", diff)
	}
	if got := counted(t); !cmp.Equal(got, map[string]int64{"nightly": 2}) {
		t.Errorf("runonce.job.ticks.missed = %v, want nightly: 2", got)
	}
}

// TestCheckerSparesCoveredTicks: of the two ticks of a wall time the clocks repeat
// (01:30 in New York on 2026-11-01, at 05:30Z and 06:30Z), one run covers both; with
// neither run, both are missed.
func TestCheckerSparesCoveredTicks(t *testing.T) {
	t.Parallel()
	clk := newClock(time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC))
	b := book(t, `{"jobs": {"covered": {"schedule": "30 1 * * *", "time_zone": "America/New_York", "missed_after": "10m"},
		"neither": {"schedule": "30 1 * * *", "time_zone": "America/New_York", "missed_after": "10m"}}}`, nil)
	l := memory.New(&memory.Options{Clock: clk.Now})
	mp, counted := meter()
	log, buf := logs()
	c, err := ticks.NewChecker(&ticks.CheckerConfig{Book: b, Reader: &ticks.Reader{Ledger: ledger.New(l, nil)}, Meter: mp.Meter("test"), Logger: log, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	claimTick(t, l, "", "covered", "covered", time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), time.Date(2026, 11, 1, 5, 30, 5, 0, time.UTC))
	clk.Set(time.Date(2026, 11, 1, 6, 15, 0, 0, time.UTC))
	if _, err := c.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	clk.Set(time.Date(2026, 11, 1, 6, 45, 0, 0, time.UTC))
	if _, err := c.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"neither": {"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"}}
	if diff := cmp.Diff(want, missedLines(t, buf)); diff != "" {
		t.Errorf("ERROR lines (-want +got):\n%s", diff)
	}
	if got := counted(t); !cmp.Equal(got, map[string]int64{"neither": 2}) {
		t.Errorf("runonce.job.ticks.missed = %v, want neither: 2", got)
	}
}
