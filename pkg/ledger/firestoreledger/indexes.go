package firestoreledger

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"cloud.google.com/go/firestore"
	"golang.org/x/sync/errgroup"
)

// Sharded timestamps: Firestore limits the write rate of a collection whose documents
// hold a sequential (clock-following) indexed value to 500 writes a second, and the
// documented way around it is a shard field placed before the timestamp in every index
// that holds it, with queries fanned out over the shards
// (https://firebase.google.com/docs/firestore/solutions/shard-timestamp). Every run and
// effect document carries ShardField, the shard of its run ID; every composite index
// with a time in it leads with ShardField (Indexes); every clock-following field is
// exempted from single-field indexing (Unindexed, the TTL field expire_at included, as
// https://firebase.google.com/docs/firestore/best-practices recommends for TTL fields);
// and the listing, the rescue and the sweep query each shard and merge the answers.

// ShardField is the field of every run and effect document that holds its shard,
// ShardOf its run ID: an integer in [0, Shards).
const ShardField = "shard"

// Shards is the number of shards, fixed: a query fans out over all of them, so a
// document of any shard is found whatever this release wrote. 16 raises the
// sequential-write ceiling of each collection from 500 to 8,000 writes a second (the
// page above: 500 × shards), past Firestore's other per-database bounds, for 16 queries
// per listing page, rescue round and sweep.
const Shards = 16

// ShardOf is the shard of the documents of run runID: the value of its first hex digit.
// Run IDs are hashes, so shards are even; an effect is in its run's shard. It is 0 for
// an ID that does not start with a hex digit (never a run's).
func ShardOf(runID string) int64 {
	if runID == "" {
		return 0
	}
	n, err := strconv.ParseInt(runID[:1], 16, 64)
	if err != nil {
		return 0
	}
	return n
}

// IndexField is one field of a composite index.
type IndexField struct {
	Path       string
	Descending bool
}

// Index is a composite index (query scope COLLECTION) on a collection of the ledger,
// named without the prefix (RunsCollection or EffectsCollection).
type Index struct {
	Collection string
	Fields     []IndexField
	// Query says which query needs it.
	Query string
}

// ListFilterFields are the fields the operators' listing filters on by equality.
var ListFilterFields = []string{fieldStatus, fieldJob, fieldNamespace}

// Indexes are the composite indexes the ledger's queries need, and the only ones
// they use: every query is served by one of them, or by several merged (Firestore
// merges indexes for a query with several equality filters). Every index with a field
// of Sequential leads with ShardField. deploy/terraform declares them (its tests check
// it against this list).
func Indexes() []Index {
	shard := IndexField{Path: ShardField}
	out := []Index{
		{RunsCollection, []IndexField{shard, {Path: fieldStatus}, {Path: fieldDeadline}}, "ListRescue (RescueQuery)"},
		{RunsCollection, []IndexField{shard, {Path: fieldExpireAt}}, "Sweep of runs (SweepQuery)"},
		{EffectsCollection, []IndexField{shard, {Path: fieldExpireAt}}, "Sweep of effects (SweepQuery)"},
		{EffectsCollection, []IndexField{{Path: "run_id"}, {Path: "name"}}, "ListEffects (EffectsQuery)"},
	}
	for _, order := range []string{fieldCreatedAt, fieldUpdatedAt} {
		out = append(out, Index{RunsCollection, []IndexField{shard, {Path: order, Descending: true}}, "List by " + order + " (ListQuery)"})
		for _, f := range ListFilterFields {
			out = append(out, Index{RunsCollection, []IndexField{shard, {Path: f}, {Path: order, Descending: true}},
				"List by " + order + " filtered by " + f + " (ListQuery)"})
		}
	}
	return out
}

// Sequential are the fields, by collection, whose values follow the clock (times, and
// a run's attempt ID: a UUIDv7, which starts with its creation time) or a sequence of
// someone else's (a run's key and schedule time, an effect's ref: what its target
// answered): indexed alone, each would bring back the 500 writes a second limit. None
// may have a single-field index, and a composite index may hold one only after
// ShardField. Every other field a document holds spreads its index entries (a hash, or
// a few values each ordered by document name, itself a hash): the tests hold the list.
var Sequential = map[string][]string{
	RunsCollection: {fieldCreatedAt, fieldUpdatedAt, fieldDeadline, fieldExpireAt, "not_before",
		"completed_at", "schedule_time", "key", "attempt_id"},
	EffectsCollection: {"created_at", "updated_at", "done_at", fieldExpireAt, "ref"},
}

// Unindexed are the fields, by collection, exempted from single-field indexing: the
// Sequential ones, ShardField (only ever used in composite indexes), and the large ones
// no query reads (an index entry holds at most 1,500 bytes, and each costs a write).
func Unindexed() map[string][]string {
	return map[string][]string{
		RunsCollection:    append(slices.Clone(Sequential[RunsCollection]), ShardField, fieldPayload, fieldHistory, "result", "progress"),
		EffectsCollection: append(slices.Clone(Sequential[EffectsCollection]), ShardField),
	}
}

// fanOut runs query(shard) for every shard, Shards queries at once, and returns every
// document they found. A document is in one shard, so none comes twice.
func fanOut(ctx context.Context, query func(shard int64) firestore.Query) ([]*firestore.DocumentSnapshot, error) {
	found := make([][]*firestore.DocumentSnapshot, Shards)
	g, gctx := errgroup.WithContext(ctx)
	for s := range int64(Shards) {
		g.Go(func() error {
			snaps, err := query(s).Documents(gctx).GetAll()
			found[s] = snaps
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(found...), nil
}

// firstN sorts docs by cmp and keeps the first n: the merge of the shards' answers.
func firstN[T any](docs []T, n int, compare func(a, b T) int) []T {
	slices.SortFunc(docs, compare)
	return docs[:min(n, len(docs))]
}

// byTime orders documents by the time in field, ascending, then by ID.
func byTime(field string) func(a, b *firestore.DocumentSnapshot) int {
	return func(a, b *firestore.DocumentSnapshot) int {
		return cmp.Or(timeOf(a, field).Compare(timeOf(b, field)), cmp.Compare(a.Ref.ID, b.Ref.ID))
	}
}

// timeOf is the time in a document's field; zero when it holds none.
func timeOf(s *firestore.DocumentSnapshot, field string) time.Time {
	v, err := s.DataAt(field)
	if err != nil {
		return time.Time{}
	}
	t, _ := v.(time.Time)
	return t
}
