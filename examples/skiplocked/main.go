// Command skiplocked is a runnable example of "claim then process" inside a runonce job,
// for users who keep their work in their own PostgreSQL table: each run claims rows with
// UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING, keyed by its run ID,
// and works through them with worker.Batch, one effect key per row. Two overlapping runs
// get different rows; a retried attempt of a run resumes its own claimed rows and claims
// no others; a later run picks up only what is left.
//
//	go run ./examples/skiplocked -db 'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
//
// It creates a schema of its own (dropped at the end), a reminders table of 1,000 rows and
// a runonce PostgreSQL ledger in the same database, runs two overlapping runs of the job
// send-reminders (the downstream fails once in the middle of the first one's batch, so
// that run is released and retried), then a third run, and prints what each did.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/ledger"
	_ "github.com/runonce/runonce/pkg/ledger/postgres"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

func main() {
	db := flag.String("db", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "skiplocked:", err)
		os.Exit(1)
	}
}

// Rows and claims of the example.
const (
	rows     = 1000
	perRun   = 300 // rows one run claims
	failAt   = 120 // the first run's call to the downstream that fails once, mid-batch
	jobName  = "send-reminders"
	schemaID = "skiplocked_example_"
)

// claimSQL is the article's claim, keyed by the run: rows nobody claimed, skipping rows
// another transaction holds locked, marked as this run's in the same statement.
const claimSQL = `
UPDATE reminders SET claimed_by = $1
WHERE id IN (
	SELECT id FROM reminders
	WHERE claimed_by IS NULL AND sent_at IS NULL
	ORDER BY id
	LIMIT $2
	FOR UPDATE SKIP LOCKED)
RETURNING id`

// mineSQL lists the rows a run claimed, in a stable order: the batch's items, the same
// on every attempt of the run.
const mineSQL = `SELECT id FROM reminders WHERE claimed_by = $1 ORDER BY id`

// sendReminders is the job: claim once per run (an attempt that finds rows already
// claimed by its run, by an earlier attempt, resumes them instead), then send each row
// under its own effect key and mark it sent.
func sendReminders(db *pgxpool.Pool, send func(ctx context.Context, row, key string) error) worker.HandlerFunc {
	return func(ctx context.Context, j *worker.Job) error {
		ids, err := claimed(ctx, db, mineSQL, j.RunID)
		if err != nil {
			return err
		}
		if len(ids) == 0 { // the run's first attempt, or one whose claim never committed
			if ids, err = claimed(ctx, db, claimSQL, j.RunID, perRun); err != nil {
				return err
			}
			sort.Strings(ids)
		}
		_, err = worker.Batch(ctx, "reminders", ids, func(ctx context.Context, row, key string) error {
			if err := send(ctx, row, key); err != nil {
				return err
			}
			_, err := db.Exec(ctx, `UPDATE reminders SET sent_at = now() WHERE id = $1 AND claimed_by = $2`, row, j.RunID)
			return err
		}, &worker.BatchOptions{Checkpoint: 50})
		return err
	}
}

func claimed(ctx context.Context, db *pgxpool.Pool, sql string, args ...any) ([]string, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("claim rows: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("claim rows: %w", err)
	}
	return ids, nil
}

// downstream is the reminder service: it deduplicates on Idempotency-Key and counts
// what it really sent per row.
type downstream struct {
	mu    sync.Mutex
	keys  map[string]string // key → row
	sent  map[string]int    // row → reminders sent
	calls atomic.Int64
	// failRun's call number failAt fails, once.
	failRun          string
	failAt, runCalls atomic.Int64
}

func (d *downstream) send(ctx context.Context, row, key string) error {
	d.calls.Add(1)
	if j, _ := worker.JobFromContext(ctx); j != nil && j.RunID == d.failRun && d.runCalls.Add(1) == d.failAt.Load() {
		d.failAt.Store(0)
		return errors.New("reminder service: 503")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.keys[key]; dup {
		return nil // a retried call: already sent
	}
	d.keys[key] = row
	d.sent[row]++
	return nil
}

func run(ctx context.Context, dsn string, out io.Writer) error {
	if dsn == "" {
		return errors.New("-db (or DATABASE_URL) is required: a PostgreSQL URL")
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	schema := schemaID + hex.EncodeToString(suffix)
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	defer db.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	if _, err := db.Exec(ctx, `CREATE TABLE reminders (id text PRIMARY KEY, claimed_by text, sent_at timestamptz);
		INSERT INTO reminders SELECT 'r-' || lpad(i::text, 4, '0') FROM generate_series(1, `+fmt.Sprint(rows)+`) i`); err != nil {
		return err
	}

	q.Del("search_path")
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	led, err := ledger.Open(ctx, u.String())
	if err != nil {
		return err
	}
	defer led.Close()
	runID := func(key string) string { return ledger.KeyedRunID("example", jobName, key) }
	down := &downstream{keys: map[string]string{}, sent: map[string]int{}, failRun: runID("2026-12-01")}
	down.failAt.Store(failAt)
	mux := worker.NewMux()
	mux.Handle(jobName, sendReminders(db, down.send))
	w, err := worker.New(&worker.Config{Ledger: led, Handler: mux, Lease: 10 * time.Second})
	if err != nil {
		return err
	}
	deliver := func(key string) (*ledger.Run, worker.Verdict) {
		id := ledger.Identity{RunID: runID(key), Namespace: "example", Job: jobName, Key: key, PayloadHash: ledger.PayloadHash(nil)}
		v := w.Process(ctx, &queue.Delivery{Message: &queue.Message{Identity: id, EnqueuedAt: time.Now()}, PublishTime: time.Now()})
		r, _ := led.Get(ctx, &ledger.GetParams{RunID: id.RunID})
		return r, v
	}

	// Two overlapping runs (say, a tick and a manual run): each claims its own rows.
	var a, b *ledger.Run
	var av, bv worker.Verdict
	var g errgroup.Group
	g.Go(func() error { a, av = deliver("2026-12-01"); return nil })
	g.Go(func() error { b, bv = deliver("manual-1"); return nil })
	_ = g.Wait()
	mine := func(runID string) []string {
		ids, err := claimed(ctx, db, mineSQL, runID)
		if err != nil {
			fmt.Fprintln(out, "read the claimed rows:", err)
		}
		return ids
	}
	mineA, mineB := mine(a.ID), mine(b.ID)
	fmt.Fprintf(out, "two overlapping runs claimed %d and %d rows, %d in common\n", len(mineA), len(mineB), common(mineA, mineB))
	for _, r := range []struct {
		run *ledger.Run
		v   worker.Verdict
	}{{a, av}, {b, bv}} {
		if r.v.Outcome == worker.OutcomeReleased { // the failed send: the next delivery retries
			before := down.calls.Load()
			again, v := deliver(r.run.Key)
			fmt.Fprintf(out, "a run released mid-batch was retried: attempt %d %s, resuming its own %d rows (%d sends)\n",
				again.Attempt, v.Outcome, len(mine(again.ID)), down.calls.Load()-before)
		}
	}
	third, v := deliver("2026-12-02")
	fmt.Fprintf(out, "a later run claimed %d of the rows left: %s\n", len(mine(third.ID)), v.Outcome)

	var sent, twice int
	for _, n := range down.sent {
		sent++
		if n > 1 {
			twice++
		}
	}
	var left int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM reminders WHERE sent_at IS NULL`).Scan(&left); err != nil {
		return err
	}
	fmt.Fprintf(out, "reminders sent: %d, sent twice: %d, rows left: %d\n", sent, twice, left)
	return nil
}

func common(a, b []string) int {
	in := map[string]bool{}
	for _, x := range a {
		in[x] = true
	}
	n := 0
	for _, x := range b {
		if in[x] {
			n++
		}
	}
	return n
}
