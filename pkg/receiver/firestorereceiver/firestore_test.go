package firestorereceiver_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/firestore"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/firestorereceiver"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
)

const testProject = "runonce-test"

// emulator skips the test when FIRESTORE_EMULATOR_HOST is unset, and fails it under
// CI=true.
func emulator(tb testing.TB) {
	tb.Helper()
	if os.Getenv("FIRESTORE_EMULATOR_HOST") == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("FIRESTORE_EMULATOR_HOST is not set, and CI=true: scripts/services.sh must start the Firestore emulator")
		}
		tb.Skip("set FIRESTORE_EMULATOR_HOST to run against the Firestore emulator (scripts/services.sh start DIR)")
	}
}

var shared struct {
	once   sync.Once
	client *firestore.Client
	err    error
}

func sharedClient(tb testing.TB) *firestore.Client {
	tb.Helper()
	emulator(tb)
	shared.once.Do(func() { shared.client, shared.err = firestore.NewClient(context.Background(), testProject) })
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.client
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.client != nil {
		_ = shared.client.Close()
	}
	os.Exit(code)
}

// uniquePrefix isolates one test's store in the shared emulator.
func uniquePrefix() string { return "t" + strings.ReplaceAll(uuid.NewString(), "-", "") + "_" }

func open(tb testing.TB) receiver.Store {
	return firestorereceiver.New(sharedClient(tb), &firestorereceiver.Options{Prefix: uniquePrefix()})
}

func TestConformance(t *testing.T) { receivertest.Run(t, receivertest.Harness{Open: open}) }

func TestOpenByURL(t *testing.T) {
	emulator(t)
	s, err := receiver.Open(t.Context(), "firestore://"+testProject+"?prefix="+uniquePrefix())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, bad := range []string{"firestore://p?timeout=1s", "firestore://p/db/x", "firestore:///db"} {
		if _, err := receiver.Open(t.Context(), bad); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}
