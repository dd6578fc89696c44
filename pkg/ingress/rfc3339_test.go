package ingress_test

import (
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ingress"
)

func TestParseRFC3339(t *testing.T) {
	t.Parallel()
	ok := map[string]time.Time{
		"2026-10-16T12:00:00Z":                time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC),
		"2026-10-16t12:00:00z":                time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC),
		"2026-10-16T05:00:00-07:00":           time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC),
		"2026-10-16T12:00:00.5Z":              time.Date(2026, 10, 16, 12, 0, 0, 5e8, time.UTC),
		"2026-10-16T12:00:00.123456789123Z":   time.Date(2026, 10, 16, 12, 0, 0, 123456789, time.UTC),
		"2026-10-16T23:59:59+23:59":           time.Date(2026, 10, 16, 0, 0, 59, 0, time.UTC),
		"2028-02-29T00:00:00Z":                time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC),
		"2026-10-16T12:00:00.000000000+00:00": time.Date(2026, 10, 16, 12, 0, 0, 0, time.UTC),
	}
	for in, want := range ok {
		got, err := ingress.ParseRFC3339(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseRFC3339(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	// Each of these is accepted by time.Time.UnmarshalText or time.Parse(time.RFC3339).
	bad := []string{
		"2026-10-16T12:00:00,5Z",    // a comma for the fraction
		"2026-10-16T1:00:00Z",       // a one-digit hour
		"2026-10-16T12:00:00+24:01", // an offset past 23:59
		"2026-10-16T12:00:00+23:60",
		"2026-10-16T12:00:00.Z", // a '.' without digits
		"2026-10-16 12:00:00Z",  // a space for T
		"2026-10-16T12:00:00+0000",
		"2026-10-16T12:00:00",
		"2026-10-16T24:00:00Z",
		"2026-10-16T12:60:00Z",
		"2026-10-16T12:00:60Z", // a leap second: not representable
		"2026-13-16T12:00:00Z",
		"2026-02-29T12:00:00Z", // not a leap year
		"2026-10-00T12:00:00Z",
		"+2026-10-16T12:00:00Z",
		"2026-10-16T12:00:00Z ",
		"２026-10-16T12:00:00Z",
		"",
	}
	for _, in := range bad {
		if got, err := ingress.ParseRFC3339(in); err == nil {
			t.Errorf("ParseRFC3339(%q) = %v, want an error", in, got)
		}
	}
}
