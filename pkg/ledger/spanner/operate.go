package spannerledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/runonce/runonce/pkg/ledger"
)

// The operators' side: the actions are read-write transactions like the worker's
// transitions, and List is one strong read over one of Schema's listing indexes.

func (l *Ledger) operate(ctx context.Context, op ledger.Op, p *ledger.OperatorParams,
	apply func(*ledger.Run, *ledger.OperatorParams, time.Time) (*ledger.Run, error),
) (*ledger.Run, error) {
	if err := ledger.ValidateOperator(p); err != nil {
		return nil, err
	}
	return l.runTransition(ctx, op, ledger.Note{Actor: p.Actor, Reason: p.Reason}, p.RunID, p.Now,
		func(cur *ledger.Run, now time.Time) (*ledger.Run, *ledger.Run, error) {
			next, err := apply(cur, p, now)
			return next, next, err
		})
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

// listColumns is selectRun without the payload and the history, which List leaves out.
const listColumns = `r.run_id, r.namespace, r.job, r.run_key, r.schedule_time, r.payload_hash,
	r.status, r.attempt, r.attempt_id, r.deadline, r.not_before, r.attempts_made, r.last_error,
	r.created_at, r.updated_at, r.completed_at, r.expire_at`

// List implements ledger.Ledger: the index is the one whose leading column is the
// first equality filter (status, job, namespace) and whose order is the listing's.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos, err := ledger.ValidateList(p)
	if err != nil {
		return nil, err
	}
	col, order := "created_at", "created"
	after, before := p.CreatedAfter, p.CreatedBefore
	if p.ByUpdated() {
		col, order, after, before = "updated_at", "updated", p.UpdatedAfter, p.UpdatedBefore
	}
	index := "runs_by_" + order
	var where []string
	params := map[string]any{"limit": int64(size + 1)}
	add := func(cond, name string, v any) { where = append(where, cond); params[name] = v }
	if p.Status != "" {
		add("r.status = @status", "status", string(p.Status))
		index = "runs_by_status_" + order
	}
	if p.Job != "" {
		add("r.job = @job", "job", p.Job)
		if p.Status == "" && order == "created" {
			index = "runs_by_job_created"
		}
	}
	if p.Namespace != "" {
		add("r.namespace = @namespace", "namespace", p.Namespace)
		if p.Status == "" && p.Job == "" && order == "created" {
			index = "runs_by_namespace_created"
		}
	}
	if !after.IsZero() {
		add("r."+col+" >= @after", "after", ledger.Truncate(after))
	}
	if !before.IsZero() {
		add("r."+col+" < @before", "before", ledger.Truncate(before))
	}
	if pos.RunID != "" {
		where = append(where, fmt.Sprintf("(r.%[1]s < @pos_at OR (r.%[1]s = @pos_at AND r.run_id < @pos_id))", col))
		params["pos_at"], params["pos_id"] = pos.At, pos.RunID
	}
	sql := "SELECT " + listColumns + " FROM runs@{FORCE_INDEX=" + index + "} AS r"
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY r." + col + " DESC, r.run_id DESC LIMIT @limit"
	var out []*ledger.Run
	err = l.client.Single().Query(ctx, spanner.Statement{SQL: sql, Params: params}).Do(func(r *spanner.Row) error {
		var rr runRow
		if err := r.ToStructLenient(&rr); err != nil {
			return err
		}
		out = append(out, rr.run())
		return nil
	})
	if err != nil {
		return nil, interpretError("list runs", err)
	}
	return ledger.Page(p, out, size), nil
}

// ListEffects implements ledger.Ledger: a run's effects are interleaved in it, keyed by
// (run_id, name).
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	if !ledger.ValidRunID(p.RunID) {
		return nil, ledger.Invalidf("run ID %q is not 64 lower-case hex digits", p.RunID)
	}
	var out []*ledger.Effect
	err := l.client.Single().Query(ctx, spanner.Statement{
		SQL:    `SELECT ` + selectEffect + ` FROM effects AS e WHERE e.run_id = @id ORDER BY e.name LIMIT @limit`,
		Params: map[string]any{"id": p.RunID, "limit": int64(ledger.MaxListedEffects)},
	}).Do(func(r *spanner.Row) error {
		var er effectRow
		if err := r.ToStructLenient(&er); err != nil {
			return err
		}
		out = append(out, er.effect())
		return nil
	})
	if err != nil {
		return nil, interpretError("list effects of run "+p.RunID, err)
	}
	return out, nil
}
