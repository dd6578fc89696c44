package spannerledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// Default bounds, as in the ledger's documentation.
const (
	defaultRescueLimit = 100
	defaultSweepLimit  = 500
)

// readRow is the answer of a transition's one query: Spanner's time, the run and (for the
// effect transitions) the effect, each absent when its columns are NULL.
type readRow struct {
	now time.Time
	r   runRow
	e   effectRow
}

func (row *readRow) run() *ledger.Run       { return row.r.run() }
func (row *readRow) effect() *ledger.Effect { return row.e.effect() }

func (row *readRow) decode(r *spanner.Row) error {
	if err := r.ColumnByName("now", &row.now); err != nil {
		return err
	}
	if err := r.ToStructLenient(&row.r); err != nil {
		return err
	}
	return r.ToStructLenient(&row.e)
}

// The queries that open a transition. They LEFT JOIN the records to a one-row table, so
// that Spanner's time comes back when a record is absent too.
const (
	readRunSQL = `SELECT CURRENT_TIMESTAMP() AS now, ` + selectRun + `
		FROM UNNEST([1]) AS one LEFT JOIN runs AS r ON r.run_id = @id`
	readEffectSQL = `SELECT CURRENT_TIMESTAMP() AS now, ` + selectRun + `, ` + selectEffect + `
		FROM UNNEST([1]) AS one LEFT JOIN runs AS r ON r.run_id = @id
		LEFT JOIN effects AS e ON e.run_id = @id AND e.name = @name`
)

// transact runs one read-write transaction: one query (sql with params) that reads
// Spanner's time and the records, then apply's mutations, buffered and committed with
// the transaction. The query's reads lock the rows until the commit, so the verdict
// apply takes over them holds when the mutations land. override (a params' Now, for
// tests) replaces Spanner's time when it is not zero.
func transact[T any](ctx context.Context, l *Ledger, op string, sql string, params map[string]any, override time.Time,
	apply func(row *readRow, now time.Time) ([]*spanner.Mutation, T, error),
) (T, error) {
	var out T
	sent := l.clock.Local()
	var serverNow time.Time
	_, err := l.readWrite(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		var row readRow
		err := txn.Query(ctx, spanner.Statement{SQL: sql, Params: params}).Do(row.decode)
		if err != nil {
			return err
		}
		serverNow = row.now
		ms, answer, err := apply(&row, cmp.Or(override, row.now))
		if err != nil {
			return err
		}
		out = answer
		if len(ms) == 0 {
			return nil
		}
		return txn.BufferWrite(ms)
	})
	if err != nil {
		var zero T
		if isVerdict(err) {
			return zero, err
		}
		return zero, interpretError(op, err)
	}
	l.clock.Observe(sent, l.clock.Local(), serverNow)
	return out, nil
}

// readWrite runs f in a read-write transaction. The client retries a transaction Spanner
// aborted; readWrite also retries, for at most retryFor, one whose transaction vanished
// before it committed (Transaction not found, an invalid transaction ID): the emulator,
// which runs one read-write transaction at a time, answers so to the losers of concurrent
// transactions, and nothing was committed. After that the answer is ErrContended.
func (l *Ledger) readWrite(ctx context.Context, f func(context.Context, *spanner.ReadWriteTransaction) error) (time.Time, error) {
	give := time.Now().Add(retryFor)
	for try := 0; ; try++ {
		ts, err := l.client.ReadWriteTransaction(ctx, f)
		if err == nil || !vanished(err) || time.Now().After(give) {
			return ts, err
		}
		backoff := min(maxBackoff, time.Millisecond<<min(try, 10))
		select {
		case <-ctx.Done():
			return ts, err
		case <-time.After(backoff/2 + time.Duration(rand.Int64N(int64(backoff)))):
		}
	}
}

// How long readWrite retries a vanished transaction, and its longest pause between tries.
const (
	retryFor   = 20 * time.Second
	maxBackoff = 100 * time.Millisecond
)

// vanished reports whether err says the transaction was gone before it committed.
func vanished(err error) bool {
	msg := err.Error()
	switch spanner.ErrCode(err) {
	case codes.NotFound:
		return strings.Contains(msg, "Transaction not found")
	case codes.FailedPrecondition:
		// The emulator's words for a transaction it rolled back under a concurrent
		// one (it runs one read-write transaction at a time).
		return strings.Contains(msg, "Invalid transaction ID") ||
			strings.Contains(msg, "after it has been committed or rolledback") ||
			strings.Contains(msg, "after it has been rolled back")
	case codes.Aborted:
		return true
	}
	return false
}

// nowParam is a params' Now as a query parameter: NULL (Spanner's time) when zero.
func nowParam(t time.Time) spanner.NullTime { return nullTime(driver.Micros(t)) }

// isVerdict reports whether err is the state machine's answer rather than Spanner's.
func isVerdict(err error) bool {
	return errors.Is(err, ledger.ErrLeaseLost) || errors.Is(err, ledger.ErrNotFound) ||
		errors.Is(err, ledger.ErrConflict) || errors.Is(err, ledger.ErrInvalid)
}

func runParams(id string) map[string]any { return map[string]any{"id": id} }

// writeRun returns the mutation that turns the run whose values (runValues) were was
// into r: nil for no write (r nil); every column for a run that was absent (was nil);
// otherwise an update of the key and the columns whose value changes, and updated_at,
// so that no transition writes the payload (as large as the ingress's -max-body lets
// it be), the run's identity or its creation time again. The run's effects need none: they have no
// deletion policy of their own and go only with the run.
func writeRun(was []any, r *ledger.Run) []*spanner.Mutation {
	if r == nil {
		return nil
	}
	vals := runValues(r)
	if was == nil {
		return []*spanner.Mutation{spanner.InsertOrUpdate("runs", runColumns, vals)}
	}
	cols, changed := []string{runColumns[0]}, []any{vals[0]}
	for i := 1; i < len(runColumns); i++ {
		if runColumns[i] == "updated_at" || !sameValue(was[i], vals[i]) {
			cols, changed = append(cols, runColumns[i]), append(changed, vals[i])
		}
	}
	return []*spanner.Mutation{spanner.Update("runs", cols, changed)}
}

// Claim implements ledger.Ledger. A new run costs one RPC: a Commit of an insert mutation
// without a read (ApplyAtLeastOnce); a duplicate's insert fails with AlreadyExists and
// costs one strong read more. A run this ledger has seen exist (driver.KnownRuns: it
// created it, or a claim found it) is read first: its duplicate costs one strong read, no
// commit and so no lock (a rejected insert takes the row's write lock, which serialises
// the duplicates of a hot run); when that read finds it gone (swept), the claim inserts.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	if l.known.Has(p.RunID) {
		cur, err := l.Get(ctx, &ledger.GetParams{RunID: p.RunID})
		if err == nil {
			return claimAnswer(cur, p), nil
		}
		if !errors.Is(err, ledger.ErrNotFound) {
			return nil, err
		}
		l.known.Forget(p.RunID)
	}
	now := p.Now
	if now.IsZero() {
		est, ok := l.clock.Now()
		if !ok {
			if err := l.calibrate(ctx); err != nil {
				return nil, err
			}
			est, _ = l.clock.Now()
		}
		now = est
	}
	// The record's times are Spanner's clock as estimated between round trips (see the
	// package doc, "The ingress claim and Spanner's clock").
	_, res, err := driver.ApplyClaim(nil, p, now)
	if err != nil {
		return nil, err
	}
	_, err = l.client.Apply(ctx, []*spanner.Mutation{spanner.Insert("runs", runColumns, runValues(res.Run))}, spanner.ApplyAtLeastOnce())
	if err == nil {
		l.known.Add(p.RunID)
		return res, nil
	}
	if spanner.ErrCode(err) != codes.AlreadyExists {
		return nil, interpretError("claim run "+p.RunID, err)
	}
	cur, err := l.Get(ctx, &ledger.GetParams{RunID: p.RunID})
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("%w: run %s existed at the claim and was deleted before its read", ledger.ErrContended, p.RunID)
	}
	if err != nil {
		return nil, err
	}
	l.known.Add(p.RunID)
	return claimAnswer(cur, p), nil
}

// claimAnswer is a claim's answer from the record that is there.
func claimAnswer(cur *ledger.Run, p *ledger.ClaimParams) *ledger.ClaimResult {
	// An insert the client replayed after its first try committed finds its own record.
	created := cur.Status == ledger.StatusQueued && cur.Attempt == 0 && cur.AttemptID == p.AttemptID
	return &ledger.ClaimResult{Run: cur, Created: created, PayloadMismatch: !created && cur.PayloadHash != p.PayloadHash}
}

// store is the driver.Store of the ledger: each update is one read-write transaction
// whose one query reads Spanner's time and the records (transact).
type store struct{ l *Ledger }

// UpdateRun implements driver.Store. The query's read locks the run, or the absence of
// it, until the commit, so a MustExist claim refused as absent, or a run left untouched
// for a payload mismatch, cannot change under it (a sweep's delete waits or aborts).
func (s store) UpdateRun(ctx context.Context, op, id string, override time.Time, decide func(cur *ledger.Run, now time.Time) (*ledger.Run, error)) error {
	_, err := transact(ctx, s.l, op+" run "+id, readRunSQL, runParams(id), override,
		func(row *readRow, now time.Time) ([]*spanner.Mutation, struct{}, error) {
			cur := row.run()
			var was []any
			if cur != nil {
				was = runValues(cur) // before decide, which may build its run on cur
			}
			next, err := decide(cur, now)
			return writeRun(was, next), struct{}{}, err
		})
	return err
}

// UpdateEffect implements driver.Store: the query reads the run (the fence) and the
// effect together.
func (s store) UpdateEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error)) error {
	_, err := transact(ctx, s.l, op+" "+name+" of run "+runID, readEffectSQL, effectParams(runID, name), override,
		func(row *readRow, now time.Time) ([]*spanner.Mutation, struct{}, error) {
			next, err := decide(row.run(), row.effect(), now)
			return writeEffect(next), struct{}{}, err
		})
	return err
}

// UpdateRunAndEffect implements driver.Store: the query reads the run and the effect
// together, and the transaction writes both.
func (s store) UpdateRunAndEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)) error {
	_, err := transact(ctx, s.l, op+" "+name+" of run "+runID, readEffectSQL, effectParams(runID, name), override,
		func(row *readRow, now time.Time) ([]*spanner.Mutation, struct{}, error) {
			run := row.run()
			var was []any
			if run != nil {
				was = runValues(run) // before decide, which may build its run on run
			}
			nextRun, next, err := decide(run, row.effect(), now)
			return append(writeRun(was, nextRun), writeEffect(next)...), struct{}{}, err
		})
	return err
}

// Get implements ledger.Ledger with one strong read.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	var rr runRow
	found := false
	err := l.client.Single().Query(ctx, spanner.Statement{
		SQL:    `SELECT ` + selectRun + ` FROM runs AS r WHERE r.run_id = @id`,
		Params: runParams(p.RunID),
	}).Do(func(r *spanner.Row) error {
		found = true
		return r.ToStructLenient(&rr)
	})
	if err != nil {
		return nil, interpretError("get run "+p.RunID, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	return rr.run(), nil
}

func effectParams(runID, name string) map[string]any {
	return map[string]any{"id": runID, "name": name}
}

func writeEffect(e *ledger.Effect) []*spanner.Mutation {
	if e == nil {
		return nil
	}
	return []*spanner.Mutation{spanner.InsertOrUpdate("effects", effectColumns, effectValues(e))}
}

// GetEffect implements ledger.Ledger with one strong read.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	var er effectRow
	found := false
	err := l.client.Single().Query(ctx, spanner.Statement{
		SQL:    `SELECT ` + selectEffect + ` FROM effects AS e WHERE e.run_id = @id AND e.name = @name`,
		Params: effectParams(p.RunID, p.Name),
	}).Do(func(r *spanner.Row) error {
		found = true
		return r.ToStructLenient(&er)
	})
	if err != nil {
		return nil, interpretError("get effect "+p.Name+" of run "+p.RunID, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: effect %q of run %s", ledger.ErrNotFound, p.Name, p.RunID)
	}
	return er.effect(), nil
}

// ListRescue implements ledger.Ledger with one strong read over the deadline index on
// every shard (perShard), oldest deadline first.
func (l *Ledger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	out, err := l.queryRuns(ctx, spanner.Statement{
		SQL: perShard(func(s int) string {
			return fmt.Sprintf(`SELECT `+selectRun+` FROM runs@{FORCE_INDEX=runs_by_shard_deadline, spanner_emulator.disable_query_null_filtered_index_check=true} AS r
			WHERE r.shard = %d AND r.deadline < COALESCE(@now, CURRENT_TIMESTAMP()) AND r.status IN ('queued', 'running')
			ORDER BY r.deadline LIMIT @limit`, s)
		}, "deadline, run_id"),
		Params: map[string]any{"now": nowParam(p.Now), "limit": int64(cmp.Or(p.Limit, defaultRescueLimit))},
	})
	if err != nil {
		return nil, interpretError("list runs to rescue", err)
	}
	return out, nil
}

// queryRuns runs stmt, a query of runs, in a strong single-use read.
func (l *Ledger) queryRuns(ctx context.Context, stmt spanner.Statement) ([]*ledger.Run, error) {
	var out []*ledger.Run
	err := l.client.Single().Query(ctx, stmt).Do(func(r *spanner.Row) error {
		var rr runRow
		if err := r.ToStructLenient(&rr); err != nil {
			return err
		}
		out = append(out, rr.run())
		return nil
	})
	return out, err
}

// allShards returns the values of the runs' shard column, for a query of every shard.
func allShards() []int64 {
	out := make([]int64, Shards)
	for s := range out {
		out[s] = int64(s)
	}
	return out
}

// Sweep implements ledger.Ledger with one read-write transaction: it reads at most Limit
// expired runs over their expire_at index, on every shard (shard IN UNNEST, a range of
// the index each, in no order), and deletes them; a run's effects go with it
// (ON DELETE CASCADE), never before it. Spanner's row deletion policy deletes expired runs
// by itself; Sweep deletes them sooner.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	limit := int64(cmp.Or(p.Limit, defaultSweepLimit))
	var n int64
	_, err := l.readWrite(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		n = 0
		var ms []*spanner.Mutation
		collect := func(sql, table string, keyCols int) error {
			return txn.Query(ctx, spanner.Statement{SQL: sql, Params: map[string]any{"now": nowParam(p.Now), "limit": limit - n, "shards": allShards()}}).
				Do(func(r *spanner.Row) error {
					key := make(spanner.Key, keyCols)
					for i := range key {
						var s string
						if err := r.Column(i, &s); err != nil {
							return err
						}
						key[i] = s
					}
					ms = append(ms, spanner.Delete(table, key))
					n++
					return nil
				})
		}
		if err := collect(`SELECT run_id FROM runs@{FORCE_INDEX=runs_by_shard_expire_at}
			WHERE shard IN UNNEST(@shards) AND expire_at < COALESCE(@now, CURRENT_TIMESTAMP()) LIMIT @limit`, "runs", 1); err != nil {
			return err
		}
		return txn.BufferWrite(ms)
	})
	if err != nil {
		return 0, interpretError("sweep", err)
	}
	return int(n), nil
}
