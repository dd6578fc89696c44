package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runonce/runonce/pkg/ledger"
	spannerledger "github.com/runonce/runonce/pkg/ledger/spannerledger"
)

const (
	spannerProject  = "runonce-sim"
	spannerInstance = "projects/" + spannerProject + "/instances/sim"
)

// spannerAdmin is the process's database admin client on the emulator; the first use
// creates the simulation's instance.
var spannerAdmin struct {
	once   sync.Once
	client *database.DatabaseAdminClient
	err    error
}

func spannerAdminClient(ctx context.Context) (*database.DatabaseAdminClient, error) {
	spannerAdmin.once.Do(func() {
		ic, err := instance.NewInstanceAdminClient(ctx)
		if err != nil {
			spannerAdmin.err = err
			return
		}
		defer ic.Close()
		op, err := ic.CreateInstance(ctx, &instancepb.CreateInstanceRequest{
			Parent: "projects/" + spannerProject, InstanceId: "sim",
			Instance: &instancepb.Instance{Config: "projects/" + spannerProject + "/instanceConfigs/emulator-config", DisplayName: "sim", NodeCount: 1},
		})
		if err == nil {
			_, err = op.Wait(ctx)
		}
		if err != nil && status.Code(err) != codes.AlreadyExists {
			spannerAdmin.err = fmt.Errorf("sim: create the Spanner emulator's instance: %w", err)
			return
		}
		spannerAdmin.client, spannerAdmin.err = database.NewDatabaseAdminClient(context.WithoutCancel(ctx))
	})
	return spannerAdmin.client, spannerAdmin.err
}

// openSpanner opens a ledger on a fresh database of the Spanner emulator, dropped when
// the ledger is closed.
func openSpanner(ctx context.Context, name string) (ledger.Driver, error) {
	if os.Getenv(ServerEnv["spanner"]) == "" {
		return nil, fmt.Errorf("sim: backend spanner needs %s (scripts/services.sh starts the emulator)", ServerEnv["spanner"])
	}
	admin, err := spannerAdminClient(ctx)
	if err != nil {
		return nil, err
	}
	op, err := admin.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{
		Parent: spannerInstance, CreateStatement: "CREATE DATABASE `" + name + "`", ExtraStatements: spannerledger.Schema,
	})
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("sim: create Spanner database %s: %w", name, err)
	}
	db := spannerInstance + "/databases/" + name
	l, err := spannerledger.Open(ctx, db, &spannerledger.Options{NoMigrate: true})
	if err != nil {
		return nil, err
	}
	return &droppedOnClose{Driver: l, drop: func() error {
		return admin.DropDatabase(context.WithoutCancel(ctx), &databasepb.DropDatabaseRequest{Database: db})
	}}, nil
}

type droppedOnClose struct {
	ledger.Driver
	drop func() error
}

func (d *droppedOnClose) Close() error { return errors.Join(d.Driver.Close(), d.drop()) }
