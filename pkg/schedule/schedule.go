package schedule

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // Cloud Scheduler's zones must resolve in images without a tz database

	"github.com/robfig/cron/v3"
)

// Field names, as the jobs file and Cloud Scheduler's Job name them.
const (
	FieldSchedule = "schedule"
	FieldTimeZone = "time_zone"
)

// Error is a schedule or time zone that Parse refuses.
type Error struct {
	// Field is FieldSchedule or FieldTimeZone.
	Field string
	// Value is the field's value as given.
	Value string
	// Problem says what is wrong with it.
	Problem string
}

func (e *Error) Error() string { return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Problem) }

// Schedule is a unix-cron schedule in a time zone, evaluated as Cloud Scheduler does
// (see the package doc). It is immutable and safe for concurrent use.
type Schedule struct {
	expr string
	zone string
	loc  *time.Location
	spec *cron.SpecSchedule
}

// parser is robfig/cron's parser for exactly five fields, without descriptors (@daily,
// @every) or seconds; Parse checks the syntax itself first (see checkField).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// starBit is robfig/cron's mark on a day field that counts as unrestricted.
const starBit = 1 << 63

// Parse parses a unix-cron expression of five fields (minute hour day-of-month month
// day-of-week) and an IANA time zone ("" or "utc" in any case: UTC, as Cloud
// Scheduler). A refusal is an *Error naming the field and the problem.
func Parse(expr, timeZone string) (*Schedule, error) {
	loc, err := LoadZone(timeZone)
	if err != nil {
		return nil, err
	}
	fields, err := splitFields(expr)
	if err != nil {
		return nil, &Error{Field: FieldSchedule, Value: expr, Problem: err.Error()}
	}
	for i, f := range fields {
		if err := checkField(fieldSpecs[i], f); err != nil {
			return nil, &Error{Field: FieldSchedule, Value: expr, Problem: err.Error()}
		}
	}
	dow, err := sundayAsSeven(fields[4])
	if err != nil {
		return nil, &Error{Field: FieldSchedule, Value: expr, Problem: err.Error()}
	}
	parsed, err := parser.Parse(strings.Join(append(fields[:4:4], dow), " "))
	if err != nil {
		// checkField refuses everything robfig/cron does; keep its words if not.
		return nil, &Error{Field: FieldSchedule, Value: expr, Problem: err.Error()}
	}
	spec := parsed.(*cron.SpecSchedule)
	spec.Location = loc
	// Vixie cron: a day field that starts with "*" (also "*/2") is unrestricted, and
	// both restricted fields match with OR. robfig/cron counts "*/2" as restricted.
	spec.Dom &^= starBit
	spec.Dow &^= starBit
	if strings.HasPrefix(fields[2], "*") {
		spec.Dom |= starBit
	}
	if strings.HasPrefix(fields[4], "*") {
		spec.Dow |= starBit
	}
	s := &Schedule{expr: strings.Join(fields, " "), zone: zoneName(timeZone, loc), loc: loc, spec: spec}
	if _, ok := s.Next(neverReference); !ok {
		return nil, &Error{Field: FieldSchedule, Value: expr, Problem: "never fires (no date matches its day-of-month and month)"}
	}
	return s, nil
}

// neverReference is where Parse looks for a first tick: a leap year's start, so that a
// schedule of 29 February is found.
var neverReference = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// MustParse is Parse for schedules known to be valid (tests, examples); it panics on
// an error.
func MustParse(expr, timeZone string) *Schedule {
	s, err := Parse(expr, timeZone)
	if err != nil {
		panic(err)
	}
	return s
}

// LoadZone returns the location of a Cloud Scheduler time zone: an IANA name from the tz
// database (embedded, so it resolves without one on the machine), or "" or "utc" in any
// case for UTC. "Local" is refused: it is the machine's zone, not a schedule's.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || strings.EqualFold(name, "utc") {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, &Error{Field: FieldTimeZone, Value: name, Problem: `is the machine's zone: name an IANA zone (e.g. "Europe/Berlin", "UTC")`}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, &Error{Field: FieldTimeZone, Value: name, Problem: `is not a zone of the tz database (e.g. "America/New_York", "Europe/Berlin", "UTC")`}
	}
	return loc, nil
}

func zoneName(given string, loc *time.Location) string {
	if loc == time.UTC {
		return "UTC"
	}
	return given
}

// Expr is the cron expression (its fields joined by single spaces).
func (s *Schedule) Expr() string { return s.expr }

// TimeZone is the time zone's name ("UTC" for "" and "utc").
func (s *Schedule) TimeZone() string { return s.zone }

// Location is the time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// String is the expression and the zone: `"0 9 * * 1" in Europe/Berlin`.
func (s *Schedule) String() string { return fmt.Sprintf("%q in %s", s.expr, s.zone) }

// Equal reports whether s and o are the same expression in the same zone.
func (s *Schedule) Equal(o *Schedule) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.expr == o.expr && s.zone == o.zone
}

// DST says whether a tick's wall time occurs twice on its day (the clocks went back over
// it: the end of daylight saving time).
type DST uint8

// The values of DST.
const (
	// DSTNone: the wall time occurs once.
	DSTNone DST = iota
	// DSTFirst: the first of two occurrences (before the clocks went back).
	DSTFirst
	// DSTSecond: the second occurrence (after the clocks went back).
	DSTSecond
)

func (d DST) String() string {
	switch d {
	case DSTFirst:
		return "first"
	case DSTSecond:
		return "second"
	}
	return "none"
}

// Tick is one time a schedule fires.
type Tick struct {
	// Time is the tick in UTC, to the minute: the instant Cloud Scheduler sends as
	// X-CloudScheduler-ScheduleTime, and the one a run of the tick is keyed by.
	Time time.Time
	// Local is the same instant on the schedule's wall clock.
	Local time.Time
	// DST marks the two ticks of a wall time that occurs twice (see the package doc).
	DST DST
}

// String is the tick's UTC time and wall time: "2026-11-01T06:30:00Z (01:30 EST, second)".
func (t Tick) String() string {
	s := t.Time.Format(time.RFC3339) + " (" + t.Local.Format("15:04 MST")
	if t.DST != DSTNone {
		s += ", " + t.DST.String()
	}
	return s + ")"
}

func (s *Schedule) tick(t time.Time) Tick {
	local := t.In(s.loc)
	return Tick{Time: t.UTC(), Local: local, DST: dstOf(local)}
}

// dstOf says whether local's wall time also reads before or after local, in the zone's
// next or previous offset.
func dstOf(local time.Time) DST {
	_, cur := local.Zone()
	start, end := local.ZoneBounds()
	if !end.IsZero() {
		_, next := end.In(local.Location()).Zone()
		if d := time.Duration(cur-next) * time.Second; d > 0 && !local.Before(end.Add(-d)) {
			return DSTFirst
		}
	}
	if !start.IsZero() {
		_, prev := start.Add(-time.Nanosecond).In(local.Location()).Zone()
		if d := time.Duration(prev-cur) * time.Second; d > 0 && local.Before(start.Add(d)) {
			return DSTSecond
		}
	}
	return DSTNone
}

// Next returns the first tick after t (strictly), and false when there is none within
// five years (a schedule of 29 February around 2100).
//
// robfig/cron's own Next walks wall-clock fields across offset changes and goes wrong
// in some zones (a 30-minute shift at Lord Howe, transitions at midnight, Antarctic
// stations): it returns wall times the expression does not match and skips some that it
// does. So Next asks it only within one span of constant offset (time.Time.ZoneBounds),
// as a fixed zone, where wall clock and UTC move together, and moves to the next span
// when the answer lies beyond this one.
func (s *Schedule) Next(t time.Time) (Tick, bool) {
	limit := t.AddDate(5, 0, 0)
	for at := t; !at.After(limit); {
		local := at.In(s.loc)
		name, offset := local.Zone()
		_, end := local.ZoneBounds()
		spec := *s.spec
		spec.Location = time.FixedZone(name, offset)
		n := spec.Next(t)
		switch {
		case n.IsZero():
			return Tick{}, false
		case end.IsZero() || n.Before(end):
			return s.tick(n), true
		}
		// Past this span: look again from its end, in the next span's offset.
		t, at = end.Add(-time.Nanosecond), end
	}
	return Tick{}, false
}

// Ticks yields the ticks in [from, to), oldest first.
func (s *Schedule) Ticks(from, to time.Time) iter.Seq[Tick] {
	return func(yield func(Tick) bool) {
		t := from.Add(-time.Nanosecond)
		for {
			tk, ok := s.Next(t)
			if !ok || !tk.Time.Before(to) || !yield(tk) {
				return
			}
			t = tk.Time
		}
	}
}

// maxLookBack bounds Prev's search.
const maxLookBack = 10 * 366 * 24 * time.Hour

// Prev returns the last tick before t (strictly), and false when there is none within
// ten years.
func (s *Schedule) Prev(t time.Time) (Tick, bool) {
	hi := t
	for span := time.Hour; span <= 2*maxLookBack; span *= 2 {
		lo := hi.Add(-span)
		var last Tick
		found := false
		for tk := range s.Ticks(lo, hi) {
			last, found = tk, true
		}
		if found {
			return last, true
		}
		if t.Sub(lo) >= maxLookBack {
			break
		}
		hi = lo
	}
	return Tick{}, false
}

// splitFields splits expr into its five fields, and says what it is otherwise.
func splitFields(expr string) ([]string, error) {
	trimmed := strings.TrimSpace(expr)
	fields := strings.Fields(trimmed)
	switch {
	case trimmed == "":
		return nil, errors.New(`is empty: want five fields, minute hour day-of-month month day-of-week (e.g. "0 9 * * 1")`)
	case strings.HasPrefix(trimmed, "@"):
		return nil, errors.New(`descriptors such as @daily and @every are not Cloud Scheduler's unix-cron: write the five fields (e.g. "0 0 * * *")`)
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return nil, errors.New("names a time zone: give it as time_zone, not in the schedule")
	case strings.HasPrefix(strings.ToLower(trimmed), "every "):
		return nil, errors.New("is Cloud Scheduler's English-like (App Engine cron) format, which runonce does not evaluate: use unix-cron (e.g. \"*/5 * * * *\" for every 5 minutes)")
	case len(fields) == 6:
		return nil, errors.New("has 6 fields: Cloud Scheduler's unix-cron has five (minute hour day-of-month month day-of-week), no seconds")
	case len(fields) != 5:
		return nil, fmt.Errorf("has %d fields, want five: minute hour day-of-month month day-of-week", len(fields))
	}
	return fields, nil
}

type fieldSpec struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i; nil when the field has none
}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dayNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
	fieldSpecs = [5]fieldSpec{
		{name: "minute", min: 0, max: 59},
		{name: "hour", min: 0, max: 23},
		{name: "day-of-month", min: 1, max: 31},
		{name: "month", min: 1, max: 12, names: monthNames},
		// Cloud Scheduler and vixie cron take 7 for Sunday too.
		{name: "day-of-week", min: 0, max: 7, names: dayNames},
	}
)

// value parses a number or, where the field has names, a three-letter name (in any case).
func (f fieldSpec) value(tok string) (int, error) {
	if tok == "" {
		return 0, fmt.Errorf("%s has an empty value", f.name)
	}
	if i := slices.Index(f.names, strings.ToUpper(tok)); i >= 0 {
		return f.min + i, nil
	}
	switch {
	case tok == "?":
		return 0, fmt.Errorf("%s %q: unix-cron has no ?; use *", f.name, tok)
	case strings.ContainsAny(strings.ToUpper(tok), "LW#"):
		return 0, fmt.Errorf("%s %q: Cloud Scheduler does not support L, W or # (last day, weekday, nth weekday)", f.name, tok)
	case tok[0] >= '0' && tok[0] <= '9':
		n, err := strconv.Atoi(tok)
		if err != nil {
			return 0, fmt.Errorf("%s value %q is not a number", f.name, tok)
		}
		if n < f.min || n > f.max {
			return 0, fmt.Errorf("%s value %d is out of range %d-%d", f.name, n, f.min, f.max)
		}
		return n, nil
	case f.names != nil:
		return 0, fmt.Errorf("%s value %q is neither a number %d-%d nor a name %s-%s", f.name, tok, f.min, f.max, f.names[0], f.names[len(f.names)-1])
	}
	return 0, fmt.Errorf("%s value %q is not a number %d-%d", f.name, tok, f.min, f.max)
}

// element is one comma-separated part of a field: low-high/step ("*" is min-max).
type element struct {
	low, high, step int
	star            bool
}

// parseElement parses "*", "*/n", "a", "a-b", "a-b/n" and "a/n" (a to the maximum, as
// robfig/cron and cronie read it).
func (f fieldSpec) parseElement(e string) (element, error) {
	rng, stepText, hasStep := strings.Cut(e, "/")
	el := element{step: 1}
	if hasStep {
		n, err := strconv.Atoi(stepText)
		if err != nil || n <= 0 || stepText[0] == '+' {
			return el, fmt.Errorf("%s step %q is not a positive number", f.name, stepText)
		}
		el.step = n
	}
	if rng == "*" {
		el.low, el.high, el.star = f.min, f.max, true
		if f.name == "day-of-week" {
			el.high = 6 // 7 is Sunday again
		}
		return el, nil
	}
	lo, hi, isRange := strings.Cut(rng, "-")
	var err error
	if el.low, err = f.value(lo); err != nil {
		return el, err
	}
	el.high = el.low
	switch {
	case isRange:
		if el.high, err = f.value(hi); err != nil {
			return el, err
		}
		if el.low > el.high {
			return el, fmt.Errorf("%s range %q runs backwards", f.name, rng)
		}
	case hasStep:
		el.high = f.max
	}
	return el, nil
}

// checkField refuses what Cloud Scheduler's unix-cron does not take.
func checkField(f fieldSpec, text string) error {
	for e := range strings.SplitSeq(text, ",") {
		if e == "" {
			return fmt.Errorf("%s %q has an empty list element", f.name, text)
		}
		if _, err := f.parseElement(e); err != nil {
			return err
		}
	}
	return nil
}

// sundayAsSeven rewrites a day-of-week field whose elements reach 7 (Sunday, as in
// vixie cron and Cloud Scheduler) into values robfig/cron takes (0-6).
func sundayAsSeven(text string) (string, error) {
	f := fieldSpecs[4]
	var out []string
	for e := range strings.SplitSeq(text, ",") {
		el, err := f.parseElement(e)
		if err != nil {
			return "", err
		}
		if el.star || el.high < 7 {
			out = append(out, e)
			continue
		}
		var days []int
		for d := el.low; d <= el.high; d += el.step {
			days = append(days, d%7)
		}
		slices.Sort(days)
		for _, d := range slices.Compact(days) {
			out = append(out, strconv.Itoa(d))
		}
	}
	return strings.Join(out, ","), nil
}
