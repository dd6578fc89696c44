package app

// The ledger backends both commands can open by URL.
import (
	_ "github.com/runonce/runonce/pkg/ledger/firestore"
	_ "github.com/runonce/runonce/pkg/ledger/memory"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	_ "github.com/runonce/runonce/pkg/ledger/redis"
	_ "github.com/runonce/runonce/pkg/ledger/spanner"
	_ "github.com/runonce/runonce/pkg/ledger/sqlite"
)
