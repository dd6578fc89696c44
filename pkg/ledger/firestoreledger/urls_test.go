package firestoreledger

import (
	"net/url"
	"strings"
	"testing"

	"github.com/runonce/runonce/pkg/internal/gcpenv"
)

// TestMissingEmulatorVariable: on a laptop without credentials, a firestore:// ledger
// that fails for want of them says that FIRESTORE_EMULATOR_HOST is unset. Not parallel:
// it sets the process's environment.
func TestMissingEmulatorVariable(t *testing.T) {
	for k, v := range gcpenv.LaptopEnv(t.TempDir(), gcpenv.FirestoreEmulator) {
		t.Setenv(k, v)
	}
	u, _ := url.Parse("firestore://laptop-project")
	_, err := OpenURL(t.Context(), u)
	if !gcpenv.NoCredentials(err) || !strings.Contains(err.Error(), "FIRESTORE_EMULATOR_HOST is unset: to use the emulator, export FIRESTORE_EMULATOR_HOST=") {
		t.Fatalf("OpenURL without credentials nor emulator = %v; want the missing credentials and the unset FIRESTORE_EMULATOR_HOST", err)
	}
}
