package spannerreceiver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/receivertest"
	"github.com/runonce/runonce/pkg/receiver/spannerreceiver"
)

const (
	testProject  = "runonce-test"
	testInstance = "projects/" + testProject + "/instances/receivertest"
)

// emulator skips the test when SPANNER_EMULATOR_HOST is unset, and fails it under CI=true.
func emulator(tb testing.TB) {
	tb.Helper()
	if os.Getenv("SPANNER_EMULATOR_HOST") == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("SPANNER_EMULATOR_HOST is not set, and CI=true: scripts/services.sh must start the Spanner emulator")
		}
		tb.Skip("set SPANNER_EMULATOR_HOST to run against the Spanner emulator (scripts/services.sh start DIR)")
	}
}

var shared struct {
	once  sync.Once
	admin *database.DatabaseAdminClient
	err   error
}

// adminClient is the tests' database admin client; the first call creates the instance.
func adminClient(tb testing.TB) *database.DatabaseAdminClient {
	tb.Helper()
	emulator(tb)
	shared.once.Do(func() {
		ctx := context.Background()
		ic, err := instance.NewInstanceAdminClient(ctx)
		if err != nil {
			shared.err = err
			return
		}
		defer ic.Close()
		op, err := ic.CreateInstance(ctx, &instancepb.CreateInstanceRequest{
			Parent: "projects/" + testProject, InstanceId: "receivertest",
			Instance: &instancepb.Instance{Config: "projects/" + testProject + "/instanceConfigs/emulator-config",
				DisplayName: "receivertest", NodeCount: 1},
		})
		if err == nil {
			_, err = op.Wait(ctx)
		}
		if err != nil && status.Code(err) != codes.AlreadyExists {
			shared.err = fmt.Errorf("create the test instance: %w", err)
			return
		}
		shared.admin, shared.err = database.NewDatabaseAdminClient(ctx)
	})
	if shared.err != nil {
		tb.Fatal(shared.err)
	}
	return shared.admin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.admin != nil {
		_ = shared.admin.Close()
	}
	os.Exit(code)
}

// newDatabase creates a database (with the store's tables unless bare), dropped in
// tb.Cleanup.
func newDatabase(tb testing.TB, bare bool) string {
	tb.Helper()
	admin := adminClient(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "r" + hex.EncodeToString(b[:])
	req := &databasepb.CreateDatabaseRequest{Parent: testInstance, CreateStatement: "CREATE DATABASE `" + id + "`"}
	if !bare {
		req.ExtraStatements = spannerreceiver.Schema
	}
	ctx := context.Background()
	op, err := admin.CreateDatabase(ctx, req)
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil {
		tb.Fatalf("create database %s: %v", id, err)
	}
	name := testInstance + "/databases/" + id
	tb.Cleanup(func() {
		if err := admin.DropDatabase(context.Background(), &databasepb.DropDatabaseRequest{Database: name}); err != nil {
			tb.Errorf("drop database %s: %v", name, err)
		}
	})
	return name
}

func open(tb testing.TB) receiver.Store {
	tb.Helper()
	client, err := spanner.NewClient(context.Background(), newDatabase(tb, false))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(client.Close)
	return spannerreceiver.New(client)
}

func TestConformance(t *testing.T) { receivertest.Run(t, receivertest.Harness{Open: open}) }

// Instances that open one bare database together create the tables once, and every one
// opens.
func TestConcurrentOpenMigrates(t *testing.T) {
	db := newDatabase(t, true)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			s, err := receiver.Open(t.Context(), "spanner://"+db)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
	}
	for _, bad := range []string{"spanner://projects/p/instances/i", "spanner://" + db + "?migrate=maybe", "spanner://" + db + "?x=1"} {
		if _, err := receiver.Open(t.Context(), bad); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}
