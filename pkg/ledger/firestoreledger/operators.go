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

// ListQuery is the query List runs for p from position pos: equality filters on
// status, job and namespace, a range on created_at (or updated_at), newest first with
// the document ID as the tie-break, at most limit documents. Each equality filter with
// each order needs the composite index (FIELD ASC, created_at DESC) or (FIELD ASC,
// updated_at DESC); Firestore merges them for a query with several equality filters.
// deploy/terraform declares them.
func (l *Ledger) ListQuery(p *ledger.ListParams, pos driver.Position, limit int) firestore.Query {
	q := l.runs.Select(listFields...)
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

// List implements ledger.Ledger with one query (ListQuery) served by an index.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos, err := driver.ValidateList(p)
	if err != nil {
		return nil, err
	}
	it := l.ListQuery(p, pos, size+1).Documents(ctx)
	defer it.Stop()
	var out []*ledger.Run
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return driver.Page(p, out, size), nil
		}
		if err = mapErr(rpcQuery, err, "list runs"); err != nil {
			return nil, err
		}
		r, err := decodeRun(snap)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
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

// ListRunIDs implements ledger.Ledger with one query (RunIDsQuery).
func (l *Ledger) ListRunIDs(ctx context.Context, p *ledger.ListRunIDsParams) ([]string, error) {
	limit, lo, hi, err := driver.ValidateListRunIDs(p)
	if err != nil {
		return nil, err
	}
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

// ListEffects implements ledger.Ledger with one query (EffectsQuery).
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	if err := driver.ValidateRunID(p.RunID); err != nil {
		return nil, err
	}
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
