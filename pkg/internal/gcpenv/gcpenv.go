// Package gcpenv explains the errors of Google Cloud clients that take their endpoint
// and credentials from the environment: Firestore, Spanner and Pub/Sub, which an
// emulator variable (FIRESTORE_EMULATOR_HOST, …) points at a local emulator.
package gcpenv

import (
	"fmt"
	"os"
	"strings"
)

// The emulator variables the Google Cloud clients honour.
const (
	FirestoreEmulator = "FIRESTORE_EMULATOR_HOST"
	SpannerEmulator   = "SPANNER_EMULATOR_HOST"
	PubSubEmulator    = "PUBSUB_EMULATOR_HOST"
)

// NoCredentials reports whether err says that Application Default Credentials were
// not found (the auth libraries' "could not find default credentials"; they have no
// sentinel for it).
func NoCredentials(err error) bool {
	return err != nil && strings.Contains(err.Error(), "could not find default credentials")
}

// EmulatorHint returns err, an error of opening a client of the service whose emulator
// variable is emulatorVar, wrapped with the likely cause on a laptop when it says that
// no credentials were found and the variable is unset: the emulator's variable is
// missing. Other errors are returned as they are.
func EmulatorHint(err error, emulatorVar string) error {
	if !NoCredentials(err) || os.Getenv(emulatorVar) != "" {
		return err
	}
	return fmt.Errorf("%w; %s is unset: to use the emulator, export %s=HOST:PORT (e.g. 127.0.0.1:8085, where it listens); "+
		"for Google Cloud, give this process credentials (gcloud auth application-default login, or a service account)",
		err, emulatorVar, emulatorVar)
}

// LaptopEnv is the environment of a laptop without Google credentials nor emulator:
// no key file, no gcloud configuration (under emptyDir, an empty directory), no
// metadata server host, and the emulator variables given unset. Tests set it to meet
// the errors such a laptop gets.
func LaptopEnv(emptyDir string, emulatorVars ...string) map[string]string {
	env := map[string]string{
		"GOOGLE_APPLICATION_CREDENTIALS": "",
		"HOME":                           emptyDir,
		"CLOUDSDK_CONFIG":                emptyDir,
		"GCE_METADATA_HOST":              "",
	}
	for _, v := range emulatorVars {
		env[v] = ""
	}
	return env
}
