package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// List implements ledger.Driver: one query over the listing's indexes (migration 0006
// says which serves what), newest first, keyset-paginated on (time, run_id); the payload
// and the history are not read.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos := driver.ListPage(p)
	q, args, err := l.listQuery(ctx, p, pos, size+1)
	if err != nil {
		return nil, err
	}
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list runs: %w", interpret(err))
	}
	defer rows.Close()
	var out []*ledger.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list runs: %w", err)
		}
		r.Payload = nil
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list runs: %w", interpret(err))
	}
	return driver.Page(p, out, size), nil
}

// listRunIDsSQL is ListRunIDs's query: a range of the primary key's index, which holds
// the IDs (TestListRunIDsReadsThePrimaryKey).
const listRunIDsSQL = "SELECT run_id FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY run_id LIMIT ?"

// ListRunIDs implements ledger.Driver with a range scan of the primary key.
func (l *Ledger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	limit, lo, hi := driver.RunIDScan(p)
	rows, err := l.db.QueryContext(ctx, listRunIDsSQL, lo, hi, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list run IDs starting with %s: %w", p.Prefix, interpret(err))
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: list run IDs starting with %s: %w", p.Prefix, err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list run IDs starting with %s: %w", p.Prefix, interpret(err))
	}
	return out, nil
}

// ListEffects implements ledger.Driver (index effects_run).
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	rows, err := l.db.QueryContext(ctx, "SELECT effect_key FROM effects WHERE run_id = ? ORDER BY name LIMIT ?", p.RunID, ledger.MaxListedEffects)
	if err != nil {
		return nil, wrap("list effects", p.RunID, interpret(err))
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, wrap("list effects", p.RunID, err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap("list effects", p.RunID, interpret(err))
	}
	out := make([]*ledger.Effect, 0, len(keys))
	for _, k := range keys {
		e, err := getEffect(ctx, l.db, k)
		if err != nil {
			return nil, wrap("list effects", p.RunID, interpret(err))
		}
		if e != nil { // swept meanwhile
			out = append(out, e)
		}
	}
	return out, nil
}

// listSortMax is the most runs of one status that List sorts by creation time (read by
// runs_status_updated); a status with more is listed by a filtered scan of runs_created
// instead, which finds a page among them soon. SQLite has no statistics to choose with.
const listSortMax = 10_000

// fewOfStatus reports whether at most listSortMax runs have status st, counting at most
// one more (an index-only range of runs_status_updated).
func (l *Ledger) fewOfStatus(ctx context.Context, st ledger.Status) (bool, error) {
	var n int
	err := l.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM runs INDEXED BY runs_status_updated
		WHERE status = ? LIMIT ?)`, string(st), listSortMax+1).Scan(&n)
	return n <= listSortMax, err
}

// listQuery is List's query and its arguments: at most limit runs after pos. Each shape
// names the index it reads (INDEXED BY), so that the plan does not rest on SQLite's
// guesses without statistics. A listing of one status by creation time reads that
// status's rows of runs_status_updated and sorts them when there are few
// (fewOfStatus), runs_created otherwise. A listing by update time with no status is one
// scan of runs_status_updated per status, each limited, merged and limited again: no
// index orders all runs by update time.
func (l *Ledger) listQuery(ctx context.Context, p *ledger.ListParams, pos driver.Position, limit int) (string, []any, error) {
	sorted := false
	if p.Status != "" && !p.ByUpdated() {
		var err error
		if sorted, err = l.fewOfStatus(ctx, p.Status); err != nil {
			return "", nil, fmt.Errorf("sqlite: list runs: count runs %s: %w", p.Status, interpret(err))
		}
	}
	col, after, before := p.TimeRange()
	var (
		where []string
		args  []any
	)
	add := func(cond string, v ...any) { where = append(where, cond); args = append(args, v...) }
	if p.Job != "" {
		add("job = ?", p.Job)
	}
	if p.Namespace != "" {
		add("namespace = ?", p.Namespace)
	}
	if !after.IsZero() {
		add(col+" >= ?", micros(driver.Micros(after)))
	}
	if !before.IsZero() {
		add(col+" < ?", micros(driver.Micros(before)))
	}
	if pos.RunID != "" {
		add("("+col+", run_id) < (?, ?)", micros(pos.At), pos.RunID)
	}
	order := " ORDER BY " + col + " DESC, run_id DESC LIMIT ?"
	selectWhere := func(index string, conds []string) string {
		q := "SELECT " + listColumns + " FROM runs INDEXED BY " + index
		if len(conds) > 0 {
			q += " WHERE " + strings.Join(conds, " AND ")
		}
		return q
	}
	// byStatus is the filters of one status's rows, its argument first.
	byStatus := append([]string{"status = ?"}, where...)
	switch {
	case p.Status == "" && !p.ByUpdated():
		return selectWhere("runs_created", where) + order, append(args, limit), nil
	case p.Status != "":
		index := "runs_status_updated"
		if !p.ByUpdated() && !sorted {
			index = "runs_created"
		}
		return selectWhere(index, byStatus) + order, append(append([]any{string(p.Status)}, args...), limit), nil
	}
	// The same limited scan for each status, merged.
	scan := "SELECT * FROM (" + selectWhere("runs_status_updated", byStatus) + order + ")"
	statuses := ledger.Statuses()
	var allArgs []any
	for _, st := range statuses {
		allArgs = append(append(append(allArgs, string(st)), args...), limit)
	}
	return "SELECT * FROM (" + strings.Join(slices.Repeat([]string{scan}, len(statuses)), " UNION ALL ") + ")" + order,
		append(allArgs, limit), nil
}
