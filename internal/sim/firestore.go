package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"cloud.google.com/go/firestore"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/firestoreledger"
)

// firestoreProject is the emulator's project the simulation's ledgers live in.
const firestoreProject = "runonce-sim"

// firestoreClient is the process's client of the emulator, made at the first use.
var firestoreClient struct {
	once   sync.Once
	client *firestore.Client
	err    error
}

// openFirestore opens a ledger on the Firestore emulator whose collections carry
// prefix, and whose documents are deleted when it is closed.
func openFirestore(ctx context.Context, prefix string) (ledger.Driver, error) {
	if os.Getenv(ServerEnv["firestore"]) == "" {
		return nil, fmt.Errorf("sim: backend firestore needs %s (scripts/services.sh starts the emulator)", ServerEnv["firestore"])
	}
	firestoreClient.once.Do(func() {
		firestoreClient.client, firestoreClient.err = firestore.NewClient(context.WithoutCancel(ctx), firestoreProject)
	})
	if firestoreClient.err != nil {
		return nil, fmt.Errorf("sim: Firestore emulator client: %w", firestoreClient.err)
	}
	c := firestoreClient.client
	l, err := firestoreledger.New(ctx, c, &firestoreledger.Options{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	return &droppedOnClose{Driver: l, drop: func() error {
		ctx := context.WithoutCancel(ctx)
		var errs []error
		for _, name := range []string{firestoreledger.RunsCollection, firestoreledger.EffectsCollection} {
			refs, err := c.Collection(prefix + name).DocumentRefs(ctx).GetAll()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			bw := c.BulkWriter(ctx)
			for _, ref := range refs {
				if _, err := bw.Delete(ref); err != nil {
					errs = append(errs, err)
				}
			}
			bw.End()
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("sim: delete the documents of Firestore prefix %s: %w", prefix, err)
		}
		return nil
	}}, nil
}
