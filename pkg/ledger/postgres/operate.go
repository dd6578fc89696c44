package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runonce/runonce/pkg/ledger"
)

// The operators' side. The actions are rare and not on the request path of a run: each
// is a transaction that locks the run (FOR UPDATE, which also waits for and then
// excludes the fenced statements of queries.go), applies the state machine's rule
// (ledger.ApplyRetry, …) with the database's clock, and writes the result.

func (l *Ledger) operate(ctx context.Context, op ledger.Op, p *ledger.OperatorParams,
	apply func(*ledger.Run, *ledger.OperatorParams, time.Time) (*ledger.Run, error),
) (*ledger.Run, error) {
	if err := ledger.ValidateOperator(p); err != nil {
		return nil, err
	}
	var out *ledger.Run
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var (
			s   runScan
			now time.Time
		)
		err := tx.QueryRow(ctx, l.q.lockForOperator, timeArg(p.Now), p.RunID).Scan(append(s.dest(), &now)...)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return interpretError(string(op)+" run "+p.RunID, err)
		}
		cur := s.run()
		if cur == nil { // no row: the database's clock is not needed for the refusal
			now = time.Now()
		}
		next, err := apply(cur, p, now.UTC())
		if err != nil {
			return err
		}
		next.History = ledger.AppendHistory(cur.History, ledger.Record(op, cur, next, now, ledger.Note{Actor: p.Actor, Reason: p.Reason})...)
		history, err := json.Marshal(next.History)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, l.q.operator, next.ID, string(next.Status), next.AttemptsMade, next.AttemptID,
			timeArg(next.Deadline), timeArg(next.NotBefore), next.LastError, timeArg(next.CompletedAt),
			timeArg(next.UpdatedAt), timeArg(next.ExpireAt), history); err != nil {
			return interpretError(string(op)+" run "+p.RunID, err)
		}
		out = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Retry implements ledger.Ledger.
func (l *Ledger) Retry(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operate(ctx, ledger.OpRetry, p, ledger.ApplyRetry)
}

// Cancel implements ledger.Ledger.
func (l *Ledger) Cancel(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operate(ctx, ledger.OpCancel, p, ledger.ApplyCancel)
}

// OperatorRelease implements ledger.Ledger.
func (l *Ledger) OperatorRelease(ctx context.Context, p *ledger.OperatorParams) (*ledger.Run, error) {
	return l.operate(ctx, ledger.OpOperatorRelease, p, ledger.ApplyOperatorRelease)
}

// List implements ledger.Ledger: one indexed statement (migration 00003's runs_*_idx),
// newest first, keyset-paginated on (time, run_id).
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos, err := ledger.ValidateList(p)
	if err != nil {
		return nil, err
	}
	col := "created_at"
	after, before := p.CreatedAfter, p.CreatedBefore
	if p.ByUpdated() {
		col, after, before = "updated_at", p.UpdatedAfter, p.UpdatedBefore
	}
	var where []string
	var args []any
	add := func(cond string, v ...any) {
		for _, x := range v {
			args = append(args, x)
			cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	if p.Status != "" {
		add("status = ?", string(p.Status))
	}
	if p.Job != "" {
		add("job = ?", p.Job)
	}
	if p.Namespace != "" {
		add("namespace = ?", p.Namespace)
	}
	if !after.IsZero() {
		add(col+" >= ?", ledger.Truncate(after))
	}
	if !before.IsZero() {
		add(col+" < ?", ledger.Truncate(before))
	}
	if pos.RunID != "" {
		add("("+col+", run_id) < (?, ?)", pos.At, pos.RunID)
	}
	q := "SELECT " + listCols + " FROM " + l.q.runs
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, size+1)
	q += fmt.Sprintf(" ORDER BY %s DESC, run_id DESC LIMIT $%d", col, len(args))
	rows, err := l.pool.Query(ctx, q, args...)
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
	return ledger.Page(p, out, size), nil
}

// ListEffects implements ledger.Ledger (index effects_run_idx).
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	if !ledger.ValidRunID(p.RunID) {
		return nil, ledger.Invalidf("run ID %q is not 64 lower-case hex digits", p.RunID)
	}
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
