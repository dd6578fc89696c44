package schedule_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/pkg/schedule"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// tickStrings renders ticks as "UTC local-wall DST" for a readable diff.
func tickStrings(s *schedule.Schedule, from, to string) []string {
	var out []string
	for tk := range s.Ticks(utc(from), utc(to)) {
		out = append(out, tk.String())
	}
	return out
}

// TestDSTDays: every row was worked out by hand from the tz database's transitions
// (zdump -v): America/New_York 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z) and 2026-11-01
// 02:00 EDT -> 01:00 EST (06:00Z); Europe/Berlin 2026-03-29 02:00 CET -> 03:00 CEST
// (01:00Z) and 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
func TestDSTDays(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, expr, zone, from, to string
		want                       []string
	}{
		// New York, spring forward: 02:00-02:59 does not exist on 2026-03-08.
		{"NY spring: a daily time in the gap has no tick that day", "30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z", []string{
			"2026-03-07T07:30:00Z (02:30 EST)", "2026-03-09T06:30:00Z (02:30 EDT)"}},
		{"NY spring: just before the gap", "30 1 * * *", "America/New_York", "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z", []string{
			"2026-03-08T06:30:00Z (01:30 EST)"}},
		{"NY spring: just after the gap", "0 3 * * *", "America/New_York", "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z", []string{
			"2026-03-08T07:00:00Z (03:00 EDT)"}},
		{"NY spring: hourly carries on along UTC", "0 * * * *", "America/New_York", "2026-03-08T05:00:00Z", "2026-03-08T09:00:00Z", []string{
			"2026-03-08T05:00:00Z (00:00 EST)", "2026-03-08T06:00:00Z (01:00 EST)",
			"2026-03-08T07:00:00Z (03:00 EDT)", "2026-03-08T08:00:00Z (04:00 EDT)"}},
		{"NY spring: every 15 minutes across the gap", "*/15 * * * *", "America/New_York", "2026-03-08T06:30:00Z", "2026-03-08T07:30:00Z", []string{
			"2026-03-08T06:30:00Z (01:30 EST)", "2026-03-08T06:45:00Z (01:45 EST)",
			"2026-03-08T07:00:00Z (03:00 EDT)", "2026-03-08T07:15:00Z (03:15 EDT)"}},
		// New York, fall back: 01:00-01:59 occurs twice on 2026-11-01.
		{"NY fall: a daily time in the repeat fires at both", "30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z", []string{
			"2026-10-31T05:30:00Z (01:30 EDT)", "2026-11-01T05:30:00Z (01:30 EDT, first)",
			"2026-11-01T06:30:00Z (01:30 EST, second)", "2026-11-02T06:30:00Z (01:30 EST)"}},
		{"NY fall: just after the repeat, once", "30 2 * * *", "America/New_York", "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", []string{
			"2026-11-01T07:30:00Z (02:30 EST)"}},
		{"NY fall: hourly", "0 * * * *", "America/New_York", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z", []string{
			"2026-11-01T04:00:00Z (00:00 EDT)", "2026-11-01T05:00:00Z (01:00 EDT, first)",
			"2026-11-01T06:00:00Z (01:00 EST, second)", "2026-11-01T07:00:00Z (02:00 EST)"}},
		{"NY fall: every 15 minutes in the repeat", "*/15 * * * *", "America/New_York", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", []string{
			"2026-11-01T05:30:00Z (01:30 EDT, first)", "2026-11-01T05:45:00Z (01:45 EDT, first)",
			"2026-11-01T06:00:00Z (01:00 EST, second)", "2026-11-01T06:15:00Z (01:15 EST, second)"}},
		// Berlin, spring forward: 02:00-02:59 does not exist on 2026-03-29.
		{"Berlin spring: a daily time in the gap has no tick that day", "30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z", []string{
			"2026-03-28T01:30:00Z (02:30 CET)", "2026-03-30T00:30:00Z (02:30 CEST)"}},
		{"Berlin spring: hourly", "0 * * * *", "Europe/Berlin", "2026-03-28T23:00:00Z", "2026-03-29T02:00:00Z", []string{
			"2026-03-28T23:00:00Z (00:00 CET)", "2026-03-29T00:00:00Z (01:00 CET)", "2026-03-29T01:00:00Z (03:00 CEST)"}},
		{"Berlin spring: every 15 minutes across the gap", "*/15 * * * *", "Europe/Berlin", "2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z", []string{
			"2026-03-29T00:30:00Z (01:30 CET)", "2026-03-29T00:45:00Z (01:45 CET)",
			"2026-03-29T01:00:00Z (03:00 CEST)", "2026-03-29T01:15:00Z (03:15 CEST)"}},
		// Berlin, fall back: 02:00-02:59 occurs twice on 2026-10-25.
		{"Berlin fall: a daily time in the repeat fires at both", "30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z", []string{
			"2026-10-24T00:30:00Z (02:30 CEST)", "2026-10-25T00:30:00Z (02:30 CEST, first)",
			"2026-10-25T01:30:00Z (02:30 CET, second)", "2026-10-26T01:30:00Z (02:30 CET)"}},
		{"Berlin fall: hourly", "0 * * * *", "Europe/Berlin", "2026-10-24T23:00:00Z", "2026-10-25T03:00:00Z", []string{
			"2026-10-24T23:00:00Z (01:00 CEST)", "2026-10-25T00:00:00Z (02:00 CEST, first)",
			"2026-10-25T01:00:00Z (02:00 CET, second)", "2026-10-25T02:00:00Z (03:00 CET)"}},
		{"Berlin fall: every 15 minutes in the repeat", "*/15 * * * *", "Europe/Berlin", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", []string{
			"2026-10-25T00:30:00Z (02:30 CEST, first)", "2026-10-25T00:45:00Z (02:45 CEST, first)",
			"2026-10-25T01:00:00Z (02:00 CET, second)", "2026-10-25T01:15:00Z (02:15 CET, second)"}},
	} {
		s, err := schedule.Parse(c.expr, c.zone)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if diff := cmp.Diff(c.want, tickStrings(s, c.from, c.to)); diff != "" {
			t.Errorf("%s: %s in [%s, %s) (-want +got):\n%s", c.name, s, c.from, c.to, diff)
		}
	}
}

// TestHourlyTicksOnDSTDays: 23 hourly ticks on a spring-forward day, 25 on a fall-back day.
func TestHourlyTicksOnDSTDays(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		zone, day string
		want      int
	}{
		{"America/New_York", "2026-03-08", 23}, {"America/New_York", "2026-11-01", 25}, {"America/New_York", "2026-11-02", 24},
		{"Europe/Berlin", "2026-03-29", 23}, {"Europe/Berlin", "2026-10-25", 25},
	} {
		s := schedule.MustParse("0 * * * *", c.zone)
		d, _ := time.ParseInLocation("2006-01-02", c.day, s.Location())
		n := 0
		for range s.Ticks(d, d.AddDate(0, 0, 1)) {
			n++
		}
		if n != c.want {
			t.Errorf("%s %s: %d hourly ticks, want %d", c.zone, c.day, n, c.want)
		}
	}
}

func TestNextPrev(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr, zone, at, next, prev string
	}{
		// A tick is strictly after (Next) and strictly before (Prev).
		{"0 9 * * *", "UTC", "2026-05-01T09:00:00Z", "2026-05-02T09:00:00Z", "2026-04-30T09:00:00Z"},
		{"0 9 * * *", "UTC", "2026-05-01T09:00:30Z", "2026-05-02T09:00:00Z", "2026-05-01T09:00:00Z"},
		// Across the New York gap and repeat.
		{"30 2 * * *", "America/New_York", "2026-03-08T00:00:00Z", "2026-03-09T06:30:00Z", "2026-03-07T07:30:00Z"},
		{"30 1 * * *", "America/New_York", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-10-31T05:30:00Z"},
		{"30 1 * * *", "America/New_York", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z", "2026-11-01T05:30:00Z"},
		// 29 February: years apart.
		{"0 0 29 2 *", "UTC", "2026-06-01T00:00:00Z", "2028-02-29T00:00:00Z", "2024-02-29T00:00:00Z"},
	} {
		s := schedule.MustParse(c.expr, c.zone)
		n, ok := s.Next(utc(c.at))
		if !ok || !n.Time.Equal(utc(c.next)) {
			t.Errorf("%s: Next(%s) = %v, %v; want %s", s, c.at, n, ok, c.next)
		}
		p, ok := s.Prev(utc(c.at))
		if !ok || !p.Time.Equal(utc(c.prev)) {
			t.Errorf("%s: Prev(%s) = %v, %v; want %s", s, c.at, p, ok, c.prev)
		}
	}
	if _, ok := schedule.MustParse("0 0 29 2 *", "UTC").Prev(utc("2024-02-29T00:00:00Z").AddDate(-12, 0, 0)); !ok {
		t.Error("Prev found no 29 February within ten years of 2012")
	}
}

// TestDialect: Cloud Scheduler's unix-cron, checked by hand against a calendar (May 2026
// starts on a Friday).
func TestDialect(t *testing.T) {
	t.Parallel()
	days := func(expr string) []int {
		var out []int
		for tk := range schedule.MustParse(expr, "UTC").Ticks(utc("2026-05-01T00:00:00Z"), utc("2026-06-01T00:00:00Z")) {
			out = append(out, tk.Time.Day())
		}
		return out
	}
	for _, c := range []struct {
		expr string
		want []int
	}{
		{"0 0 1 * SAT", []int{1, 2, 9, 16, 23, 30}}, // both restricted: the 1st OR Saturdays
		{"0 0 1,15 * 5", []int{1, 8, 15, 22, 29}},   // the 1st and 15th OR Fridays
		{"0 0 */2 * SAT", []int{9, 23}},             // "*/2" is unrestricted (vixie): odd days AND Saturdays
		{"0 0 * * 7", []int{3, 10, 17, 24, 31}},     // 7 is Sunday
		{"0 0 * * 0", []int{3, 10, 17, 24, 31}},     // and so is 0
		{"0 0 * * SUN", []int{3, 10, 17, 24, 31}},   // and SUN
		{"0 0 * * 5-7", []int{1, 2, 3, 8, 9, 10, 15, 16, 17, 22, 23, 24, 29, 30, 31}},
		{"0 0 * * 1-7/3", []int{3, 4, 7, 10, 11, 14, 17, 18, 21, 24, 25, 28, 31}}, // Mon, Thu, Sun
		{"0 0 * * mon-fri", []int{1, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 18, 19, 20, 21, 22, 25, 26, 27, 28, 29}},
		{"0 0 28-31 * *", []int{28, 29, 30, 31}},
		{"0 0 * JUN *", nil},
		{"0 0 1 may,Jun *", []int{1}},
	} {
		if diff := cmp.Diff(c.want, days(c.expr)); diff != "" {
			t.Errorf("%q in May 2026 (-want +got):\n%s", c.expr, diff)
		}
	}
	var got []string
	for tk := range schedule.MustParse("*/20 8-9 * * *", "UTC").Ticks(utc("2026-05-01T00:00:00Z"), utc("2026-05-02T00:00:00Z")) {
		got = append(got, tk.Time.Format("15:04"))
	}
	if diff := cmp.Diff([]string{"08:00", "08:20", "08:40", "09:00", "09:20", "09:40"}, got); diff != "" {
		t.Errorf("*/20 8-9 (-want +got):\n%s", diff)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ expr, zone, field, want string }{
		{"", "UTC", "schedule", "is empty: want five fields"},
		{"@daily", "UTC", "schedule", "descriptors such as @daily and @every"},
		{"@every 1h", "UTC", "schedule", "descriptors such as @daily and @every"},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", "UTC", "schedule", "give it as time_zone"},
		{"TZ=UTC", "UTC", "schedule", "give it as time_zone"},
		{"every 5 minutes", "UTC", "schedule", "English-like (App Engine cron) format"},
		{"0 0 9 * * *", "UTC", "schedule", "has 6 fields"},
		{"* * * *", "UTC", "schedule", "has 4 fields, want five"},
		{"61 * * * *", "UTC", "schedule", "minute value 61 is out of range 0-59"},
		{"* 24 * * *", "UTC", "schedule", "hour value 24 is out of range 0-23"},
		{"* * 0 * *", "UTC", "schedule", "day-of-month value 0 is out of range 1-31"},
		{"* * * 13 *", "UTC", "schedule", "month value 13 is out of range 1-12"},
		{"* * * * 8", "UTC", "schedule", "day-of-week value 8 is out of range 0-7"},
		{"* * * JANUARY *", "UTC", "schedule", `month value "JANUARY" is neither a number 1-12 nor a name JAN-DEC`},
		{"0 0 L * *", "UTC", "schedule", "does not support L, W or #"},
		{"0 0 * * 5#2", "UTC", "schedule", "does not support L, W or #"},
		{"0 0 ? * *", "UTC", "schedule", "unix-cron has no ?; use *"},
		{"5-1 * * * *", "UTC", "schedule", `minute range "5-1" runs backwards`},
		{"*/0 * * * *", "UTC", "schedule", `minute step "0" is not a positive number`},
		{"1,,2 * * * *", "UTC", "schedule", "has an empty list element"},
		{"-5 * * * *", "UTC", "schedule", `minute has an empty value`},
		{"0 0 31 2 *", "UTC", "schedule", "never fires"},
		{"0 9 * * *", "Mars/Olympus_Mons", "time_zone", "is not a zone of the tz database"},
		{"0 9 * * *", "Local", "time_zone", "is the machine's zone"},
	} {
		_, err := schedule.Parse(c.expr, c.zone)
		var pe *schedule.Error
		if !errors.As(err, &pe) || pe.Field != c.field || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q, %q) = %v; want a %s error saying %q", c.expr, c.zone, err, c.field, c.want)
		}
	}
}

func TestZones(t *testing.T) {
	t.Parallel()
	for _, z := range []string{"", "utc", "UTC", "Utc"} {
		s, err := schedule.Parse("0 9 * * *", z)
		if err != nil || s.Location() != time.UTC || s.TimeZone() != "UTC" {
			t.Errorf("zone %q: %v, %v: want UTC", z, s, err)
		}
	}
	s := schedule.MustParse(" 0  9 * *   MON ", "Europe/Berlin")
	if s.Expr() != "0 9 * * MON" || s.TimeZone() != "Europe/Berlin" || s.String() != `"0 9 * * MON" in Europe/Berlin` {
		t.Errorf("Expr %q, TimeZone %q, String %q", s.Expr(), s.TimeZone(), s.String())
	}
	if !s.Equal(schedule.MustParse("0 9 * * MON", "Europe/Berlin")) || s.Equal(schedule.MustParse("0 9 * * MON", "UTC")) || s.Equal(nil) {
		t.Error("Equal: same expression and zone only")
	}
	if tk, _ := schedule.MustParse("0 9 * * *", "Etc/UTC").Next(utc("2026-05-01T00:00:00Z")); !tk.Time.Equal(utc("2026-05-01T09:00:00Z")) {
		t.Errorf("Etc/UTC: %v", tk)
	}
}
