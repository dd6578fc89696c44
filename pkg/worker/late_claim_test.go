package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/queue"
	"github.com/runonce/runonce/pkg/worker"
)

// lateAcquire answers every worker claim after the clock moved on by late.
type lateAcquire struct {
	ledger.Ledger
	late    time.Duration
	advance func(time.Duration)
}

func (l *lateAcquire) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	res, err := l.Ledger.Acquire(ctx, p)
	l.advance(l.late)
	return res, err
}

// A claim whose answer comes later than the lease keeper's self-fence point may hold a
// lease that has run out, and another attempt may hold the run: the job must not start
// (found by the simulation, internal/sim seed 4313).
func TestClaimAnsweredTooLateDoesNotStartTheJob(t *testing.T) {
	const lease = 30 * time.Second
	for _, tc := range []struct {
		late  time.Duration
		start bool
	}{{lease / 2, true}, {lease - lease/6, false}, {2 * lease, false}} {
		var (
			mu  sync.Mutex
			now = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		)
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
		started := false
		w, err := worker.New(&worker.Config{
			Ledger:  &lateAcquire{Ledger: memory.New(&memory.Options{Clock: clock}), late: tc.late, advance: advance},
			Handler: worker.HandlerFunc(func(context.Context, *worker.Job) error { started = true; return nil }),
			Lease:   lease, Now: clock,
		})
		if err != nil {
			t.Fatal(err)
		}
		payload := []byte(`{"n":1}`)
		msg := &queue.Message{Identity: ledger.Identity{
			RunID: ledger.KeyedRunID("ns", "job", "k"), Namespace: "ns", Job: "job", Key: "k", PayloadHash: ledger.PayloadHash(payload), Payload: payload,
		}}
		v := w.Process(t.Context(), &queue.Delivery{Message: msg})
		if started != tc.start {
			t.Errorf("claim answered %s late (lease %s): job started = %v, want %v (verdict %+v)", tc.late, lease, started, tc.start, v)
		}
		if !tc.start && (v.Ack || v.Outcome != worker.OutcomeLeaseLost) {
			t.Errorf("claim answered %s late: verdict %+v, want a nack with outcome %s", tc.late, v, worker.OutcomeLeaseLost)
		}
	}
}
