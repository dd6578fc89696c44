package ticks_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/spannerledger"
)

const spannerInstance = "projects/runonce-ticks/instances/ticks"

var spannerAdmin struct {
	once   sync.Once
	client *database.DatabaseAdminClient
	err    error
}

// openSpanner opens a ledger on a fresh database of the Spanner emulator
// (SPANNER_EMULATOR_HOST), dropped when the test ends.
func openSpanner(tb testing.TB) ledger.Driver {
	tb.Helper()
	ctx := context.Background()
	spannerAdmin.once.Do(func() {
		ic, err := instance.NewInstanceAdminClient(ctx)
		if err != nil {
			spannerAdmin.err = err
			return
		}
		defer ic.Close()
		op, err := ic.CreateInstance(ctx, &instancepb.CreateInstanceRequest{Parent: "projects/runonce-ticks", InstanceId: "ticks",
			Instance: &instancepb.Instance{Config: "projects/runonce-ticks/instanceConfigs/emulator-config", DisplayName: "ticks", NodeCount: 1}})
		if err == nil {
			_, err = op.Wait(ctx)
		}
		if err != nil && status.Code(err) != codes.AlreadyExists {
			spannerAdmin.err = fmt.Errorf("create the Spanner emulator's instance: %w", err)
			return
		}
		spannerAdmin.client, spannerAdmin.err = database.NewDatabaseAdminClient(ctx)
	})
	if spannerAdmin.err != nil {
		tb.Fatal(spannerAdmin.err)
	}
	admin := spannerAdmin.client
	name := "t" + unique()
	op, err := admin.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{Parent: spannerInstance,
		CreateStatement: "CREATE DATABASE `" + name + "`", ExtraStatements: spannerledger.Schema})
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil {
		tb.Fatalf("create Spanner database %s: %v", name, err)
	}
	db := spannerInstance + "/databases/" + name
	l, err := spannerledger.Open(ctx, db, &spannerledger.Options{NoMigrate: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		l.Close()
		_ = admin.DropDatabase(ctx, &databasepb.DropDatabaseRequest{Database: db})
	})
	return l
}
