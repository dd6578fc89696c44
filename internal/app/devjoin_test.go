package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDevBannerSaysWhatEachWorkerRuns: the banner's join commands start one's own
// program for the jobs without a target, and cmd/worker only for the jobs file's targets
// that no worker in -dev runs, saying that cmd/worker has no Go handlers. Before, the one
// join command started cmd/worker, which cannot run a job without a target.
func TestDevBannerSaysWhatEachWorkerRuns(t *testing.T) {
	t.Parallel()
	jobsFile := filepath.Join(t.TempDir(), "jobs.json")
	if err := os.WriteFile(jobsFile, []byte(`{"jobs": {"mine": {}, "hook": {"url": "http://127.0.0.1:9/x"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ledgerURL := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "dev.db"))
	banner, _ := dev(t, []string{"-addr", freeAddr(t), "-ledger", ledgerURL, "-jobs", jobsFile, "-dev-concurrency", "0"}, nil)
	flat := strings.Join(strings.Fields(banner), " ")
	for _, want := range []string{
		"runs the jobs without a target (mine)",
		"RUNONCE_LEDGER=" + ledgerURL, "RUNONCE_SUBSCRIPTION=pubsub://runonce-dev/runs-worker", "RUNONCE_TOPIC=pubsub://runonce-dev/runs \\ go run . ",
		"cmd/worker has no Go handlers",
		"To run the jobs file's targets (hook), from this repository:",
		"go run ./cmd/worker -auth none -addr 127.0.0.1:0 -jobs " + jobsFile,
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("the banner of -dev-concurrency 0 does not say %q:\n%s", want, banner)
		}
	}
	// With workers in -dev, they run the file's targets: no cmd/worker command.
	banner, _ = dev(t, []string{"-addr", freeAddr(t), "-ledger", "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "dev2.db")), "-jobs", jobsFile}, nil)
	if strings.Contains(banner, "go run ./cmd/worker") || !strings.Contains(banner, "go run .\n") {
		t.Errorf("with in-process workers the banner offers cmd/worker for targets they run:\n%s", banner)
	}
}
