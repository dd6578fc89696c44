package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/benchloop"
	"github.com/runonce/runonce/pkg/ledger"
)

// BenchmarkWorkerCallsVsChain alternates rounds, at 8 and 32 goroutines on one pool, of a
// worker's two ledger calls for a no-op job of a new run (Acquire, which creates it
// running, then Complete) and of the raw chain's two statements for it (an INSERT … ON
// CONFLICT DO NOTHING of a running row into a one-index table, then the UPDATE that
// completes it): pkg/worker's BenchmarkPostgresNoopJobsVsChain without Pub/Sub and the
// worker's code, so that what its ratio owes to the statements alone shows. It reports
// each rate (jobs/s) and worker/chain.
func BenchmarkWorkerCallsVsChain(b *testing.B) {
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", n), func(b *testing.B) {
			l := openTest(b, nil)
			chain := rawChain(b, l)
			warm(b, l.pool, chain.Claim, chain.Complete, l.q.acquireQueued, l.q.complete)
			rates := benchloop.Interleaved(b, n, 400, []benchloop.Kind{
				{Name: "chain", Op: chain.Job(l.pool)},
				{Name: "worker", Op: func(ctx context.Context) error { return workerJob(ctx, l) }},
			})
			b.ReportMetric(rates["worker"]/rates["chain"], "worker/chain")
		})
	}
}

// workerJob makes the ledger calls of a worker's no-op job of a new run: Acquire, which
// creates it running, then Complete.
func workerJob(ctx context.Context, l *Ledger) error {
	res, err := l.Acquire(ctx, &ledger.AcquireParams{Identity: benchIdentity(), AttemptID: uuid.NewString(), Lease: time.Minute})
	if err != nil {
		return err
	}
	if res.Outcome != ledger.OutcomeAcquired {
		return fmt.Errorf("acquire of a new run: %v", res.Outcome)
	}
	_, err = l.Complete(ctx, &ledger.CompleteParams{Fence: ledger.Fence{RunID: res.Run.ID, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}})
	return err
}

// BenchmarkNewLedgerGrows runs a worker's two ledger calls for b.N new runs (Acquire,
// then Complete) at 8 goroutines on a new ledger, in four quarters one after another,
// and reports each quarter's jobs/s and the last's over the first's. Its tables are not
// analysed again while it runs (autovacuum's first round comes within a minute): a
// statement whose kept plan reads more of the runs table than its runs slows as the table
// grows, and the ratio shows it. Its ledger's tables are never analysed, which the planner
// takes for ten pages; analysed while empty; or emptied by a sweep of 20,000 finished runs
// and then analysed, so that their pages remain (TestStatementsFindARunByItsKey's
// states). Run it with -benchtime 32000x.
func BenchmarkNewLedgerGrows(b *testing.B) {
	for _, state := range []struct {
		name string
		fill func(testing.TB, *Ledger)
	}{
		{"never-analysed", func(testing.TB, *Ledger) {}},
		{"analysed-empty", emptyAnalysed},
		{"swept-empty", sweptEmpty},
	} {
		b.Run(state.name, func(b *testing.B) {
			l := openTest(b, nil)
			state.fill(b, l)
			newLedgerGrows(b, l)
		})
	}
}

// newLedgerGrows is BenchmarkNewLedgerGrows on l.
func newLedgerGrows(b *testing.B, l *Ledger) {
	ctx := b.Context()
	const goroutines = 8
	var rates [4]float64
	for q := range rates {
		n := b.N / len(rates) / goroutines
		var g errgroup.Group
		start := time.Now()
		for range goroutines {
			g.Go(func() error {
				for range n {
					if err := workerJob(ctx, l); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		rates[q] = float64(n*goroutines) / time.Since(start).Seconds()
		b.ReportMetric(rates[q], fmt.Sprintf("quarter%d-jobs/s", q+1))
	}
	b.ReportMetric(rates[3]/rates[0], "last/first")
}
