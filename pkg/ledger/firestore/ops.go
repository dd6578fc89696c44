package firestoreledger

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"

	"github.com/runonce/runonce/pkg/ledger"
)

// The operators' side: the actions are read-decide-write rounds like the worker's
// transitions (Ledger.update), and List is one query per page.

func (l *Ledger) operate(ctx context.Context, op ledger.Op, p *ledger.OperatorParams,
	apply func(*ledger.Run, *ledger.OperatorParams, time.Time) (*ledger.Run, error),
) (*ledger.Run, error) {
	if err := nowUnsupported(string(op), p.Now); err != nil {
		return nil, err
	}
	if err := ledger.ValidateOperator(p); err != nil {
		return nil, err
	}
	var answer *ledger.Run
	err := l.update(ctx, op, ledger.Note{Actor: p.Actor, Reason: p.Reason}, p.RunID, func(cur *ledger.Run, now time.Time) (change, error) {
		next, err := apply(cur, p, now)
		answer = next
		return change{put: next}, err
	})
	if err != nil {
		return nil, err
	}
	return answer, nil
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

// ListQuery is the query of one page of List: equality filters on status, job and
// namespace, a range on created_at (or updated_at), ordered by it and the document ID,
// both descending, starting after the cursor's position. Each equality field needs the
// composite index (field ASC, created_at DESC, __name__ DESC), and the same with
// updated_at, on the runs collection (deploy/terraform/modules/runonce/firestore.tf);
// Firestore merges them for several equality filters.
func (l *Ledger) ListQuery(p *ledger.ListParams, size int, pos ledger.Position) firestore.Query {
	col := fieldCreatedAt
	after, before := p.CreatedAfter, p.CreatedBefore
	if p.ByUpdated() {
		col, after, before = fieldUpdatedAt, p.UpdatedAfter, p.UpdatedBefore
	}
	q := l.runs.Query
	if p.Status != "" {
		q = q.Where(fieldStatus, "==", string(p.Status))
	}
	if p.Job != "" {
		q = q.Where(fieldJob, "==", p.Job)
	}
	if p.Namespace != "" {
		q = q.Where(fieldNamespace, "==", p.Namespace)
	}
	if !after.IsZero() {
		q = q.Where(col, ">=", ledger.Truncate(after))
	}
	if !before.IsZero() {
		q = q.Where(col, "<", ledger.Truncate(before))
	}
	q = q.OrderBy(col, firestore.Desc).OrderBy(firestore.DocumentID, firestore.Desc)
	if pos.RunID != "" {
		q = q.StartAfter(pos.At, l.runs.Doc(pos.RunID))
	}
	return q.Limit(size + 1)
}

// List implements ledger.Ledger.
func (l *Ledger) List(ctx context.Context, p *ledger.ListParams) (*ledger.ListResult, error) {
	size, pos, err := ledger.ValidateList(p)
	if err != nil {
		return nil, err
	}
	it := l.ListQuery(p, size, pos).Documents(ctx)
	defer it.Stop()
	var out []*ledger.Run
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err = mapErr(rpcQuery, err, "list runs"); err != nil {
			return nil, err
		}
		r, err := decodeRun(snap)
		if err != nil {
			return nil, err
		}
		r.Payload, r.History = nil, nil
		out = append(out, r)
	}
	return ledger.Page(p, out, size), nil
}

// ListEffects implements ledger.Ledger: one query on run_id (its automatic single-field
// index), sorted by name here.
func (l *Ledger) ListEffects(ctx context.Context, p *ledger.ListEffectsParams) ([]*ledger.Effect, error) {
	if !ledger.ValidRunID(p.RunID) {
		return nil, ledger.Invalidf("run ID %q is not 64 lower-case hex digits", p.RunID)
	}
	it := l.effects.Where(fieldRunID, "==", p.RunID).Limit(ledger.MaxListedEffects).Documents(ctx)
	defer it.Stop()
	var out []*ledger.Effect
	for {
		snap, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
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
	slices.SortFunc(out, func(a, b *ledger.Effect) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
