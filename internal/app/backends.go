package app

// The ledger backends both commands can open by URL.
import (
	_ "github.com/runonce/runonce/pkg/ledger/firestoreledger"
	_ "github.com/runonce/runonce/pkg/ledger/memory"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	_ "github.com/runonce/runonce/pkg/ledger/redisledger"
	_ "github.com/runonce/runonce/pkg/ledger/spannerledger"
	_ "github.com/runonce/runonce/pkg/ledger/sqlite"
)
