package benchbase

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Chain is the PostgreSQL floor of a worker's no-op job: a claim that creates the run
// running and the completion, each a statement taking the run's key ($1) and attempt ID
// ($2).
type Chain struct{ Claim, Complete string }

// Job runs the chain's two statements for a new run on pool.
func (c Chain) Job(pool *pgxpool.Pool) func(context.Context) error {
	return func(ctx context.Context) error {
		key, attempt := uuid.NewString(), uuid.NewString()
		if _, err := pool.Exec(ctx, c.Claim, key, attempt); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, c.Complete, key, attempt)
		return err
	}
}

// RawChain creates the raw chain's one-index table, chain, in schema and returns its
// statements: an INSERT … ON CONFLICT DO NOTHING of a running row, and the UPDATE that
// completes it (HOT: it changes no indexed column).
func RawChain(ctx context.Context, pool *pgxpool.Pool, schema string) (Chain, error) {
	table := pgx.Identifier{schema, "chain"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (key text PRIMARY KEY, status text, attempt_id text, deadline timestamptz)`); err != nil {
		return Chain{}, err
	}
	return Chain{
		`INSERT INTO ` + table + ` (key, status, attempt_id, deadline) VALUES ($1, 'running', $2, now() + interval '30 seconds') ON CONFLICT DO NOTHING`,
		`UPDATE ` + table + ` SET status = 'completed', deadline = NULL WHERE key = $1 AND attempt_id = $2`,
	}, nil
}

// SchemaChain is the raw chain's two statements on the PostgreSQL ledger's runs table in
// schema, with the history the ledger keeps when history is set (the claim's row in
// run_events; the completion's event is the row, completed_event): the floor of two
// statements on that schema.
func SchemaChain(schema string, history bool) Chain {
	runs, events := pgx.Identifier{schema, "runs"}.Sanitize(), pgx.Identifier{schema, "run_events"}.Sanitize()
	event := ""
	if history {
		event = ", completed_event = true"
	}
	c := Chain{
		`INSERT INTO ` + runs + ` (run_id, namespace, job, run_key, payload_hash, payload,
			status, attempt, attempt_id, deadline, attempts_made, last_error, created_at, updated_at, expire_at)
			VALUES ($1, 'ns', 'noop', $1, 'h', '\x7b7d', 'running', 1, $2, now() + interval '30 seconds', 0, '', now(), now(), now() + interval '14 days')
			ON CONFLICT DO NOTHING`,
		`UPDATE ` + runs + ` SET status = 'completed', attempts_made = attempts_made + 1, deadline = NULL,
			completed_at = now(), updated_at = now(), expire_at = now() + interval '14 days'` + event + ` WHERE run_id = $1 AND attempt_id = $2`,
	}
	if history {
		c.Claim = `WITH ins AS (` + c.Claim + ` RETURNING run_id)
			INSERT INTO ` + events + ` (run_id, at, kind, attempt) SELECT run_id, now(), 'started', 1 FROM ins`
	}
	return c
}
