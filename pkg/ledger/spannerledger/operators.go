package spannerledger

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/spanner"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// listIndex is the index a listing walks on each shard: the one of its order
// (created_at or updated_at) led by the shard and its equality filter when there is one
// (Schema's runs_by_shard_*), so a shard's part of a page reads at most a page of index
// entries past the filters it cannot serve.
func listIndex(p *ledger.ListParams) string {
	col := "created"
	if p.ByUpdated() {
		col = "updated"
	}
	switch {
	case p.Status != "":
		return "runs_by_shard_status_" + col
	case p.Job != "" && col == "created":
		return "runs_by_shard_job_created"
	case p.Namespace != "" && col == "created":
		return "runs_by_shard_namespace_created"
	}
	return "runs_by_shard_" + col
}

// perShard is one query that runs the query shard(s) on every shard, each with ORDER BY
// and LIMIT @limit so that it reads a range of a shard-led index, and merges their rows
// in order (Spanner would otherwise read every row of an IN list over the shards to sort
// them): at most Shards × @limit index entries, one strong read.
func perShard(shard func(s int) string, order string) string {
	parts := make([]string, Shards)
	for s := range Shards {
		parts[s] = "(" + shard(s) + ")"
	}
	return "SELECT * FROM (" + strings.Join(parts, " UNION ALL ") + ") ORDER BY " + order + " LIMIT @limit"
}

// List implements ledger.Driver with one strong read over a listing index (listIndex)
// on every shard (perShard), newest first, keyset-paginated on (time, run ID): a page of
// n runs reads at most Shards × (n+1) index entries.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos := driver.ListPage(p)
	col, after, before := p.TimeRange()
	var where []string
	params := map[string]any{"limit": int64(size + 1)}
	add := func(cond, name string, v any) { where = append(where, cond); params[name] = v }
	if p.Status != "" {
		add("r.status = @status", "status", string(p.Status))
	}
	if p.Job != "" {
		add("r.job = @job", "job", p.Job)
	}
	if p.Namespace != "" {
		add("r.namespace = @namespace", "namespace", p.Namespace)
	}
	if !after.IsZero() {
		add("r."+col+" >= @after", "after", driver.Micros(after))
	}
	if !before.IsZero() {
		add("r."+col+" < @before", "before", driver.Micros(before))
	}
	if pos.RunID != "" {
		add("(r."+col+" < @at OR (r."+col+" = @at AND r.run_id < @id))", "at", pos.At)
		params["id"] = pos.RunID
	}
	sql := perShard(func(s int) string {
		return `SELECT ` + selectListed + ` FROM runs@{FORCE_INDEX=` + listIndex(p) + `} AS r WHERE ` +
			strings.Join(append([]string{fmt.Sprintf("r.shard = %d", s)}, where...), " AND ") +
			` ORDER BY r.` + col + ` DESC, r.run_id DESC LIMIT @limit`
	}, col+" DESC, run_id DESC")
	out, err := l.queryRuns(ctx, spanner.Statement{SQL: sql, Params: params})
	if err != nil {
		return nil, interpretError("list runs", err)
	}
	return driver.Page(p, out, size), nil
}

// ListRunIDs implements ledger.Driver with one strong read of a range of the runs'
// primary key, reading the key alone.
func (l *Ledger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	limit, lo, hi := driver.RunIDScan(p)
	keys := spanner.KeyRange{Start: spanner.Key{lo}, End: spanner.Key{hi}, Kind: spanner.ClosedOpen}
	var out []string
	err := l.client.Single().ReadWithOptions(ctx, "runs", keys, []string{"run_id"}, &spanner.ReadOptions{Limit: limit}).
		Do(func(r *spanner.Row) error {
			var id string
			if err := r.Column(0, &id); err != nil {
				return err
			}
			out = append(out, id)
			return nil
		})
	if err != nil {
		return nil, interpretError("list run IDs starting with "+p.Prefix, err)
	}
	return out, nil
}

// ListEffects implements ledger.Driver with one strong read of the run's interleaved
// effects, in primary-key (name) order.
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
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
