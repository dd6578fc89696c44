package ticks_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/schedule"
	"github.com/runonce/runonce/pkg/ticks"
)

// countingGets counts the ledger's Gets.
type countingGets struct {
	ledger.Driver
	gets atomic.Int64
}

func (c *countingGets) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	c.gets.Add(1)
	return c.Driver.Get(ctx, p)
}

// TestAuditAccountsForEveryTick: on every backend, the audit of a job every two minutes
// gives each tick its run's status (queued, completed, failed, cancelled, running; a
// run of another scheduler job name found through the listing) or, without one,
// missing, pending or upcoming; a run of the tick in another namespace does not count;
// a keyed run, a run for no tick and a second run of a tick are listed apart; and pages
// cover the window once.
func TestAuditAccountsForEveryTick(t *testing.T) {
	for _, be := range backends(t) {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Now().UTC().Truncate(2 * time.Minute)
			now := t0.Add(30 * time.Second)
			clk := newClock(now)
			l := be.open(t, clk.Now)
			ns, job := "ns-"+unique(), "audit-"+unique()
			b := book(t, `{"jobs": {"`+job+`": {"schedule": "*/2 * * * *", "missed_after": "5m"}}}`, nil)
			spec, err := b.Spec(job)
			if err != nil {
				t.Fatal(err)
			}
			tick := func(i int) time.Time { return t0.Add(time.Duration(2*i) * time.Minute) }
			ctx := t.Context()

			// Each run is created a few seconds after its tick where the backend takes a
			// clock (on a service, now), as a scheduler's deliveries are.
			when := func(t time.Time) time.Time {
				if be.realTime {
					return time.Time{}
				}
				return t.Add(5 * time.Second)
			}
			claimTick(t, l, ns, job, job, tick(-10), when(tick(-10))) // queued
			for i, end := range map[int]string{-9: "complete", -8: "fail", -7: "cancel", -6: "run"} {
				at := when(tick(i))
				r := claimTick(t, l, ns, job, job, tick(i), at)
				acq, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: ledger.Identity{RunID: r.ID, PayloadHash: r.PayloadHash}, AttemptID: "a-" + unique(), Worker: "w", Now: at})
				if err != nil || acq.Outcome != ledger.OutcomeAcquired {
					t.Fatalf("acquire %d: %v %v", i, acq, err)
				}
				f := ledger.Fence{RunID: r.ID, Attempt: acq.Run.Attempt, AttemptID: acq.Run.AttemptID}
				switch end {
				case "complete":
					_, err = l.Complete(ctx, &ledger.CompleteParams{Fence: f, Now: at})
				case "fail":
					_, err = l.Fail(ctx, &ledger.FailParams{Fence: f, Error: "no", Now: at})
				case "cancel":
					_, err = l.Cancel(ctx, &ledger.OperatorParams{RunID: r.ID, Actor: "op", Reason: "test", Now: at})
				}
				if err != nil {
					t.Fatalf("%s %d: %v", end, i, err)
				}
			}
			claimTick(t, l, "another-ns", job, job, tick(-5), when(tick(-5)))            // not this namespace's: -5 stays missing
			elsewhere := claimTick(t, l, ns, job, "elsewhere", tick(-3), when(tick(-3))) // another scheduler job's name: found by listing
			later := when(tick(-10))
			if !later.IsZero() {
				later = later.Add(time.Second)
			}
			second := claimTick(t, l, ns, job, "elsewhere", tick(-10), later)
			noTick := claimTick(t, l, ns, job, job, t0.Add(-5*time.Minute), when(t0.Add(-5*time.Minute)))
			keyed := claimKeyed(t, l, ns, job, "by-hand", when(now))

			gets := &countingGets{Driver: l}
			r := &ticks.Reader{Ledger: ledger.New(gets, nil), Namespace: ns}
			a, err := r.Audit(ctx, &ticks.AuditParams{Spec: spec, From: tick(-10), To: tick(2), Now: now})
			if err != nil {
				t.Fatal(err)
			}
			want := []schedule.Status{"queued", "completed", "failed", "cancelled", "running", "missing", "missing", "queued", "pending", "pending", "pending", "upcoming"}
			var got []schedule.Status
			for i, row := range a.Rows {
				got = append(got, row.Status)
				if !row.Tick.Time.Equal(tick(i - 10)) {
					t.Errorf("row %d is the tick %s, want %s", i, row.Tick.Time, tick(i-10))
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("statuses (-want +got):\n%s", diff)
			}
			if a.Rows[7].Run == nil || a.Rows[7].Run.ID != elsewhere.ID {
				t.Errorf("tick -3's run is %+v, want the other scheduler job's %s", a.Rows[7].Run, elsewhere.ID)
			}
			if gets.gets.Load() != int64(len(want)) {
				t.Errorf("%d Gets for %d ticks: want one each", gets.gets.Load(), len(want))
			}
			reasons := map[string]string{}
			for _, u := range a.Unmatched {
				reasons[u.Run.ID] = u.Reason
			}
			wantReasons := map[string]string{second.ID: schedule.ReasonSecondRun, noTick.ID: schedule.ReasonNoTick, keyed.ID: schedule.ReasonKeyed}
			if diff := cmp.Diff(wantReasons, reasons); diff != "" {
				for _, row := range a.Rows {
					t.Logf("%v %+v", row.Status, row.Run)
				}
				for _, u := range a.Unmatched {
					t.Logf("%v %+v", u.Reason, u.Run)
				}
				t.Errorf("unmatched runs (-want +got):\n%s", diff)
			}
			if a.Truncated || !a.Next.IsZero() {
				t.Errorf("one page, complete: truncated %v, next %v", a.Truncated, a.Next)
			}

			// Pages of five: the same rows and unmatched runs, each once.
			var paged []schedule.Status
			var pagedUnmatched int
			for from, pages := tick(-10), 0; ; pages++ {
				p, err := r.Audit(ctx, &ticks.AuditParams{Spec: spec, From: from, To: tick(2), Now: now, Limit: 5})
				if err != nil {
					t.Fatal(err)
				}
				for _, row := range p.Rows {
					paged = append(paged, row.Status)
				}
				pagedUnmatched += len(p.Unmatched)
				if p.Next.IsZero() {
					break
				}
				if pages > 3 {
					t.Fatal("more than three pages of five for twelve ticks")
				}
				from = p.Next
			}
			if diff := cmp.Diff(want, paged); diff != "" {
				t.Errorf("paged statuses (-want +got):\n%s", diff)
			}
			// A page lists the runs created from its first tick to its last one's grace
			// after it: on a service the runs were all created now, so only the last
			// pages meet them.
			if !be.realTime && pagedUnmatched != 3 {
				t.Errorf("the pages list %d unmatched runs, want the 3 of the whole window", pagedUnmatched)
			}
		})
	}
}

// TestAuditListingIsBounded: a window with more runs than the reader lists says so
// (Truncated) and still accounts for every tick.
func TestAuditListingIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	l := backends(t)[0].open(t, newClock(now).Now)
	b := book(t, `{"jobs": {"j": {"schedule": "0 * * * *"}}}`, nil)
	spec, _ := b.Spec("j")
	for _, k := range []string{"a", "b", "c"} {
		claimKeyed(t, l, "", "j", k, now)
	}
	claimTick(t, l, "", "j", "j", now.Truncate(time.Hour), now)
	r := &ticks.Reader{Ledger: ledger.New(l, nil), MaxListed: 2}
	a, err := r.Audit(t.Context(), &ticks.AuditParams{Spec: spec, From: now.Add(-3 * time.Hour), To: now.Add(30 * time.Minute), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Truncated || len(a.Unmatched) != 2 || len(a.Rows) != 3 || a.Rows[2].Status != schedule.StatusQueued || a.Rows[1].Status != schedule.StatusMissing {
		t.Fatalf("audit = %+v (truncated %v), want 3 rows (missing ×2, queued) and 2 of the 3 keyed runs, truncated", a.Rows, a.Truncated)
	}
	if _, err := r.Audit(t.Context(), &ticks.AuditParams{Spec: spec, From: now, To: now.Add(time.Hour), Now: now, Limit: ticks.MaxPageSize + 1}); err == nil || !strings.Contains(err.Error(), "page size") {
		t.Errorf("a page over the maximum: %v, want an error naming the page size", err)
	}
}
