package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// List implements ledger.Ledger: one indexed query (migration 0003's runs_*_created and
// runs_*_updated indexes), newest first, keyset-paginated on (time, run_id).
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos, err := driver.ValidateList(p)
	if err != nil {
		return nil, err
	}
	col, after, before := p.TimeRange()
	var where []string
	var args []any
	add := func(cond string, v ...any) { where = append(where, cond); args = append(args, v...) }
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
		add(col+" >= ?", micros(driver.Micros(after)))
	}
	if !before.IsZero() {
		add(col+" < ?", micros(driver.Micros(before)))
	}
	if pos.RunID != "" {
		add("("+col+", run_id) < (?, ?)", micros(pos.At), pos.RunID)
	}
	q := "SELECT " + listColumns + " FROM runs"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + col + " DESC, run_id DESC LIMIT ?"
	args = append(args, size+1)
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

// ListEffects implements ledger.Ledger (index effects_run).
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	if err := driver.ValidateRunID(p.RunID); err != nil {
		return nil, err
	}
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
