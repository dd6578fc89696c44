package gcpenv_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/internal/gcpenv"
)

// TestEmulatorHint: only the missing-credentials error, with the variable unset, gets
// the hint; it keeps the error it wraps.
func TestEmulatorHint(t *testing.T) {
	noCreds := fmt.Errorf("pubsub(publisher): %w", errors.New("credentials: could not find default credentials. See https://… for more information"))
	t.Setenv("RUNONCE_TEST_EMULATOR_HOST", "")
	err := gcpenv.EmulatorHint(noCreds, "RUNONCE_TEST_EMULATOR_HOST")
	if !errors.Is(err, noCreds) || !strings.Contains(err.Error(), "RUNONCE_TEST_EMULATOR_HOST is unset") {
		t.Errorf("EmulatorHint(no credentials, unset) = %v; want the hint around the error", err)
	}
	other := errors.New("dial tcp: connection refused")
	if got := gcpenv.EmulatorHint(other, "RUNONCE_TEST_EMULATOR_HOST"); got != other {
		t.Errorf("EmulatorHint(another error) = %v, want it unchanged", got)
	}
	if got := gcpenv.EmulatorHint(nil, "RUNONCE_TEST_EMULATOR_HOST"); got != nil {
		t.Errorf("EmulatorHint(nil) = %v", got)
	}
	t.Setenv("RUNONCE_TEST_EMULATOR_HOST", "127.0.0.1:1")
	if got := gcpenv.EmulatorHint(noCreds, "RUNONCE_TEST_EMULATOR_HOST"); got != noCreds {
		t.Errorf("EmulatorHint(no credentials, variable set) = %v, want the error unchanged", got)
	}
}
