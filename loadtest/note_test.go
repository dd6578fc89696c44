package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestReportSaysWhyItsThroughputIsNotTheBenchmarks: the report says next to its runs/s
// why the figure is below BENCHMARKS.md's -dev figure, naming the faults that are on
// (by default: lost answers, short timeouts, flaky and failing downstream calls, a slow
// sink), so that nobody reads the difference as a regression.
func TestReportSaysWhyItsThroughputIsNotTheBenchmarks(t *testing.T) {
	t.Parallel()
	c, err := parseFlags([]string{"-target", "http://127.0.0.1:1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printReport(&out, c, &report{Note: throughputNote(c)}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"not a benchmark", "BENCHMARKS.md's -dev figure", "not a regression", "faults on", "10% of the answers lost",
		"50% of the runs calling a sink that waits 20ms", "5% of the runs failing", "delivered 3 times"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
	c, err = parseFlags([]string{"-target", "http://127.0.0.1:1", "-lost", "0", "-short-timeout-share", "0", "-flaky-share", "0", "-fail-share", "0", "-slow-share", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if n := throughputNote(c); !strings.Contains(n, "faults off") {
		t.Errorf("with every fault off the note says %q", n)
	}
}
