package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/memory"
	"github.com/runonce/runonce/pkg/worker"
	"github.com/runonce/runonce/pkg/worker/workertest"
)

// itemIDs returns n item IDs.
func itemIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%04d", i)
	}
	return ids
}

// itemSink is a downstream that counts calls per item and the keys it was sent.
type itemSink struct {
	mu    sync.Mutex
	calls map[string]int
	keys  map[string]map[string]bool
	// fail makes the item's call fail while it returns true.
	fail func(item string, attempt int64) bool
	// inFlight and maxInFlight measure the parallelism.
	inFlight, maxInFlight atomic.Int32
}

func newItemSink() *itemSink {
	return &itemSink{calls: map[string]int{}, keys: map[string]map[string]bool{}}
}

func (s *itemSink) call(ctx context.Context, item, key string) error {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(100 * time.Microsecond) // a downstream takes time: items overlap
	j, _ := worker.JobFromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[item]++
	if s.keys[item] == nil {
		s.keys[item] = map[string]bool{}
	}
	s.keys[item][key] = true
	if s.fail != nil && s.fail(item, j.Attempt) {
		return errors.New("downstream 503")
	}
	return nil
}

func report(t *testing.T, r *workertest.Result) worker.BatchReport {
	t.Helper()
	var rep worker.BatchReport
	if err := json.Unmarshal(r.Run.Result, &rep); err != nil {
		t.Fatalf("the run's result %q is not a batch report: %v", r.Run.Result, err)
	}
	return rep
}

func TestBatch(t *testing.T) {
	t.Parallel()

	t.Run("EveryItemOnceUnderItsKeyWithBoundedParallelism", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		sink := newItemSink()
		ids := itemIDs(250)
		h.Mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			_, err := worker.Batch(ctx, "reminders", ids, sink.call, &worker.BatchOptions{Parallelism: 4})
			return err
		})
		r := h.Deliver("remind", "nightly", nil)
		if r.Outcome != worker.OutcomeCompleted {
			t.Fatalf("outcome %s (%s)", r.Outcome, r.Run.LastError)
		}
		for _, id := range ids {
			want := worker.BatchItemKey(r.Run.ID, "reminders", id)
			if sink.calls[id] != 1 || !sink.keys[id][want] {
				t.Fatalf("item %s: %d calls with keys %v; want one, with %s", id, sink.calls[id], sink.keys[id], want)
			}
		}
		if got := sink.maxInFlight.Load(); got > 4 || got < 2 {
			t.Errorf("at most %d items in flight; want up to the parallelism, 4", got)
		}
		if rep := report(t, r); rep.Total != 250 || rep.Done != 250 || rep.Failed != 0 {
			t.Errorf("result %+v; want 250 done of 250", rep)
		}
		if string(r.Run.Progress) != `{"reminders":{"done":250,"failed":0,"total":250}}` {
			t.Errorf("progress %s; want 250 of 250 done", r.Run.Progress)
		}
		// Two ledger records per checkpoint of 100 items, none per item.
		if len(r.Effects) != 3 {
			t.Errorf("%d effect records for 250 items; want 3 (one per 100 items)", len(r.Effects))
		}
		if again := h.Deliver("remind", "nightly", nil); again.Outcome != worker.OutcomeTerminal || len(sink.calls) != 250 {
			t.Fatalf("duplicate = %s; want terminal and no item again", again.Outcome)
		}
	})

	t.Run("ReleaseRunRedoesOnlyWhatIsLeft", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		sink := newItemSink()
		sink.fail = func(item string, attempt int64) bool { return item == "item-0150" && attempt == 1 }
		ids := itemIDs(300)
		h.Mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			_, err := worker.Batch(ctx, "reminders", ids, sink.call, &worker.BatchOptions{Parallelism: 1})
			return err
		})
		first := h.Deliver("remind", "k", nil)
		if first.Outcome != worker.OutcomeReleased || !strings.Contains(first.Run.LastError, "item item-0150 failed, the run is released") {
			t.Fatalf("first = %s, %q; want released, naming the item", first.Outcome, first.Run.LastError)
		}
		if string(first.Run.Progress) != `{"reminders":{"done":100,"failed":0,"total":300}}` {
			t.Errorf("released run's progress %s; want the first 100 done", first.Run.Progress)
		}
		second := h.Deliver("remind", "k", nil)
		if second.Outcome != worker.OutcomeCompleted {
			t.Fatalf("second = %s (%s)", second.Outcome, second.Run.LastError)
		}
		for _, id := range ids {
			// Items 100-199 share item-0150's checkpoint, left open by the first
			// attempt: the second redoes it, with the same keys. Those up to item-0150
			// ran in both; one more may have started before the failure stopped the batch.
			lo, hi := 1, 1
			switch {
			case id >= "item-0100" && id <= "item-0150":
				lo, hi = 2, 2
			case id >= "item-0151" && id <= "item-0199":
				hi = 2
			}
			if n := sink.calls[id]; n < lo || n > hi || len(sink.keys[id]) != 1 {
				t.Fatalf("item %s: %d calls with %d keys; want %d to %d with one key", id, n, len(sink.keys[id]), lo, hi)
			}
		}
		if rep := report(t, second); rep.Done != 300 || rep.Skipped != 100 {
			t.Errorf("report %+v; want 300 done, 100 of them skipped (done by the first attempt)", rep)
		}
	})

	t.Run("SkipItemRecordsFailuresAndGoesOn", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		sink := newItemSink()
		sink.fail = func(item string, _ int64) bool { return strings.HasSuffix(item, "7") }
		var crash atomic.Bool
		crash.Store(true)
		ids := itemIDs(120)
		h.Mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			rep, err := worker.Batch(ctx, "reminders", ids, sink.call, &worker.BatchOptions{OnItemError: worker.SkipItem, Checkpoint: 50})
			if err == nil && crash.Swap(false) {
				return fmt.Errorf("crash after the batch (%d done)", rep.Done)
			}
			return err
		})
		if r := h.Deliver("remind", "k", nil); r.Outcome != worker.OutcomeReleased {
			t.Fatalf("first = %s", r.Outcome)
		}
		r := h.Deliver("remind", "k", nil)
		rep := report(t, r)
		if r.Outcome != worker.OutcomeCompleted || rep.Failed != 12 || rep.Done != 108 || rep.Skipped != 108 || len(rep.FailedItems) != 12 || rep.FailedItems[0] != "item-0007" {
			t.Fatalf("second = %s with %+v; want completed, 12 failed (listed, from the records of the first attempt), 108 done", r.Outcome, rep)
		}
		if sink.calls["item-0007"] != 1 {
			t.Errorf("a failed item was called %d times; want once (SkipItem does not retry)", sink.calls["item-0007"])
		}
	})

	t.Run("FailRunFailsTheRun", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		sink := newItemSink()
		sink.fail = func(item string, _ int64) bool { return item == "item-0003" }
		h.Mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			_, err := worker.Batch(ctx, "reminders", itemIDs(10), sink.call, &worker.BatchOptions{OnItemError: worker.FailRun})
			return err
		})
		if r := h.Deliver("remind", "k", nil); r.Outcome != worker.OutcomeFailed || !strings.Contains(r.Run.LastError, "item item-0003 failed, the run fails") {
			t.Fatalf("run = %s, %q; want failed, naming the item", r.Outcome, r.Run.LastError)
		}
	})

	t.Run("DuplicateIDFailsTheRun", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, nil)
		h.Mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			_, err := worker.Batch(ctx, "reminders", []string{"a", "b", "a"}, newItemSink().call, nil)
			return err
		})
		if r := h.Deliver("remind", "k", nil); r.Outcome != worker.OutcomeFailed || !strings.Contains(r.Run.LastError, `duplicate ID "a"`) {
			t.Fatalf("run = %s, %q; want failed, naming the duplicate", r.Outcome, r.Run.LastError)
		}
	})

	t.Run("ProgressIsInTheRecordWhileItRuns", func(t *testing.T) {
		t.Parallel()
		h := workertest.New(t, &workertest.Options{Config: worker.Config{Lease: 300 * time.Millisecond}})
		release := make(chan struct{})
		h.Mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			_, err := worker.Batch(ctx, "reminders", itemIDs(20), func(ctx context.Context, item, key string) error {
				if item == "item-0015" {
					<-release
				}
				return nil
			}, &worker.BatchOptions{Checkpoint: 5, Parallelism: 1})
			return err
		})
		id := ledger.KeyedRunID(workertest.Namespace, "remind", "k")
		done := make(chan *workertest.Result)
		go func() { done <- h.Deliver("remind", "k", nil) }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, err := h.Ledger.Get(t.Context(), &ledger.GetParams{RunID: id})
			if err == nil && string(r.Progress) == `{"reminders":{"done":15,"failed":0,"total":20}}` {
				break
			}
			if time.Now().After(deadline) {
				close(release)
				t.Fatalf("the running run's progress is %q, want 15 of 20 done (written by the lease renewals)", r.Progress)
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(release)
		if r := <-done; r.Outcome != worker.OutcomeCompleted {
			t.Fatalf("outcome %s", r.Outcome)
		}
	})

	t.Run("ConcurrentEffectWritesOfARunContend", func(t *testing.T) {
		t.Parallel()
		// Firestore fences a run's effect writes through its record: two at once
		// contend. A batch makes its own one at a time, and retries a contended one.
		l := &effectContention{Driver: memory.New(nil)}
		b := setup(t, l, &worker.Config{Lease: time.Minute})
		b.mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			_, err := worker.Batch(ctx, "reminders", itemIDs(400), newItemSink().call, &worker.BatchOptions{Checkpoint: 10})
			return err
		})
		m := message("remind", "k", "")
		if v := b.process(m); v.Outcome != worker.OutcomeCompleted {
			t.Fatalf("outcome %s: %s", v.Outcome, b.run(m.Identity.RunID).LastError)
		}
		if n := l.refused.Load(); n != 0 {
			t.Errorf("%d of the batch's effect writes overlapped another; want none", n)
		}
	})

	t.Run("ItemsAreCountedInMetrics", func(t *testing.T) {
		t.Parallel()
		reader := sdkmetric.NewManualReader()
		meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")
		b := setup(t, nil, &worker.Config{Lease: time.Minute, Meter: meter})
		sink := newItemSink()
		sink.fail = func(item string, _ int64) bool { return item == "item-0004" }
		b.mux.HandleFunc("remind", func(ctx context.Context, j *worker.Job) error {
			_, err := worker.Batch(ctx, "reminders", itemIDs(30), sink.call, &worker.BatchOptions{OnItemError: worker.SkipItem})
			return err
		})
		if v := b.process(message("remind", "k", "")); v.Outcome != worker.OutcomeCompleted {
			t.Fatalf("outcome %s", v.Outcome)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "runonce.worker.batch.items" {
					for _, dp := range sum.DataPoints {
						outcome, _ := dp.Attributes.Value("outcome")
						batch, _ := dp.Attributes.Value("batch")
						got[batch.AsString()+"/"+outcome.AsString()] += dp.Value
					}
				}
			}
		}
		if got["reminders/done"] != 29 || got["reminders/failed"] != 1 {
			t.Errorf("runonce.worker.batch.items = %v; want 29 done and 1 failed for the batch reminders", got)
		}
	})

	t.Run("OutsideAJob", func(t *testing.T) {
		t.Parallel()
		if _, err := worker.Batch(t.Context(), "b", []string{"a"}, newItemSink().call, nil); !errors.Is(err, worker.ErrNotInJob) {
			t.Fatalf("Batch outside a job = %v; want ErrNotInJob", err)
		}
	})
}

// effectContention refuses an effect write that overlaps another, as Firestore's
// contended transactions do.
type effectContention struct {
	ledger.Driver
	inFlight, refused atomic.Int32
}

func (l *effectContention) enter() error {
	if l.inFlight.Add(1) > 1 {
		l.inFlight.Add(-1)
		l.refused.Add(1)
		return fmt.Errorf("%w: another effect write of the run is in flight", ledger.ErrContended)
	}
	time.Sleep(200 * time.Microsecond)
	return nil
}

func (l *effectContention) BeginEffect(ctx context.Context, p *ledger.BeginEffectParams) (*ledger.BeginEffectResult, error) {
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.inFlight.Add(-1)
	return l.Driver.BeginEffect(ctx, p)
}

func (l *effectContention) CompleteEffect(ctx context.Context, p *ledger.CompleteEffectParams) (*ledger.Effect, error) {
	if err := l.enter(); err != nil {
		return nil, err
	}
	defer l.inFlight.Add(-1)
	return l.Driver.CompleteEffect(ctx, p)
}
