// Command runonce-migrate applies the PostgreSQL ledger's schema migrations, for teams that
// migrate in their deployment pipeline and open the ledger with migrate=false. It takes
// the same ledger URL as the ingress and the worker (schema and pool parameters included)
// and is safe to run while other instances start: migrations are serialized by a
// PostgreSQL session advisory lock. Every flag is also read from RUNONCE_<FLAG>.
//
//	runonce-migrate -ledger 'postgres://runonce@db/app?sslmode=verify-full&schema=runonce'
package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/runonce/runonce/internal/config"
	"github.com/runonce/runonce/pkg/ledger/postgres"
)

func main() {
	config.Main("runonce-migrate", func(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
		return run(ctx, args, env, stdout, stderr)
	})
}

func run(ctx context.Context, args []string, env config.Env, out, stderr io.Writer) error {
	fs := config.NewFlagSet("runonce-migrate", "applies the PostgreSQL ledger's schema migrations (for pipelines that open the ledger with migrate=false).")
	fs.SetOutput(stderr)
	ledgerURL := fs.String("ledger", "", "ledger URL: postgres://… or postgresql://… (required)")
	schema := fs.String("schema", "", "schema to migrate (default: the URL's schema parameter, else the connection's current schema)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long, waiting for the migration lock included")
	parsed, err := config.Parse(fs, args, env)
	if err != nil {
		return err
	}
	if len(parsed.Unknown) > 0 {
		fmt.Fprintf(stderr, "runonce-migrate: warning: %s: %s\n", config.UnknownWarning("runonce-migrate"), strings.Join(parsed.UnknownList(), ", "))
	}
	if !strings.HasPrefix(*ledgerURL, postgres.Scheme+"://") && !strings.HasPrefix(*ledgerURL, postgres.SchemeAlias+"://") {
		return config.Usagef("-ledger (or %s) must be a postgres:// or postgresql:// URL", config.EnvName("ledger"))
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := postgres.Migrate(ctx, *ledgerURL, *schema)
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(out, "up to date at version %d\n", res.Version)
		return nil
	}
	fmt.Fprintf(out, "applied %v; now at version %d\n", res.Applied, res.Version)
	return nil
}
