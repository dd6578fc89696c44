// Package postgres is the PostgreSQL ledger backend, for teams that run their own database
// or Cloud SQL. It is opened by postgres:// and postgresql:// URLs (import the package for
// its side effect) or built with New (over a caller's pgxpool.Pool) or Open (over a DSN).
//
//	import _ "github.com/runonce/runonce/pkg/ledger/postgres"
//	l, err := ledger.Open(ctx, "postgres://runonce@db/app?sslmode=verify-full&schema=runonce")
//
// The URL's query parameters schema (Options.Schema) and migrate (migrate=false is
// Options.NoMigrate) are runonce's and are removed before the URL reaches pgx; any other
// parameter named runonce… is refused, and the rest are pgx's (sslmode, pool_max_conns,
// default_query_exec_mode, …) or server settings (application_name, statement_timeout).
// Unless the DSN sets pool_max_conns, the pool holds up to DefaultMaxConns (32)
// connections, opened on demand (Options.MaxConns changes that default): pgxpool's own
// default of 4 throttles an ingress at a quarter of its rate. Set pool_max_conns to fit
// the server's max_connections across every process.
//
// Open's connections also plan the ledger's statements as they are written, unless the
// DSN chooses otherwise (ConfigureConn): each statement is planned once per connection and
// that plan kept (plan_cache_mode=force_generic_plan), and reads by an index
// (enable_seqscan, enable_hashjoin and enable_mergejoin off). Every statement about given
// runs finds each by its primary key, whatever its arguments and however large the
// planner believes the tables, so one plan serves all of them. A pool passed to New
// should be configured the same way.
//
// # Guarantees
//
// Every transition that applies is one SQL statement, so one round trip to the database,
// with no client-side transaction: the ingress claim, the worker claim of a queued run,
// renew, complete, release, fail, expedite, rescue and both effect writes. When a fenced
// transition does not apply (a repeat, a lost lease), a second statement reads the run
// for the verdict: the statement that writes does not carry that read, which every
// execution would pay to start. A worker claim's statement takes a queued run with a
// conditional UPDATE (the usual case, cheaper than an upsert) or creates an absent one
// with an INSERT … ON CONFLICT DO NOTHING (the statement carries the payload for that, so
// a run whose payload is over 8 KiB is created by the upsert instead) and, when neither
// wrote (a held or finished run, a takeover), runs the upsert that decides every case:
// two statements. The ingress claim is an INSERT … ON CONFLICT DO NOTHING that reads the
// existing run in the same statement, so a duplicate is a read: no row version, no WAL
// record, no row lock (duplicates of one hot run do not queue behind each other). In the
// one race it cannot see — the conflicting run was committed by a concurrent claim after
// the statement's snapshot — a second statement reads it.
//
// Concurrent ingress claims share statements, as River's batch completer shares
// completions (and so do worker claims and completions, below): up to Options.Batches
// claim statements of a ledger run at once, by default one (DefaultBatches). A claim
// that finds one free runs alone, at once, with the statement above; claims that arrive
// while all are busy wait for the next to finish and go together in one statement (at
// most MaxBatch), each run a row of it. A statement's fixed cost (its round trip, parse
// and bind, executor start-up, commit and WAL flush) is most of a claim's, so under load
// a claim costs a fraction of one statement. One at a time makes the batches as large
// as the load: the database commits once for all of them, and several processes still
// run their statements side by side. A database with cores to spare and statements slow
// to answer (far away, or waiting on locks) may do more with more (Options.Batches, or
// the URL's batches=N; batches=off turns batching off). Several claims of one run in a
// batch are one row: the first is the claim, the others its duplicates, as if they came
// just after it.
// A batch is one transaction: if it fails, every claim in it fails (retryable; none is
// written). A claim whose context ends while it waits answers at once with
// ErrUnavailable: its batch may still write it, as a statement cut short may.
//
// Worker claims and completions are batched the same way, each kind on its own lanes:
// one statement takes, creates (or completes) every run of the batch whose condition
// holds, and each of the others (a held or finished run, a stale fence, a repeat, a
// second call for a run already in the batch) is decided alone with the statements
// above, so that every answer is the one it would have been unbatched.
//
// Each statement is conditional on the record it changes (the fence: status, attempt
// number and attempt ID), and the rows it returns say what happened; when it changed
// nothing, the record as it stands is read (under a row lock, so that it is the latest
// committed version, not a snapshot's: by the worker claim's upsert, or by the fenced
// transitions' second statement), and the verdict — an idempotent repeat, ErrLeaseLost
// with what the record holds, Held until …, Terminal — is taken by the pure rules of
// package ledger (driver.ApplyComplete and friends) over that record, so the two cannot
// disagree.
//
// Time comes from the database: every statement computes coalesce($now, now()), so leases,
// deadlines and expiry are judged by PostgreSQL's clock, never the caller's; a params' Now
// replaces it for tests. Times are stored as timestamptz (microseconds) and returned in UTC.
//
// Native errors are mapped in one place: serialization failures, deadlocks and lock
// timeouts are ledger.ErrContended; connection failures, shutdowns and timeouts are
// ledger.ErrUnavailable. The statements are written for READ COMMITTED, PostgreSQL's
// default: there they raise no serialization failures, and none deadlocks with another,
// since each locks at most one run and then one of its effects (the sweep skips locked
// rows instead of waiting).
//
// # Schema
//
// The tables live in the schema Options.Schema names (the URL's schema parameter), created
// if missing, or in the connection's current schema when none is given:
//
//	runs(run_id text PRIMARY KEY, namespace, job, run_key, schedule_time, payload_hash,
//	     payload, status, attempt, attempt_id, deadline, not_before, attempts_made, last_error,
//	     created_at, updated_at, completed_at, expire_at, took_over, result, progress)
//	  runs_rescue_idx    ON runs (deadline) WHERE status IN ('queued', 'running')
//	  runs_expire_at_idx ON runs (expire_at)
//	  runs_created_idx ON runs (created_at DESC, run_id COLLATE "C" DESC)
//	  runs_status_updated_idx ON runs (status, updated_at DESC, run_id COLLATE "C" DESC)
//	                     the operators' listing, newest first: two indexes serve every
//	                     filter (migration 0007), since each index costs every
//	                     transition a write; the run ID in the C collation, so that
//	                     only the primary key finds a run by its ID (migration 0009)
//	effects(effect_key text PRIMARY KEY, run_id, name, status, attempt, ref,
//	        created_at, updated_at, done_at, expire_at)
//	  effects_expire_at_idx ON effects (expire_at)
//	  effects_run_idx ON effects (run_id, name)
//	run_events(run_id, seq, at, kind, attempt, worker, actor, text)   a run's history:
//	           each transition's statement adds its events in a data-modifying CTE; Get
//	           reads the latest 50; the sweep's statement deletes them with their run (no
//	           foreign key: its check trigger ran in every transition). The ingress
//	           claim's event is no row of it: the claim sets runs.ingress_claim, and Get
//	           puts the event (at created_at, attempt 0) first (migration 0008); nor is
//	           the completion's: completed is terminal, so the completing statements set
//	           runs.completed_event, and Get puts the event (at completed_at, of the
//	           run's attempt) last (migration 0010)
//
// The operators' transitions (Retry, Cancel, OperatorRelease, ResolveEffect) are rare:
// each is one transaction that locks the run (and the effect it resolves), decides with
// the driver's rule and writes.
//
// Migrations are embedded (goose, versioned in goose_db_version in the same schema) and
// applied when the ledger opens, under a PostgreSQL session advisory lock keyed by the
// schema so that instances starting together do not race. Teams that migrate in a pipeline
// set Options.NoMigrate (migrate=false in the URL) and run cmd/runonce-migrate or Migrate.
//
// Sweep deletes expired runs and effects in bounded batches (at most Limit rows per call,
// skipping rows other statements hold locked), so it never holds long locks.
package postgres
