package spannerledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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

// clockSQL reads Spanner's time.
const clockSQL = `SELECT CURRENT_TIMESTAMP()`

// fenceColumns are the columns of a run an effect's transition decides on: the fence.
// They are all it reads of the run (and so all it locks), so that it never waits on, nor
// aborts, the holder's renewal, which writes the lease's columns (deadline, updated_at,
// expire_at, progress).
var fenceColumns = []string{"run_id", "status", "attempt", "attempt_id"}

// stampOnly are the transitions whose verdict is the fence's alone and that grant or
// judge no lease: they only stamp times on what they write (completed_at, an effect's
// done_at, expire_at a retention later), and take Spanner's time as the ledger
// estimates it, as the ingress claim does (see the package doc).
var stampOnly = map[string]bool{"complete": true, "fail": true, "begin effect": true, "complete effect": true}

// transition runs transition op (what names its records in errors) in a read-write
// transaction (readWrite): read reads the records by key, which locks them until the
// commit, and returns the latest time any of them was written; decide takes the verdict
// at a time and returns the mutations, buffered and committed with the transaction, so
// the verdict holds when they land. The time is override (a params' Now) when set;
// otherwise:
//
//   - for a stampOnly transition, Spanner's time as the ledger estimates it;
//   - for the others, a verdict that writes nothing and is the same at the earliest and
//     the latest time Spanner's clock can read by the estimate (a duplicate delivery's
//     claim of a run held or finished, a fenced-out holder's write) holds whatever the
//     time within: it is answered without reading the clock (the local clock's drift
//     could only make it refuse a takeover or a rescue that became due a moment ago,
//     which the caller tries again);
//   - otherwise Spanner's clock, read in the transaction (clockSQL) after the records.
//
// The time is never before the records' last write, so their times never go back.
// Every read is one row by key, and a transition reads the clock only when its verdict
// depends on it: the emulator spends several times a key read on any query.
func (l *Ledger) transition(ctx context.Context, op, what string, override time.Time,
	read func(context.Context, *spanner.ReadWriteTransaction) (written time.Time, err error),
	decide func(now time.Time) ([]*spanner.Mutation, error),
) error {
	err := l.readWrite(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
		written, err := read(ctx, txn)
		if err != nil {
			return err
		}
		at := func(t time.Time) time.Time {
			if written.After(t) {
				return written
			}
			return t
		}
		var ms []*spanner.Mutation
		earliest, latest, known := l.clock.Bounds()
		switch {
		case !override.IsZero():
			ms, err = decide(override)
		case stampOnly[op] && known:
			ms, err = decide(at(earliest.Add(latest.Sub(earliest) / 2)))
		default:
			if known {
				msEarly, errEarly := decide(at(earliest))
				ms, err = decide(at(latest))
				if len(msEarly) == 0 && len(ms) == 0 && sameVerdict(errEarly, err) {
					return err
				}
			}
			sent := l.clock.Local()
			var now time.Time
			if err := txn.Query(ctx, spanner.Statement{SQL: clockSQL}).Do(func(r *spanner.Row) error { return r.Columns(&now) }); err != nil {
				return err
			}
			l.clock.Observe(sent, l.clock.Local(), now)
			ms, err = decide(at(now))
		}
		if err != nil || len(ms) == 0 {
			return err
		}
		return txn.BufferWrite(ms)
	})
	if err != nil && !isVerdict(err) {
		return interpretError(op+" "+what, err)
	}
	return err
}

// sameVerdict reports whether two verdicts of decide that write nothing are the same:
// both none, or the same refusal.
func sameVerdict(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error()
}

// readKey reads the row of table at key (cols, decoded into dst by name) in txn, and
// reports whether it exists. The read locks the row, or its absence, until the commit.
func readKey(ctx context.Context, txn *spanner.ReadWriteTransaction, table string, key spanner.Key, cols []string, dst any) (bool, error) {
	found := false
	err := txn.Read(ctx, table, key, cols).Do(func(r *spanner.Row) error {
		found = true
		return r.ToStructLenient(dst)
	})
	return found, err
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

// Claim implements ledger.Driver. A new run costs one RPC: a Commit of an insert mutation
// without a read (ApplyAtLeastOnce); a duplicate's insert fails with AlreadyExists and
// costs one strong read more. A run this ledger has seen exist (driver.KnownRuns: it
// created it, or a claim found it) is read first: its duplicate costs one strong read, no
// commit and so no lock (a rejected insert takes the row's write lock, which serialises
// the duplicates of a hot run); when that read finds it gone (swept), the claim inserts.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
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

// store is the driver.Store of the ledger: each update is one transition.
type store struct{ l *Ledger }

// UpdateRun implements driver.Store: it reads the whole run by key. The read locks the
// run, or the absence of it, until the commit, so a MustExist claim refused as absent,
// or a run left untouched for a payload mismatch, cannot change under it (a sweep's
// delete waits or aborts).
func (s store) UpdateRun(ctx context.Context, op, id string, override time.Time, decide func(cur *ledger.Run, now time.Time) (*ledger.Run, error)) error {
	var cur *ledger.Run
	return s.l.transition(ctx, op, "run "+id, override,
		func(ctx context.Context, txn *spanner.ReadWriteTransaction) (time.Time, error) {
			cur = nil
			var rr runRow
			found, err := readKey(ctx, txn, "runs", spanner.Key{id}, runColumns, &rr)
			if err != nil || !found {
				return time.Time{}, err
			}
			cur = rr.run()
			return cur.UpdatedAt, nil
		},
		func(now time.Time) ([]*spanner.Mutation, error) {
			var was []any
			if cur != nil {
				was = runValues(cur) // before decide, which may build its run on cur
			}
			next, err := decide(cur, now)
			return writeRun(was, next), err
		})
}

// UpdateEffect implements driver.Store: it reads the run's fence (fenceColumns: decide
// needs no more of it) and the effect, each by key.
func (s store) UpdateEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error)) error {
	var (
		run *ledger.Run
		cur *ledger.Effect
	)
	return s.l.transition(ctx, op, name+" of run "+runID, override,
		func(ctx context.Context, txn *spanner.ReadWriteTransaction) (time.Time, error) {
			run, cur = nil, nil
			var rr runRow
			found, err := readKey(ctx, txn, "runs", spanner.Key{runID}, fenceColumns, &rr)
			if err != nil {
				return time.Time{}, err
			}
			if found {
				run = rr.run()
			}
			var er effectRow
			found, err = readKey(ctx, txn, "effects", spanner.Key{runID, name}, effectColumns, &er)
			if err != nil || !found {
				return time.Time{}, err
			}
			cur = er.effect()
			return cur.UpdatedAt, nil
		},
		func(now time.Time) ([]*spanner.Mutation, error) {
			next, err := decide(run, cur, now)
			return writeEffect(next), err
		})
}

// UpdateRunAndEffect implements driver.Store: it reads the whole run and the effect,
// each by key, and the transaction writes both.
func (s store) UpdateRunAndEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)) error {
	var (
		run *ledger.Run
		cur *ledger.Effect
	)
	return s.l.transition(ctx, op, name+" of run "+runID, override,
		func(ctx context.Context, txn *spanner.ReadWriteTransaction) (time.Time, error) {
			run, cur = nil, nil
			var written time.Time
			var rr runRow
			found, err := readKey(ctx, txn, "runs", spanner.Key{runID}, runColumns, &rr)
			if err != nil {
				return time.Time{}, err
			}
			if found {
				run = rr.run()
				written = run.UpdatedAt
			}
			var er effectRow
			found, err = readKey(ctx, txn, "effects", spanner.Key{runID, name}, effectColumns, &er)
			if err != nil || !found {
				return written, err
			}
			cur = er.effect()
			if cur.UpdatedAt.After(written) {
				written = cur.UpdatedAt
			}
			return written, nil
		},
		func(now time.Time) ([]*spanner.Mutation, error) {
			var was []any
			if run != nil {
				was = runValues(run) // before decide, which may build its run on run
			}
			nextRun, next, err := decide(run, cur, now)
			return append(writeRun(was, nextRun), writeEffect(next)...), err
		})
}

// Get implements ledger.Driver with one strong read.
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

// GetEffect implements ledger.Driver with one strong read.
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

// ListRescue implements ledger.Driver with one strong read over the deadline index on
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

// Sweep implements ledger.Driver with one read-write transaction: it reads at most Limit
// expired runs over their expire_at index, on every shard (shard IN UNNEST, a range of
// the index each, in no order), and deletes them; a run's effects go with it
// (ON DELETE CASCADE), never before it. Spanner's row deletion policy deletes expired runs
// by itself; Sweep deletes them sooner.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	limit := int64(cmp.Or(p.Limit, defaultSweepLimit))
	var n int64
	err := l.readWrite(ctx, func(ctx context.Context, txn *spanner.ReadWriteTransaction) error {
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
