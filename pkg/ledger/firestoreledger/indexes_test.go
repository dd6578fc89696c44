package firestoreledger

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/firestore"
	"cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/protobuf/proto"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// TestShardOf: a run ID's shard is its first hex digit, every shard is in [0, Shards),
// and an effect is in its run's shard.
func TestShardOf(t *testing.T) {
	seen := map[int64]bool{}
	for _, c := range "0123456789abcdef" {
		id := string(c) + strings.Repeat("0", ledger.RunIDLen-1)
		s := ShardOf(id)
		if s < 0 || s >= Shards || seen[s] {
			t.Fatalf("ShardOf(%s) = %d: want a shard in [0, %d) no other digit has", id, s, Shards)
		}
		seen[s] = true
		e := encodeEffect(&ledger.Effect{RunID: id, Name: "x"})
		if e[ShardField] != s {
			t.Fatalf("effect of run %s in shard %v, its run in %d", id, e[ShardField], s)
		}
	}
	if len(seen) != Shards {
		t.Fatalf("%d shards used, want %d", len(seen), Shards)
	}
}

// TestIndexesLeadWithShard: every composite index with a sequential field leads with
// the shard, so that none brings back Firestore's 500 writes a second limit, and every
// sequential field is exempted from single-field indexing.
func TestIndexesLeadWithShard(t *testing.T) {
	for _, ix := range Indexes() {
		for i, f := range ix.Fields {
			if slices.Contains(Sequential[ix.Collection], f.Path) && (i == 0 || ix.Fields[0].Path != ShardField) {
				t.Errorf("index %s %v (%s) holds the sequential field %s without leading with %s", ix.Collection, ix.Fields, ix.Query, f.Path, ShardField)
			}
		}
	}
	for coll, fields := range Sequential {
		for _, f := range fields {
			if !slices.Contains(Unindexed()[coll], f) {
				t.Errorf("%s.%s is sequential and keeps its single-field index", coll, f)
			}
		}
	}
}

// spread are the fields, by collection, that keep Firestore's single-field indexes
// (unless Unindexed exempts them anyway), each with why its index entries do not follow
// the clock: a hash, or a few values whose entries are ordered by document name (a hash
// too) within each. A field added to a document must be named here or in Sequential.
var spread = map[string]map[string]string{
	RunsCollection: {
		fieldNamespace: "a few values", fieldJob: "a few values", "payload_hash": "a hash",
		fieldStatus: "five values", "attempt": "a small count", "attempts_made": "a small count",
		"last_error": "an error's text", fieldEffectSeq: "a small count", fieldPayload: "the caller's bytes",
		fieldHistory: "events as JSON", "result": "the job's JSON", "progress": "the job's JSON",
		ShardField: "16 values",
	},
	EffectsCollection: {
		"run_id": "a hash", "name": "a job's few effect names", fieldStatus: "two values",
		"attempt": "a small count", ShardField: "16 values",
	},
}

// TestEveryFieldIsClassified: every field a run or an effect document holds is either
// Sequential (and so exempted from single-field indexing) or in spread, with why its
// index does not follow the clock, so that a field added later gets the same decision.
func TestEveryFieldIsClassified(t *testing.T) {
	fields := map[string][]string{
		RunsCollection:    append(storedFields(runDoc{}), fieldEffectSeq),
		EffectsCollection: storedFields(effectDoc{}),
	}
	for coll, fs := range fields {
		for _, f := range fs {
			seq, why := slices.Contains(Sequential[coll], f), spread[coll][f]
			switch {
			case seq && why != "":
				t.Errorf("%s.%s is both Sequential and spread (%s)", coll, f, why)
			case !seq && why == "":
				t.Errorf("%s.%s is neither Sequential nor spread: does its value follow the clock or a sequence? Its single-field index would bring back the 500 writes a second limit", coll, f)
			}
		}
	}
}

// storedFields are the Firestore field names of the struct doc's fields.
func storedFields(doc any) []string {
	var out []string
	typ := reflect.TypeOf(doc)
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("firestore"), ",")
		out = append(out, name)
	}
	return out
}

// TestQueriesServedByIndexes checks, offline, that every query the ledger runs is served
// by the indexes the ledger declares (Indexes, and the single-field indexes of the
// fields not in Unindexed), by Firestore's rules: a query with equality filters and an
// order is served by composite indexes that each hold some of the equality fields
// followed by exactly the order's fields, together holding every equality field (one
// index, or several merged); an order on one field alone by its single-field index.
// The emulator serves any query without an index, so this is what stands between a
// query changed here and FAILED_PRECONDITION in production.
func TestQueriesServedByIndexes(t *testing.T) {
	l := &Ledger{}
	client, err := firestore.NewClient(t.Context(), "p", firestoreOptionsOffline()...)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	l.runs, l.effects = client.Collection(RunsCollection), client.Collection(EffectsCollection)
	now := time.Now()
	queries := map[string]firestore.Query{
		"rescue":        l.RescueQuery(3, now, 100),
		"sweep runs":    SweepQuery(l.runs, 3, now, 500),
		"sweep effects": SweepQuery(l.effects, 3, now, 500),
		"effects":       l.EffectsQuery(strings.Repeat("a", 64)),
		"run IDs":       l.RunIDsQuery("abcd", "abcdg", 10),
	}
	pos := driver.Position{At: now, RunID: strings.Repeat("b", 64)}
	for mask := range 8 {
		for _, byUpdated := range []bool{false, true} {
			for _, bounded := range []bool{false, true} {
				for _, cursor := range []bool{false, true} {
					p := &ledger.ListParams{}
					if mask&1 != 0 {
						p.Status = ledger.StatusRunning
					}
					if mask&2 != 0 {
						p.Job = "job"
					}
					if mask&4 != 0 {
						p.Namespace = "ns"
					}
					switch {
					case byUpdated:
						p.UpdatedAfter = now.Add(-time.Hour)
						if bounded {
							p.UpdatedBefore = now
						}
					case bounded:
						p.CreatedAfter, p.CreatedBefore = now.Add(-time.Hour), now
					}
					var at driver.Position
					if cursor {
						at = pos
					}
					queries[fmt.Sprintf("list %+v cursor=%v", *p, cursor)] = l.ListQuery(p, at, 51, 7)
				}
			}
		}
	}
	for name, q := range queries {
		if err := servedByIndexes(q); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// servedByIndexes reports why q is not served by the declared indexes, or nil.
func servedByIndexes(q firestore.Query) error {
	b, err := q.Serialize()
	if err != nil {
		return err
	}
	var req firestorepb.RunQueryRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		return err
	}
	sq := req.GetStructuredQuery()
	coll := sq.GetFrom()[0].GetCollectionId()
	var eq, ranged []string
	var filters []*firestorepb.StructuredQuery_FieldFilter
	if f := sq.GetWhere().GetFieldFilter(); f != nil {
		filters = append(filters, f)
	}
	for _, f := range sq.GetWhere().GetCompositeFilter().GetFilters() {
		filters = append(filters, f.GetFieldFilter())
	}
	for _, f := range filters {
		path := f.GetField().GetFieldPath()
		switch f.GetOp() {
		case firestorepb.StructuredQuery_FieldFilter_EQUAL, firestorepb.StructuredQuery_FieldFilter_IN:
			eq = append(eq, path)
		default:
			ranged = append(ranged, path)
		}
	}
	var order []IndexField
	for _, o := range sq.GetOrderBy() {
		if p := o.GetField().GetFieldPath(); p != firestore.DocumentID {
			order = append(order, IndexField{Path: p, Descending: o.GetDirection() == firestorepb.StructuredQuery_DESCENDING})
		}
	}
	for _, r := range ranged {
		if r != firestore.DocumentID && !slices.ContainsFunc(order, func(f IndexField) bool { return f.Path == r }) {
			return fmt.Errorf("a range on %s, which the query does not order by", r)
		}
	}
	if len(order) == 0 && len(eq) == 0 {
		return nil // document names only: Firestore's own index
	}
	if len(eq) == 0 && len(order) == 1 {
		if slices.Contains(Unindexed()[coll], order[0].Path) {
			return fmt.Errorf("ordered by %s alone, whose single-field index is exempted", order[0].Path)
		}
		return nil
	}
	covered := map[string]bool{}
	for _, ix := range Indexes() {
		n := len(ix.Fields) - len(order)
		if ix.Collection != coll || n < 0 || !slices.Equal(ix.Fields[n:], order) {
			continue
		}
		var prefix []string
		for _, f := range ix.Fields[:n] {
			prefix = append(prefix, f.Path)
		}
		if slices.ContainsFunc(prefix, func(p string) bool { return !slices.Contains(eq, p) }) {
			continue
		}
		for _, p := range prefix {
			covered[p] = true
		}
		if n == 0 && len(eq) == 0 {
			return nil
		}
	}
	for _, f := range eq {
		if !covered[f] {
			return fmt.Errorf("no index on %s holds the equality on %s followed by the order %v", coll, f, order)
		}
	}
	return nil
}

// firestoreOptionsOffline make a client that serializes queries and never calls.
func firestoreOptionsOffline() []option.ClientOption {
	return []option.ClientOption{option.WithoutAuthentication(), option.WithEndpoint("127.0.0.1:1")}
}
