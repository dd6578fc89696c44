package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// transact runs an operator's action in one transaction: it locks the run (and, when
// the action has an effect, that effect of it, in the order the workers' effect
// statements lock them), decides with the driver's rule at the database's time, writes
// the run (and the effect) and adds the transition's events to its history. Operators
// act rarely; a few statements in a transaction are simpler than one that expresses the
// rule in SQL, and cannot disagree with the other backends.
func (l *Ledger) transact(ctx context.Context, a *driver.Action) (*ledger.Run, error) {
	p := a.Params
	what := string(a.Op) + " run " + p.RunID
	var next *ledger.Run
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var (
			s   runScan
			now time.Time
		)
		err := tx.QueryRow(ctx, l.q.lockForOperator, timeArg(p.Now), p.RunID).Scan(append(s.dest(), &now)...)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return interpretError(what, err)
		}
		cur := s.run()
		var eff *ledger.Effect
		if a.Effect != "" && cur != nil {
			var es effectScan
			err := tx.QueryRow(ctx, l.q.lockEffect, ledger.EffectKey(p.RunID, a.Effect)).Scan(es.dest()...)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return interpretError(what, err)
			}
			eff = es.effect()
		}
		var nextEff *ledger.Effect
		next, nextEff, err = a.Apply(cur, eff, now.UTC())
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, l.q.writeRun, next.ID, string(next.Status), next.Attempt, next.AttemptID,
			timeArg(next.Deadline), timeArg(next.NotBefore), next.AttemptsMade, next.LastError, next.UpdatedAt,
			timeArg(next.CompletedAt), next.ExpireAt)
		if err != nil {
			return interpretError(what, err)
		}
		if nextEff != nil {
			_, err = tx.Exec(ctx, l.q.writeEffect, nextEff.Key, string(nextEff.Status), nextEff.Attempt, nextEff.Ref,
				timeArg(nextEff.DoneAt), nextEff.UpdatedAt, nextEff.ExpireAt)
			if err != nil {
				return interpretError(what, err)
			}
		}
		for _, e := range driver.Record(a.Op, cur, next, now, a.Note) {
			if _, err := tx.Exec(ctx, l.q.addEvent, next.ID, e.At, string(e.Kind), e.Attempt, e.Worker, e.Actor, e.Text); err != nil {
				return interpretError(what, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	next.History = nil // Get reads it
	return next, nil
}

// Retry implements ledger.Driver.
func (l *Ledger) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.RunAction(driver.OpRetry, p, driver.ApplyRetry))
}

// Cancel implements ledger.Driver.
func (l *Ledger) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.RunAction(driver.OpCancel, p, driver.ApplyCancel))
}

// OperatorRelease implements ledger.Driver.
func (l *Ledger) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.RunAction(driver.OpOperatorRelease, p, driver.ApplyOperatorRelease))
}

// ResolveEffect implements ledger.Driver.
func (l *Ledger) ResolveEffect(ctx context.Context, p *ledger.ResolveEffectParams) (*ledger.Run, error) {
	return l.transact(ctx, driver.ResolveAction(p))
}

// List implements ledger.Driver with one statement over the listing's indexes
// (migration 0007 says which serves what), newest first, keyset-paginated on (time, run
// ID); the payload is not read.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos := driver.ListPage(p)
	q, args := l.listQuery(p, pos, size+1)
	rows, err := l.pool.Query(ctx, q, append([]any{planEach}, args...)...)
	if err != nil {
		return nil, interpretError("list runs", err)
	}
	defer rows.Close()
	var out []*ledger.Run
	for rows.Next() {
		var s runScan
		if err := rows.Scan(s.dest()...); err != nil {
			return nil, interpretError("list runs", err)
		}
		out = append(out, s.run())
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list runs", err)
	}
	return driver.Page(p, out, size), nil
}

// listID is the listing's tie-breaker, the run ID as its indexes hold it (migration
// 0009): in the C collation, which nothing but the listing uses, so that only the
// primary key can find a run by its ID.
const listID = `run_id COLLATE "C"`

// listQuery is List's statement and its arguments: at most limit runs after pos. A
// listing by update time with no status is one scan of runs_status_updated_idx per
// status, each limited, merged (a MergeAppend) and limited again: no index orders all
// runs by update time.
func (l *Ledger) listQuery(p *ledger.ListParams, pos driver.Position, limit int) (string, []any) {
	col, after, before := p.TimeRange()
	var (
		where []string
		args  []any
	)
	add := func(cond string, v ...any) {
		for _, x := range v {
			args = append(args, x)
			cond = strings.Replace(cond, "?", fmt.Sprintf("$%d", len(args)), 1)
		}
		where = append(where, cond)
	}
	if p.Job != "" {
		add("job = ?", p.Job)
	}
	if p.Namespace != "" {
		add("namespace = ?", p.Namespace)
	}
	if !after.IsZero() {
		add(col+" >= ?", driver.Micros(after))
	}
	if !before.IsZero() {
		add(col+" < ?", driver.Micros(before))
	}
	if pos.RunID != "" {
		add("("+col+", "+listID+") < (?, ?)", pos.At, pos.RunID)
	}
	args = append(args, limit)
	order := fmt.Sprintf(" ORDER BY %s DESC, %s DESC LIMIT $%d", col, listID, len(args))
	selectWhere := func(conds []string) string {
		if len(conds) == 0 {
			return l.q.listRuns
		}
		return l.q.listRuns + " WHERE " + strings.Join(conds, " AND ")
	}
	if p.Status != "" || !p.ByUpdated() {
		conds := where
		if p.Status != "" {
			args = append(args, string(p.Status))
			conds = append(slices.Clone(where), fmt.Sprintf("status = $%d", len(args)))
		}
		return selectWhere(conds) + order, args
	}
	var scans []string
	for _, st := range ledger.Statuses() {
		scans = append(scans, "("+selectWhere(append(slices.Clone(where), "status = '"+string(st)+"'"))+order+")")
	}
	return "SELECT * FROM (" + strings.Join(scans, " UNION ALL ") + ") u" + order, args
}

// ListRunIDs implements ledger.Driver with a range scan of the primary key.
func (l *Ledger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	limit, lo, hi := driver.RunIDScan(p)
	what := "list run IDs starting with " + p.Prefix
	rows, err := l.pool.Query(ctx, l.q.listRunIDs, lo, hi, limit)
	if err != nil {
		return nil, interpretError(what, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, interpretError(what, err)
	}
	return ids, nil
}

// ListEffects implements ledger.Driver over the index effects_run_idx.
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	rows, err := l.pool.Query(ctx, l.q.listEffects, p.RunID, ledger.MaxListedEffects)
	if err != nil {
		return nil, interpretError("list effects of run "+p.RunID, err)
	}
	defer rows.Close()
	var out []*ledger.Effect
	for rows.Next() {
		var s effectScan
		if err := rows.Scan(s.dest()...); err != nil {
			return nil, interpretError("list effects of run "+p.RunID, err)
		}
		out = append(out, s.effect())
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list effects of run "+p.RunID, err)
	}
	return out, nil
}
