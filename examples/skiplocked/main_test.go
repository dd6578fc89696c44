package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestExample runs the example against the real PostgreSQL (TEST_DATABASE_URL) and
// checks what it prints: disjoint claims for overlapping runs, a retried attempt that
// resumes its own rows, a later run that takes only what is left, and every reminder
// sent once.
func TestExample(t *testing.T) {
	dsn := os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is unset in CI: scripts/test.sh starts PostgreSQL")
		}
		t.Skip("set TEST_DATABASE_URL to run against PostgreSQL (scripts/services.sh start DIR)")
	}
	var out strings.Builder
	if err := run(t.Context(), dsn, &out); err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^two overlapping runs claimed 300 and 300 rows, 0 in common
a run released mid-batch was retried: attempt 2 completed, resuming its own 300 rows \((\d+) sends\)
a later run claimed 300 of the rows left: completed
reminders sent: 900, sent twice: 0, rows left: 100
$`)
	m := want.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the example printed:\n%s\nwant it to match:\n%s", out.String(), want)
	}
	if m[1] == "300" {
		t.Errorf("the retried attempt sent all 300 rows again; want only the groups its first attempt left open")
	}
}
