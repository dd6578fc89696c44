package redisledger

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/runonce/runonce/pkg/ledger"
)

// TestListDropsStaleEntries: an index entry whose run is gone (its key expired before any
// claim trimmed it), or that no longer matches its index, is neither listed nor kept.
func TestListDropsStaleEntries(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	gone, live := ledger.KeyedRunID("stale", "job", uuid.NewString()), ledger.KeyedRunID("stale", "job", uuid.NewString())
	for _, id := range []string{gone, live} {
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Job: "job"}, AttemptID: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.rdb.Del(ctx, l.runKey(gone)).Err(); err != nil {
		t.Fatal(err)
	}
	r, err := l.Get(ctx, &ledger.GetParams{RunID: live})
	if err != nil {
		t.Fatal(err)
	}
	failed := l.o.Prefix + "list:created:status:failed"
	if err := l.rdb.ZAdd(ctx, failed, redisZ(r.CreatedAt, live)).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := l.List(ctx, &ledger.ListParams{Job: "job"})
	if err != nil || len(res.Runs) != 1 || res.Runs[0].ID != live {
		t.Fatalf("List(job) = %+v, %v; want only the live run", res, err)
	}
	if res, err := l.List(ctx, &ledger.ListParams{Status: ledger.StatusFailed}); err != nil || len(res.Runs) != 0 {
		t.Fatalf("List(failed) = %+v, %v; want none: the run is queued", res, err)
	}
	if n, _ := l.rdb.ZCard(ctx, l.o.Prefix+"list:created:job:job").Result(); n != 1 {
		t.Fatalf("the job's index holds %d entries after the listing, want the live one", n)
	}
	if n, _ := l.rdb.ZCard(ctx, failed).Result(); n != 0 {
		t.Fatalf("the failed index holds %d entries after the listing, want the stale one dropped", n)
	}
}

// TestListPagesThroughEqualTimesAndShortReads: runs created in the same microsecond are
// each listed once, in descending run ID order, across pages; and a listing whose filter
// the index does not serve, with its reads bounded below what it must skip, ends its
// pages short with a cursor that goes on, and finds the run.
func TestListPagesThroughEqualTimesAndShortReads(t *testing.T) {
	t.Parallel()
	l := openTest(t, nil)
	ctx := t.Context()
	t0 := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	claim := func(job string, at time.Time) string {
		id := ledger.KeyedRunID("page", job, uuid.NewString())
		if _, err := l.Claim(ctx, &ledger.ClaimParams{Identity: ledger.Identity{RunID: id, Job: job}, AttemptID: "a", Now: at}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	target := claim("rare", t0)
	var same []string
	for range 7 {
		same = append(same, claim("common", t0.Add(time.Second)))
	}
	slices.Sort(same)
	slices.Reverse(same)
	listAll := func(p ledger.ListParams) ([]string, int) {
		var ids []string
		pages := 0
		for ; pages < 50; pages++ {
			res, err := l.List(ctx, &p)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.Runs {
				ids = append(ids, r.ID)
			}
			if res.Next == "" {
				return ids, pages + 1
			}
			p.Cursor = res.Next
		}
		t.Fatal("the listing does not end")
		return nil, 0
	}
	if got, _ := listAll(ledger.ListParams{Job: "common", PageSize: 2}); !slices.Equal(got, same) {
		t.Fatalf("List(common, 2 a page) = %v, want %v", got, same)
	}
	l.listBudget, l.listCalls = 2, 1
	got, pages := listAll(ledger.ListParams{Job: "rare", UpdatedAfter: t0.Add(-time.Second), PageSize: 5})
	if !slices.Equal(got, []string{target}) || pages < 4 {
		t.Fatalf("List(rare, by update, 2 entries read a page) = %v in %d pages, want the rare run after short pages", got, pages)
	}
	if got, _ := listAll(ledger.ListParams{PageSize: 3}); len(got) != 8 || got[7] != target {
		t.Fatalf("List(all, 2 entries read a page) = %v, want the 8 runs, the rare one last", got)
	}
}

func redisZ(at time.Time, id string) redis.Z {
	return redis.Z{Score: float64(at.UnixMicro()), Member: id}
}
