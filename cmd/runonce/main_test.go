package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryBinaryExitsTwoOnAUsageError builds the four binaries and runs each as a user
// would: an unknown flag exits 2 with one line naming it after the binary's name (once),
// -h exits 0, and a misspelt RUNONCE_* variable is named with the one it likely
// misspells.
func TestEveryBinaryExitsTwoOnAUsageError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "../ingress", "../worker", "../runonce-migrate", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(bin string, env []string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, bin), args...)
		// No RUNONCE_* variable of the test's own environment, no credentials.
		cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			return exit.ExitCode(), stderr.String()
		case err != nil:
			t.Fatalf("%s %v: %v", bin, args, err)
		}
		return 0, stderr.String()
	}
	for _, c := range []struct {
		bin, unknown, misspelt, likely string
	}{
		{"ingress", "-colour", "RUNONCE_LEDGR", "RUNONCE_LEDGER"},
		{"worker", "-colour", "RUNONCE_CONCURENCY", "RUNONCE_CONCURRENCY"},
		{"runonce-migrate", "-colour", "RUNONCE_SHCEMA", "RUNONCE_SCHEMA"},
		{"runonce", "--colour", "RUNONCE_ULR", "RUNONCE_URL"},
	} {
		args := []string{c.unknown}
		if c.bin == "runonce" {
			args = []string{"runs", "list", c.unknown}
		}
		code, stderr := run(c.bin, nil, args...)
		if code != 2 || !strings.Contains(stderr, c.bin+": ") || !strings.Contains(stderr, strings.TrimLeft(c.unknown, "-")) ||
			strings.Count(stderr, c.bin+": ") != 1 {
			t.Errorf("%s %v = %d %q; want 2 and one line naming the flag", c.bin, args, code, stderr)
		}
		help := []string{"-h"}
		if c.bin == "runonce" {
			help = []string{"runs", "list", "-h"}
		}
		if code, out := run(c.bin, nil, help...); code != 0 {
			t.Errorf("%s %v = %d %q; want 0", c.bin, help, code, out)
		}
		// Without the setting the variable meant, each stops on a usage error too, after
		// the warning.
		args = nil
		if c.bin == "runonce" {
			args = []string{"runs", "list"}
		}
		code, stderr = run(c.bin, []string{c.misspelt + "=x"}, args...)
		if code != 2 || !strings.Contains(stderr, c.misspelt) || !strings.Contains(stderr, "did you mean "+c.likely+"?") {
			t.Errorf("%s with %s set = %d %q; want 2 and a warning naming %s", c.bin, c.misspelt, code, stderr, c.likely)
		}
	}
}
