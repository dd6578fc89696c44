package firestoreledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/ledger"
)

// MetaCollection (after the prefix) holds the ledger's own bookkeeping: the document
// backfillDoc, the progress of the shard backfill. No query reads it.
const MetaCollection = "meta"

// backfillDoc is the document of MetaCollection that records the shard backfill.
const backfillDoc = "shard-backfill"

// backfillSettle is how long after the first instance of this release ran the backfill
// starts: instances of an earlier release, which write documents without a shard, are
// gone by then (a rollout takes minutes).
const backfillSettle = time.Hour

// backfillBudget bounds the time one Sweep spends on the backfill.
const backfillBudget = 5 * time.Second

// BackfillShards sets ShardField on the documents of the runs, then of the effects, that
// an earlier release wrote without it, so that the sharded queries (the listing, the
// rescue and the sweep) see them. It reads up to limit documents (their shard and run ID
// alone) in document-name order after the position after ("" for the start of the
// runs), sets the shard of those that lack it (a write of that one field, which fails
// for a document deleted since), and returns the position to continue from ("" when both
// collections are done) and how many documents it fixed. Documents written by this
// release hold their shard already: a pass costs a read per document and a write per
// document fixed.
//
// Sweep runs it by itself, a few seconds at a time, once per database (its progress is in
// the collection MetaCollection), starting an hour after the first instance of this
// release ran. Instances of an earlier release still writing after that (a traffic split
// kept for longer) write documents it does not see: run it again, from "", once they are
// gone.
func (l *Ledger) BackfillShards(ctx context.Context, after string, limit int) (next string, fixed int, err error) {
	name, id, _ := strings.Cut(after, "/")
	coll := l.runs
	switch name {
	case "":
		name = RunsCollection
	case RunsCollection:
	case EffectsCollection:
		coll = l.effects
	default:
		return "", 0, fmt.Errorf("%w: firestoreledger: backfill position %q is not runs/ID or effects/ID", ledger.ErrInvalid, after)
	}
	q := coll.Select(ShardField, "run_id").OrderBy(firestore.DocumentID, firestore.Asc).Limit(limit)
	if id != "" {
		q = q.StartAfter(id)
	}
	snaps, err := q.Documents(ctx).GetAll()
	if err = mapErr(rpcQuery, err, "backfill: list %s after %q", coll.ID, id); err != nil {
		return "", 0, err
	}
	var n int
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, s := range snaps {
		if _, err := s.DataAt(ShardField); err == nil {
			continue
		}
		runID := s.Ref.ID
		if coll == l.effects {
			runID, _ = s.Data()["run_id"].(string)
		}
		if !ledger.ValidRunID(runID) {
			continue // not a run's document
		}
		n++
		g.Go(func() error {
			_, err := s.Ref.Update(gctx, []firestore.Update{{Path: ShardField, Value: ShardOf(runID)}})
			if err = mapErr(rpcWrite, err, "backfill: set the shard of %s/%s", coll.ID, s.Ref.ID); errors.Is(err, errStale) {
				return nil // deleted since it was listed
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return "", 0, err
	}
	switch {
	case len(snaps) == limit:
		return name + "/" + snaps[len(snaps)-1].Ref.ID, n, nil
	case coll == l.runs:
		return EffectsCollection + "/", n, nil
	}
	return "", n, nil
}

// backfillState is the document backfillDoc.
type backfillState struct {
	// Started is when the first instance of this release looked: the backfill starts
	// backfillSettle after.
	Started time.Time `firestore:"started"`
	// Position is where the backfill stands (BackfillShards).
	Position string `firestore:"position"`
	Fixed    int64  `firestore:"fixed"`
	Done     bool   `firestore:"done"`
}

// backfillStep advances the shard backfill for at most backfillBudget, once this
// process has not seen it done (see BackfillShards). Several workers may step at once:
// each writes its progress only if the record is still the one it read.
func (l *Ledger) backfillStep(ctx context.Context) error {
	if l.backfilled.Load() {
		return nil
	}
	ref := l.client.Collection(l.prefix + MetaCollection).Doc(backfillDoc)
	snap, err := ref.Get(ctx)
	if err = mapErr(rpcRead, err, "backfill: read its progress"); errors.Is(err, ledger.ErrNotFound) && snap != nil {
		_, err = ref.Create(ctx, backfillState{Started: snap.ReadTime})
		if err = mapErr(rpcCreate, err, "backfill: record its start"); errors.Is(err, errExists) {
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	var st backfillState
	if err := snap.DataTo(&st); err != nil {
		return fmt.Errorf("firestoreledger: backfill: decode its progress: %w", err)
	}
	if st.Done {
		l.backfilled.Store(true)
		return nil
	}
	if snap.ReadTime.Before(st.Started.Add(backfillSettle)) {
		return nil
	}
	for stop := time.Now().Add(backfillBudget); !st.Done && time.Now().Before(stop); {
		next, n, err := l.BackfillShards(ctx, st.Position, 500)
		if err != nil {
			return err
		}
		st.Position, st.Fixed, st.Done = next, st.Fixed+int64(n), next == ""
	}
	_, err = ref.Update(ctx, []firestore.Update{{Path: "position", Value: st.Position}, {Path: "fixed", Value: st.Fixed},
		{Path: "done", Value: st.Done}}, firestore.LastUpdateTime(snap.UpdateTime))
	if err = mapErr(rpcWrite, err, "backfill: record its progress"); errors.Is(err, errStale) {
		return nil // another worker recorded its own
	}
	if err == nil && st.Done {
		l.backfilled.Store(true)
	}
	return err
}
