package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// Default bounds, as in the ledger's documentation.
const (
	defaultRescueLimit = 100
	defaultSweepLimit  = 500
)

// claimTries bounds how often Claim starts over when the run it conflicted with is gone
// by the time it reads it (deleted by a sweep in between: expired, so practically never).
const claimTries = 3

// Claim implements ledger.Driver with one INSERT … ON CONFLICT DO NOTHING statement that
// also reads the existing run: a duplicate writes nothing. Only when the conflicting run
// was committed after the statement's snapshot does a second statement read it.
//
// Concurrent claims share statements (Options.Batches): a claim that arrives while
// every batch lane is busy goes in the next batch, one statement for all of them.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	if l.claims == nil {
		return l.claimOne(ctx, p)
	}
	res, answered, err := l.claims.do(ctx, p)
	if !answered {
		return nil, interpretError("claim run "+p.RunID+" (it may be written: its batch had not answered)", err)
	}
	return res, err
}

// claimOne claims one run with its own statement.
func (l *Ledger) claimOne(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	for range claimTries {
		var (
			created bool
			s       runScan
		)
		dest := append([]any{&created}, s.dest()...)
		err := l.pool.QueryRow(ctx, l.q.claim, timeArg(p.Now),
			p.RunID, p.Namespace, p.Job, p.Key, timeArg(p.ScheduleTime), p.PayloadHash, p.AttemptID,
			micros(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)), micros(retention(p.Retention)), p.Payload,
		).Scan(dest...)
		if errors.Is(err, pgx.ErrNoRows) {
			// The run was committed after the statement's snapshot: a new statement sees it.
			err = l.pool.QueryRow(ctx, l.q.claimLatest, p.RunID).Scan(dest...)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // swept in between: claim again
			}
		}
		if err != nil {
			return nil, interpretError("claim run "+p.RunID, err)
		}
		return claimed(p, s.run(), created), nil
	}
	return nil, fmt.Errorf("postgres: claim run %s: it was deleted under %d claims in a row: %w", p.RunID, claimTries, ledger.ErrContended)
}

func claimed(p *ledger.ClaimParams, r *ledger.Run, created bool) *ledger.ClaimResult {
	return &ledger.ClaimResult{Run: r, Created: created, PayloadMismatch: !created && r.PayloadHash != p.PayloadHash}
}

type claimCall = call[*ledger.ClaimParams, *ledger.ClaimResult]

// claimBatch answers a batch of claims. One alone takes claimOne's statement; more take
// queries/claim_batch.sql, one row per run: of several claims of one run in the batch the
// first is the claim and the others its duplicates, answered as if they came after it. A run
// the statement did not return (committed after its snapshot, or swept) is claimed
// again alone.
func (l *Ledger) claimBatch(ctx context.Context, batch []*claimCall) {
	if len(batch) == 1 {
		batch[0].out, batch[0].err = l.claimOne(ctx, batch[0].in)
		return
	}
	var (
		firsts                                 []*claimCall                              // the first claim of each run, in batch order
		byID                                   = make(map[string]*claimCall, len(batch)) // firsts by run ID
		now                                    []*time.Time
		sched                                  []*time.Time
		ids, nss, jobs, keys, hashes, attempts []string
		pickups, retentions                    []int64
		payloads                               [][]byte
	)
	for _, c := range batch {
		p := c.in
		if byID[p.RunID] != nil {
			continue
		}
		byID[p.RunID] = c
		firsts = append(firsts, c)
		now, sched = append(now, timePtr(p.Now)), append(sched, timePtr(p.ScheduleTime))
		ids, nss, jobs, keys = append(ids, p.RunID), append(nss, p.Namespace), append(jobs, p.Job), append(keys, p.Key)
		hashes, attempts = append(hashes, p.PayloadHash), append(attempts, p.AttemptID)
		pickups = append(pickups, micros(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)))
		retentions = append(retentions, micros(retention(p.Retention)))
		payloads = append(payloads, p.Payload)
	}
	type row struct {
		run     *ledger.Run
		created bool
	}
	got := make(map[string]row, len(firsts))
	rows, err := l.pool.Query(ctx, l.q.claimBatch, now, ids, nss, jobs, keys, sched, hashes, attempts, pickups, retentions, payloads)
	if err == nil {
		for rows.Next() {
			var (
				created bool
				s       runScan
			)
			if err = rows.Scan(append([]any{&created}, s.dest()...)...); err != nil {
				break
			}
			r := s.run()
			got[r.ID] = row{r, created}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		err = interpretError(fmt.Sprintf("claim run (in a batch of %d claims)", len(firsts)), err)
		for _, c := range batch {
			c.err = err
		}
		return
	}
	for _, c := range firsts {
		if r, ok := got[c.in.RunID]; ok {
			c.out = claimed(c.in, r.run, r.created)
			continue
		}
		c.out, c.err = l.claimOne(ctx, c.in)
	}
	for _, c := range batch {
		first := byID[c.in.RunID]
		if first == c {
			continue
		}
		if first.err != nil {
			c.err = first.err
			continue
		}
		r := *first.out.Run
		c.out = claimed(c.in, &r, false)
	}
}

// Expedite implements ledger.Driver with one conditional UPDATE.
func (l *Ledger) Expedite(ctx context.Context, p *ledger.ExpediteParams) (*ledger.Run, error) {
	return l.fenced(ctx, "expedite", l.q.expedite, p.RunID,
		[]any{timeArg(p.Now), p.RunID, p.AttemptID, micros(retention(p.Retention))},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			next, err := driver.ApplyExpedite(cur, p, now)
			return next, next, err
		})
}

// Acquire implements ledger.Driver: a queued run that exists and may be taken now, or a
// run that does not exist yet, the usual cases, with one statement; anything else with
// one INSERT … ON CONFLICT DO UPDATE statement after it (see queries/acquire_queued.sql).
func (l *Ledger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	if l.acquires != nil {
		res, answered, err := l.acquires.do(ctx, p)
		if !answered {
			return nil, interpretError("acquire run "+p.RunID+" (it may be taken: its batch had not answered)", err)
		}
		return res, err
	}
	return l.acquireOne(ctx, p)
}

// acquireOne is a worker claim with its own statements.
func (l *Ledger) acquireOne(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	var (
		written bool
		s       runScan
		now     time.Time
	)
	payload, noCreate := createArgs(p)
	err := l.pool.QueryRow(ctx, l.q.acquireQueued, timeArg(p.Now), p.RunID, p.PayloadHash, p.AttemptID,
		micros(cmp.Or(p.Lease, ledger.DefaultLease)), micros(retention(p.Retention)), driver.ClipText(p.Worker),
		p.Namespace, p.Job, p.Key, timeArg(p.ScheduleTime), payload, noCreate,
	).Scan(append(append([]any{&written}, s.dest()...), &now)...)
	switch {
	case err == nil:
		return &ledger.AcquireResult{Outcome: ledger.OutcomeAcquired, Run: s.run()}, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, interpretError("acquire run "+p.RunID, err)
	}
	return l.acquireAny(ctx, p)
}

// createInline is the largest payload a worker claim's first statement carries, to create
// the run if it is absent: every claim of a queued run (the usual case, which does not
// need it) would carry it too. A run with a larger payload that is absent is created by
// the upsert after.
const createInline = 8 << 10

// createArgs returns what a worker claim's first statement creates an absent run with:
// its payload, and noCreate when it must not create it (the run must exist, or its
// payload is larger than createInline; the payload is then not sent).
func createArgs(p *ledger.AcquireParams) (payload []byte, noCreate bool) {
	if p.MustExist || len(p.Payload) > createInline {
		return nil, true
	}
	return p.Payload, false
}

// acquireAny is a worker claim that queries/acquire_queued.sql neither took nor created:
// the upsert (queries/acquire.sql) decides it.
func (l *Ledger) acquireAny(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	var (
		written bool
		s       runScan
		now     time.Time
		q       interface {
			QueryRow(context.Context, string, ...any) pgx.Row
		} = l.pool
	)
	lease := micros(cmp.Or(p.Lease, ledger.DefaultLease))
	if p.MustExist {
		// Lock the run first, in a transaction, so that no sweep deletes it between the
		// check and the claim (which would then create it).
		tx, err := l.pool.Begin(ctx)
		if err != nil {
			return nil, interpretError("acquire run "+p.RunID, err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
		var one int
		if err := tx.QueryRow(ctx, l.q.lockRun, p.RunID).Scan(&one); err != nil {
			return nil, interpretError("acquire run "+p.RunID+" (which must exist)", err)
		}
		q = tx
	}
	err := q.QueryRow(ctx, l.q.acquire, timeArg(p.Now),
		p.RunID, p.Namespace, p.Job, p.Key, timeArg(p.ScheduleTime), p.PayloadHash, p.AttemptID,
		lease, micros(retention(p.Retention)), p.Payload,
		driver.ClipText(p.Worker),
	).Scan(append(append([]any{&written}, s.dest()...), &now)...)
	if err != nil {
		return nil, interpretError("acquire run "+p.RunID, err)
	}
	if tx, ok := q.(pgx.Tx); ok {
		if err := tx.Commit(ctx); err != nil {
			return nil, interpretError("acquire run "+p.RunID+": commit", err)
		}
	}
	r := s.run()
	if written && r.Status == ledger.StatusRunning && r.AttemptID == p.AttemptID {
		return &ledger.AcquireResult{Outcome: ledger.OutcomeAcquired, Run: r}, nil
	}
	// Nothing taken: the state machine says why (held until …, or terminal).
	next, res, err := driver.ApplyAcquire(r, p, now)
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent("acquire", p.RunID, r)
	}
	return res, nil
}

// Renew implements ledger.Driver with one fenced UPDATE.
func (l *Ledger) Renew(ctx context.Context, p *ledger.RenewParams) (*ledger.Run, error) {
	return l.fenced(ctx, "renew", l.q.renew, p.RunID,
		[]any{timeArg(p.Now), p.RunID, p.Attempt, p.AttemptID, micros(cmp.Or(p.Lease, ledger.DefaultLease)), micros(retention(p.Retention)), nullBytes(p.Progress)},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			next, err := driver.ApplyRenew(cur, p, now)
			return next, next, err
		})
}

// Complete implements ledger.Driver with one fenced UPDATE.
func (l *Ledger) Complete(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	if l.completes != nil {
		r, answered, err := l.completes.do(ctx, p)
		if !answered {
			return nil, interpretError("complete run "+p.RunID+" (it may be completed: its batch had not answered)", err)
		}
		return r, err
	}
	return l.completeOne(ctx, p)
}

// completeOne completes one run with its own statement.
func (l *Ledger) completeOne(ctx context.Context, p *ledger.CompleteParams) (*ledger.Run, error) {
	return l.fenced(ctx, "complete", l.q.complete, p.RunID,
		[]any{timeArg(p.Now), p.RunID, p.Attempt, p.AttemptID, "", micros(retention(p.Retention)), nullBytes(p.Result), nullBytes(p.Progress)},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return driver.ApplyComplete(cur, p, now)
		})
}

// Fail implements ledger.Driver with one fenced UPDATE.
func (l *Ledger) Fail(ctx context.Context, p *ledger.FailParams) (*ledger.Run, error) {
	return l.fenced(ctx, "fail", l.q.fail, p.RunID,
		[]any{timeArg(p.Now), p.RunID, p.Attempt, p.AttemptID, p.Error, micros(retention(p.Retention)), []byte(nil), nullBytes(p.Progress),
			driver.ClipText(p.Error)},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return driver.ApplyFail(cur, p, now)
		})
}

// Release implements ledger.Driver with one fenced UPDATE.
func (l *Ledger) Release(ctx context.Context, p *ledger.ReleaseParams) (*ledger.Run, error) {
	retry := p.RetryAfter
	pickup := cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)
	return l.fenced(ctx, "release", l.q.release, p.RunID,
		[]any{timeArg(p.Now), p.RunID, p.Attempt, p.AttemptID, p.Error, micros(retry), micros(retry + pickup), micros(retention(p.Retention)),
			nullBytes(p.Progress), driver.ClipText(p.Error)},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			return driver.ApplyRelease(cur, p, now)
		})
}

// Rescue implements ledger.Driver with one conditional UPDATE.
func (l *Ledger) Rescue(ctx context.Context, p *ledger.RescueParams) (*ledger.Run, error) {
	deadline := driver.Micros(p.Deadline)
	lost := fmt.Sprintf("attempt %d lost its lease at %s", p.Attempt, deadline.Format(time.RFC3339Nano))
	return l.fenced(ctx, "rescue", l.q.rescue, p.RunID,
		[]any{timeArg(p.Now), p.RunID, string(p.Status), p.Attempt, timeArg(deadline),
			micros(cmp.Or(p.PickupTimeout, ledger.DefaultPickupTimeout)), micros(retention(p.Retention)), lost},
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			next, err := driver.ApplyRescue(cur, p, now)
			return next, next, err
		})
}

// fenced runs a conditional UPDATE of one run whose answer is (run columns, now): the
// updated run, or no row when the condition failed. Only then does it read the run as it
// stands, locked (queries/locked_run.sql, with args[0], the caller's Now), and verdict
// (the state machine's rule for the transition) decides between an idempotent repeat (it answers
// the run and writes nothing) and a refusal (its error), or that the run does not exist.
func (l *Ledger) fenced(ctx context.Context, op, sql, runID string, args []any,
	verdict func(cur *ledger.Run, now time.Time) (next, answer *ledger.Run, err error),
) (*ledger.Run, error) {
	var (
		s   runScan
		now time.Time
	)
	err := l.pool.QueryRow(ctx, sql, args...).Scan(append(s.dest(), &now)...)
	if err == nil {
		return s.run(), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, interpretError(op+" run "+runID, err)
	}
	// Not written: read the run, with the time, for the verdict.
	err = l.pool.QueryRow(ctx, l.q.lockedRun, args[0], runID).Scan(append(s.dest(), &now)...)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, interpretError(op+" run "+runID+" (not changed: reading it)", err)
	}
	cur := s.run() // nil when absent (verdict takes no time then)
	next, answer, err := verdict(cur, now.UTC())
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent(op, runID, cur)
	}
	return answer, nil
}

// Get implements ledger.Driver.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	var (
		s                  runScan
		claimed, completed bool
		history            []byte
	)
	if err := l.pool.QueryRow(ctx, l.q.getWithHistory, p.RunID).Scan(append(s.dest(), &claimed, &completed, &history)...); err != nil {
		return nil, interpretError("get run "+p.RunID, err)
	}
	r := s.run()
	if err := json.Unmarshal(history, &r.History); err != nil {
		return nil, fmt.Errorf("postgres: get run %s: history: %w", p.RunID, err)
	}
	if completed {
		// The completion's event, kept as the row itself (migration 0010): the last of
		// the history, since completed is terminal.
		r.History = append(r.History, ledger.Event{At: r.CompletedAt, Kind: ledger.EventCompleted, Attempt: r.Attempt})
		if n := len(r.History) - ledger.MaxHistory; n > 0 {
			r.History = r.History[n:]
		}
	}
	if claimed && len(r.History) < ledger.MaxHistory {
		// The ingress claim's event, kept as the row itself (migration 0008): the
		// first of the history until ledger.MaxHistory later events push it out.
		r.History = append([]ledger.Event{{At: r.CreatedAt, Kind: ledger.EventClaimed}}, r.History...)
	}
	if len(r.History) == 0 {
		r.History = nil
	}
	return r, nil
}

// BeginEffect implements ledger.Driver with one statement: it locks the run (FOR SHARE,
// so that no takeover slips in), checks the fence and upserts the effect.
func (l *Ledger) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	var (
		run     fenceScan
		up, old effectScan
		now     time.Time
	)
	dest := append(append(append(run.dest(), up.dest()...), old.dest()...), &now)
	err := l.pool.QueryRow(ctx, l.q.beginEffect, timeArg(p.Now), p.RunID, p.Attempt, p.AttemptID,
		ledger.EffectKey(p.RunID, p.Name), p.Name, micros(retention(p.Retention))).Scan(dest...)
	if err != nil {
		return nil, interpretError(fmt.Sprintf("begin effect %q of run %s", p.Name, p.RunID), err)
	}
	if e := up.effect(); e != nil {
		if e.Status == ledger.EffectDone {
			return &ledger.BeginEffectResult{Effect: e, Done: true}, nil
		}
		var prev int64
		if o := old.effect(); o != nil {
			prev = o.Attempt
		}
		return &ledger.BeginEffectResult{Effect: e, PreviousAttempt: prev}, nil
	}
	next, res, err := driver.ApplyBeginEffect(run.run(p.RunID), old.effect(), p, now.UTC())
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent("begin effect "+p.Name, p.RunID, run.run(p.RunID))
	}
	return res, nil
}

// CompleteEffect implements ledger.Driver with one statement, fenced like BeginEffect.
func (l *Ledger) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	var (
		run     fenceScan
		up, cur effectScan
		now     time.Time
	)
	dest := append(append(append(run.dest(), up.dest()...), cur.dest()...), &now)
	err := l.pool.QueryRow(ctx, l.q.completeEffect, timeArg(p.Now), p.RunID, p.Attempt, p.AttemptID,
		ledger.EffectKey(p.RunID, p.Name), micros(retention(p.Retention)), p.Ref).Scan(dest...)
	if err != nil {
		return nil, interpretError(fmt.Sprintf("complete effect %q of run %s", p.Name, p.RunID), err)
	}
	if e := up.effect(); e != nil {
		return e, nil
	}
	next, answer, err := driver.ApplyCompleteEffect(run.run(p.RunID), cur.effect(), p, now.UTC())
	if err != nil {
		return nil, err
	}
	if next != nil {
		return nil, inconsistent("complete effect "+p.Name, p.RunID, run.run(p.RunID))
	}
	return answer, nil
}

// GetEffect implements ledger.Driver.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	var s effectScan
	if err := l.pool.QueryRow(ctx, l.q.getEffect, ledger.EffectKey(p.RunID, p.Name)).Scan(s.dest()...); err != nil {
		return nil, interpretError(fmt.Sprintf("get effect %q of run %s", p.Name, p.RunID), err)
	}
	return s.effect(), nil
}

// planEach, as a statement's first argument, has pgx send it with its arguments quoted
// in (the simple protocol), so that the server plans it for them at each execution: for
// the scans (the listings, the rescuer's, the sweep), whose best plan depends on their
// limit and bounds. Open's connections keep one generic plan per prepared statement
// (see the package doc), and the sweep's would read every run to check effects' runs.
const planEach = pgx.QueryExecModeSimpleProtocol

// ListRescue implements ledger.Driver over the partial index runs_rescue_idx.
func (l *Ledger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	rows, err := l.pool.Query(ctx, l.q.listRescue, planEach, timeArg(p.Now), cmp.Or(p.Limit, defaultRescueLimit))
	if err != nil {
		return nil, interpretError("list runs to rescue", err)
	}
	var out []*ledger.Run
	var s runScan
	_, err = pgx.ForEachRow(rows, s.dest(), func() error {
		out = append(out, s.run())
		return nil
	})
	if err != nil {
		return nil, interpretError("list runs to rescue", err)
	}
	return out, nil
}

// Sweep implements ledger.Driver: one statement deletes at most Limit expired runs and
// effects, skipping rows that are locked.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	var n int64
	if err := l.pool.QueryRow(ctx, l.q.sweep, planEach, timeArg(p.Now), cmp.Or(p.Limit, defaultSweepLimit)).Scan(&n); err != nil {
		return 0, interpretError("sweep", err)
	}
	return int(n), nil
}

// inconsistent reports a statement that wrote nothing where the state machine says it
// should have: a bug in this package's SQL, never a verdict about the run.
func inconsistent(op, runID string, cur *ledger.Run) error {
	if cur == nil {
		return fmt.Errorf("postgres: %s run %s: the statement wrote nothing and the run is absent, but the state machine would write: report this bug", op, runID)
	}
	return fmt.Errorf("postgres: %s run %s: the statement wrote nothing to the run (%s at attempt %d, %q), but the state machine would write: report this bug",
		op, runID, cur.Status, cur.Attempt, cur.AttemptID)
}

func retention(d time.Duration) time.Duration { return cmp.Or(d, ledger.DefaultRetention) }

// micros is d in whole microseconds, rounded down, so that now+d is what
// driver.Micros(now.Add(d)) is for a now on a microsecond.
func micros(d time.Duration) int64 {
	q := d / time.Microsecond
	if d%time.Microsecond < 0 {
		q--
	}
	return int64(q)
}

// timeArg is t as a statement argument: NULL when zero, else UTC on a microsecond.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return driver.Micros(t)
}

func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// runScan receives the columns of runCols; every one may be NULL (an outer join, or a
// statement that found no run).
type runScan struct {
	id, namespace, job, key, payloadHash, status, attemptID, lastError pgtype.Text
	payload, result, progress                                          []byte
	attempt, attemptsMade                                              pgtype.Int8
	scheduleTime, deadline, notBefore                                  pgtype.Timestamptz
	createdAt, updatedAt, completedAt, expireAt                        pgtype.Timestamptz
}

func (s *runScan) dest() []any {
	return []any{&s.id, &s.namespace, &s.job, &s.key, &s.scheduleTime, &s.payloadHash, &s.payload, &s.status,
		&s.attempt, &s.attemptID, &s.deadline, &s.notBefore, &s.attemptsMade, &s.lastError,
		&s.createdAt, &s.updatedAt, &s.completedAt, &s.expireAt, &s.result, &s.progress}
}

// run returns the scanned run, or nil when there was none.
func (s *runScan) run() *ledger.Run {
	if !s.id.Valid {
		return nil
	}
	return &ledger.Run{
		ID: s.id.String, Namespace: s.namespace.String, Job: s.job.String, Key: s.key.String,
		ScheduleTime: timeOf(s.scheduleTime), PayloadHash: s.payloadHash.String, Payload: s.payload,
		Status: ledger.Status(s.status.String), Attempt: s.attempt.Int64, AttemptID: s.attemptID.String,
		Deadline: timeOf(s.deadline), NotBefore: timeOf(s.notBefore),
		AttemptsMade: s.attemptsMade.Int64, LastError: s.lastError.String,
		CreatedAt: timeOf(s.createdAt), UpdatedAt: timeOf(s.updatedAt),
		CompletedAt: timeOf(s.completedAt), ExpireAt: timeOf(s.expireAt), Result: s.result, Progress: s.progress,
	}
}

// fenceScan receives the fence columns of a run (status, attempt, attempt_id).
type fenceScan struct {
	status, attemptID pgtype.Text
	attempt           pgtype.Int8
}

func (s *fenceScan) dest() []any { return []any{&s.status, &s.attempt, &s.attemptID} }

// run returns the run's fence as a record for the state machine, or nil when absent.
func (s *fenceScan) run(id string) *ledger.Run {
	if !s.status.Valid {
		return nil
	}
	return &ledger.Run{ID: id, Status: ledger.Status(s.status.String), Attempt: s.attempt.Int64, AttemptID: s.attemptID.String}
}

// effectScan receives the columns of effectCols, each possibly NULL.
type effectScan struct {
	key, runID, name, status               pgtype.Text
	attempt                                pgtype.Int8
	ref                                    pgtype.Text
	createdAt, updatedAt, doneAt, expireAt pgtype.Timestamptz
}

func (s *effectScan) dest() []any {
	return []any{&s.key, &s.runID, &s.name, &s.status, &s.attempt, &s.ref, &s.createdAt, &s.updatedAt, &s.doneAt, &s.expireAt}
}

func (s *effectScan) effect() *ledger.Effect {
	if !s.key.Valid {
		return nil
	}
	return &ledger.Effect{
		Key: s.key.String, RunID: s.runID.String, Name: s.name.String,
		Status: ledger.EffectStatus(s.status.String), Attempt: s.attempt.Int64, Ref: s.ref.String,
		CreatedAt: timeOf(s.createdAt), UpdatedAt: timeOf(s.updatedAt),
		DoneAt: timeOf(s.doneAt), ExpireAt: timeOf(s.expireAt),
	}
}

// nullBytes passes an empty value as NULL.
func nullBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// distinct returns the calls of batch that come first for their run, in batch order, and
// runs each later call of the same run after them with one: two calls of one run in one
// statement would match its row once, and which of them did would be unknown.
func distinct[In, Out any](batch []*call[In, Out], runID func(In) string, one func(In) (Out, error)) (firsts []*call[In, Out], rest func()) {
	seen := make(map[string]bool, len(batch))
	var later []*call[In, Out]
	for _, c := range batch {
		if id := runID(c.in); seen[id] {
			later = append(later, c)
		} else {
			seen[id] = true
			firsts = append(firsts, c)
		}
	}
	return firsts, func() {
		for _, c := range later {
			c.out, c.err = one(c.in)
		}
	}
}

type acquireCall = call[*ledger.AcquireParams, *ledger.AcquireResult]

// acquireBatch answers a batch of worker claims. One alone takes acquireOne's
// statements; more take queries/acquire_queued_batch.sql, which takes the queued runs
// among them and creates the absent ones in one statement, and acquireAny decides each of
// the others.
func (l *Ledger) acquireBatch(ctx context.Context, batch []*acquireCall) {
	if len(batch) == 1 {
		batch[0].out, batch[0].err = l.acquireOne(ctx, batch[0].in)
		return
	}
	firsts, rest := distinct(batch, func(p *ledger.AcquireParams) string { return p.RunID },
		func(p *ledger.AcquireParams) (*ledger.AcquireResult, error) { return l.acquireAny(ctx, p) })
	defer rest()
	var (
		now, scheduled                []*time.Time
		ids, hashes, attempts, worker []string
		namespaces, jobs, keys        []string
		leases, retentions            []int64
		payloads                      [][]byte
		noCreate                      []bool
	)
	for _, c := range firsts {
		p := c.in
		now, ids, hashes, attempts = append(now, timePtr(p.Now)), append(ids, p.RunID), append(hashes, p.PayloadHash), append(attempts, p.AttemptID)
		leases, retentions = append(leases, micros(cmp.Or(p.Lease, ledger.DefaultLease))), append(retentions, micros(retention(p.Retention)))
		worker = append(worker, driver.ClipText(p.Worker))
		namespaces, jobs, keys = append(namespaces, p.Namespace), append(jobs, p.Job), append(keys, p.Key)
		payload, no := createArgs(p)
		scheduled, payloads, noCreate = append(scheduled, timePtr(p.ScheduleTime)), append(payloads, payload), append(noCreate, no)
	}
	taken, err := l.batchRuns(ctx, l.q.acquireQueuedBatch, now, ids, hashes, attempts, leases, retentions, worker,
		namespaces, jobs, keys, scheduled, payloads, noCreate)
	if err != nil {
		err = interpretError(fmt.Sprintf("acquire run (in a batch of %d worker claims)", len(firsts)), err)
		for _, c := range firsts {
			c.err = err
		}
		return
	}
	for _, c := range firsts {
		if r, ok := taken[c.in.RunID]; ok {
			c.out = &ledger.AcquireResult{Outcome: ledger.OutcomeAcquired, Run: r}
		} else {
			c.out, c.err = l.acquireAny(ctx, c.in)
		}
	}
}

type completeCall = call[*ledger.CompleteParams, *ledger.Run]

// completeBatch answers a batch of completions. One alone takes completeOne's
// statement; more take queries/complete_batch.sql, which completes the runs whose fence
// holds in one statement, and completeOne decides each of the others (an idempotent repeat, a
// lost lease).
func (l *Ledger) completeBatch(ctx context.Context, batch []*completeCall) {
	if len(batch) == 1 {
		batch[0].out, batch[0].err = l.completeOne(ctx, batch[0].in)
		return
	}
	firsts, rest := distinct(batch, func(p *ledger.CompleteParams) string { return p.RunID },
		func(p *ledger.CompleteParams) (*ledger.Run, error) { return l.completeOne(ctx, p) })
	defer rest()
	var (
		now                  []*time.Time
		ids, attemptIDs      []string
		attempts, retentions []int64
		results, progress    [][]byte
	)
	for _, c := range firsts {
		p := c.in
		now, ids, attempts, attemptIDs = append(now, timePtr(p.Now)), append(ids, p.RunID), append(attempts, p.Attempt), append(attemptIDs, p.AttemptID)
		retentions = append(retentions, micros(retention(p.Retention)))
		results, progress = append(results, nullBytes(p.Result)), append(progress, nullBytes(p.Progress))
	}
	done, err := l.batchRuns(ctx, l.q.completeBatch, now, ids, attempts, attemptIDs, retentions, results, progress)
	if err != nil {
		err = interpretError(fmt.Sprintf("complete run (in a batch of %d completions)", len(firsts)), err)
		for _, c := range firsts {
			c.err = err
		}
		return
	}
	for _, c := range firsts {
		if r, ok := done[c.in.RunID]; ok {
			c.out = r
		} else {
			c.out, c.err = l.completeOne(ctx, c.in)
		}
	}
}

// batchRuns runs a batched statement that returns runs, by ID.
func (l *Ledger) batchRuns(ctx context.Context, sql string, args ...any) (map[string]*ledger.Run, error) {
	rows, err := l.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]*ledger.Run)
	for rows.Next() {
		var s runScan
		if err := rows.Scan(s.dest()...); err != nil {
			return nil, err
		}
		r := s.run()
		out[r.ID] = r
	}
	return out, rows.Err()
}

// timePtr is t as an element of a timestamptz array argument: nil (NULL) when zero.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = driver.Micros(t)
	return &t
}
