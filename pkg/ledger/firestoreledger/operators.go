package firestoreledger

import (
	"context"
	"errors"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// listFields are the fields List reads: every field of a run but its payload and its
// history, which a listing leaves out.
var listFields = []string{
	fieldNamespace, fieldJob, "key", "schedule_time", "payload_hash", fieldStatus, "attempt",
	"attempt_id", fieldDeadline, "not_before", "attempts_made", "last_error", fieldCreatedAt,
	fieldUpdatedAt, "completed_at", fieldExpireAt, "result", "progress",
}

// ListQuery is the query List runs on one shard for p from position pos: equality
// filters on the shard, status, job and namespace, a range on created_at (or
// updated_at), newest first with the document ID as the tie-break, at most limit
// documents. Each order needs the composite index (shard ASC, created_at DESC) or
// (shard ASC, updated_at DESC), and each equality filter with each order (shard ASC,
// FIELD ASC, created_at DESC) or (shard ASC, FIELD ASC, updated_at DESC); Firestore
// merges them for a query with several equality filters (Indexes).
func (l *Ledger) ListQuery(p *ledger.ListParams, pos driver.Position, limit int, shard int64) firestore.Query {
	q := l.runs.Select(listFields...).Where(ShardField, "==", shard)
	if p.Status != "" {
		q = q.Where(fieldStatus, "==", string(p.Status))
	}
	if p.Job != "" {
		q = q.Where(fieldJob, "==", p.Job)
	}
	if p.Namespace != "" {
		q = q.Where(fieldNamespace, "==", p.Namespace)
	}
	field, after, before := p.TimeRange()
	if !after.IsZero() {
		q = q.Where(field, ">=", driver.Micros(after))
	}
	if !before.IsZero() {
		q = q.Where(field, "<", driver.Micros(before))
	}
	q = q.OrderBy(field, firestore.Desc).OrderBy(firestore.DocumentID, firestore.Desc)
	if pos.RunID != "" {
		q = q.StartAfter(pos.At, l.runs.Doc(pos.RunID))
	}
	return q.Limit(limit)
}

// List implements ledger.Driver: ListQuery on every shard at once, each for a page and
// one more run (any shard may hold the whole page), the answers merged newest first and
// cut to the page and one more, which says whether another page follows. A page of n
// runs reads at most Shards × (n+1) documents.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos := driver.ListPage(p)
	snaps, err := fanOut(ctx, func(shard int64) firestore.Query { return l.ListQuery(p, pos, size+1, shard) })
	if err = mapErr(rpcQuery, err, "list runs"); err != nil {
		return nil, err
	}
	out := make([]*ledger.Run, 0, len(snaps))
	for _, snap := range snaps {
		r, err := decodeRun(snap)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	newestFirst := func(a, b *ledger.Run) int {
		return driver.ComparePosition(driver.Position{At: p.SortTime(b), RunID: b.ID}, driver.Position{At: p.SortTime(a), RunID: a.ID})
	}
	return driver.Page(p, firstN(out, size+1, newestFirst), size), nil
}

// RunIDsQuery is the query ListRunIDs runs: the IDs of the run documents in
// [lo, hi), ascending, at most limit, served by Firestore's automatic index of document
// names; it reads no field.
func (l *Ledger) RunIDsQuery(lo, hi string, limit int) firestore.Query {
	return l.runs.Select().
		Where(firestore.DocumentID, ">=", l.runs.Doc(lo)).
		Where(firestore.DocumentID, "<", l.runs.Doc(hi)).
		OrderBy(firestore.DocumentID, firestore.Asc).
		Limit(limit)
}

// ListRunIDs implements ledger.Driver with one query (RunIDsQuery).
func (l *Ledger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	limit, lo, hi := driver.RunIDScan(p)
	it := l.RunIDsQuery(lo, hi, limit).Documents(ctx)
	defer it.Stop()
	var out []string
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err = mapErr(rpcQuery, err, "list run IDs starting with %s", p.Prefix); err != nil {
			return nil, err
		}
		out = append(out, snap.Ref.ID)
	}
}

// EffectsQuery is the query ListEffects runs: the effects of one run by name. It needs
// the composite index (run_id ASC, name ASC) on the effects collection.
func (l *Ledger) EffectsQuery(runID string) firestore.Query {
	return l.effects.Where("run_id", "==", runID).OrderBy("name", firestore.Asc).Limit(ledger.MaxListedEffects)
}

// ListEffects implements ledger.Driver with one query (EffectsQuery).
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	it := l.EffectsQuery(p.RunID).Documents(ctx)
	defer it.Stop()
	var out []*ledger.Effect
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err = mapErr(rpcQuery, err, "list effects of run %s", p.RunID); err != nil {
			return nil, err
		}
		e, err := decodeEffect(snap)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
}
