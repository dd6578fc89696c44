package worker_test

import (
	"context"
	"errors"
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
	ledger.Driver
	late    time.Duration
	advance func(time.Duration)
}

func (l *lateAcquire) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	res, err := l.Driver.Acquire(ctx, p)
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
			Ledger:  ledger.New(&lateAcquire{Driver: memory.New(&memory.Options{Clock: clock}), late: tc.late, advance: advance}, nil),
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

// A message's age is judged by Config.Now, not the machine's clock: a worker whose
// clock (a simulation's, or the ledger's) is past the retention after the message's
// EnqueuedAt must treat it as old and drop it when its run has no record. Before, the
// age was time.Since, so a simulated clock never made a message old.
func TestMessageAgeIsJudgedByConfigNow(t *testing.T) {
	const retention = 24 * time.Hour
	sent := time.Now().UTC()
	later := sent.Add(retention + time.Hour)
	clock := func() time.Time { return later }
	started := false
	mem := memory.New(&memory.Options{Clock: clock})
	w, err := worker.New(&worker.Config{
		Ledger:    ledger.New(mem, nil),
		Handler:   worker.HandlerFunc(func(context.Context, *worker.Job) error { started = true; return nil }),
		Retention: retention, UnsafeRetention: true, Now: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"n":1}`)
	msg := &queue.Message{Identity: ledger.Identity{
		RunID: ledger.KeyedRunID("ns", "job", "old"), Namespace: "ns", Job: "job", Key: "old", PayloadHash: ledger.PayloadHash(payload), Payload: payload,
	}, EnqueuedAt: sent}
	v := w.Process(t.Context(), &queue.Delivery{Message: msg, PublishTime: sent})
	if started || !v.Ack || v.Outcome != worker.OutcomeDropped {
		t.Fatalf("a message %s old by Config.Now whose run has no record: job started = %v, verdict %+v; want it dropped", retention+time.Hour, started, v)
	}
	if _, err := mem.Get(t.Context(), &ledger.GetParams{RunID: msg.Identity.RunID}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the dropped message created its run: %v", err)
	}
}
