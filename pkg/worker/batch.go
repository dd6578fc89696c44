package worker

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/ledger"
)

// ItemPolicy says what an item's error does to its batch (BatchOptions.OnItemError).
type ItemPolicy int

// The item policies.
const (
	// ReleaseRun (the default) stops the batch and returns the item's error: the
	// handler returns it and the run is released, so that the next attempt does what is
	// left, the failed item included. (An item error marked Permanent fails the run.)
	ReleaseRun ItemPolicy = iota
	// FailRun stops the batch and returns the item's error marked Permanent: the run
	// fails for good, with what was done kept done.
	FailRun
	// SkipItem records the item as failed and goes on; the batch reports it (Failed,
	// FailedItems), and no later attempt retries it.
	SkipItem
)

// Defaults of BatchOptions.
const (
	// DefaultBatchParallelism is how many items a batch works on at once.
	DefaultBatchParallelism = 8
	// DefaultCheckpoint is how many items one progress record covers.
	DefaultCheckpoint = 100
	// ChunksInFlight is how many checkpoints a batch has open at once: with Checkpoint
	// items each, at most ChunksInFlight × Checkpoint items are redone after a crash.
	ChunksInFlight = 4
	// MaxReportedFailures bounds BatchReport.FailedItems.
	MaxReportedFailures = 100
)

// BatchOptions tune a batch. The zero value is ready to use.
type BatchOptions struct {
	// Parallelism bounds the items worked on at once. Defaults to
	// DefaultBatchParallelism.
	Parallelism int
	// Checkpoint is how many items one progress record covers: the batch writes two
	// ledger records (begun, done) per Checkpoint items, instead of two per item, and a
	// crash redoes at most the items of the checkpoints it left open. Defaults to
	// DefaultCheckpoint.
	Checkpoint int
	// OnItemError is the policy for an item whose function returns an error (ReleaseRun
	// by default).
	OnItemError ItemPolicy
	// Total is the number of items, when the sequence knows it, shown as the batch's
	// total while it runs; zero: counted as the items are read (Batch sets it).
	Total int
}

// ItemFunc does one item of a batch. key is the item's own effect key, stable across
// every attempt of the run: pass it downstream as Idempotency-Key. It must return when
// ctx is cancelled.
type ItemFunc func(ctx context.Context, item, key string) error

// BatchReport is what a batch came to. The worker shows it, as the batch's progress,
// in the run's record while the batch runs, and leaves it as the run's result unless
// the handler sets one (SetResult).
type BatchReport struct {
	Batch string `json:"batch"`
	// Total counts the items read; Done those done, by this attempt or an earlier one;
	// Skipped those an earlier attempt did (part of Done); Failed those recorded as
	// failed under SkipItem.
	Total   int `json:"total"`
	Done    int `json:"done"`
	Skipped int `json:"skipped,omitempty"`
	Failed  int `json:"failed,omitempty"`
	// FailedItems are the first MaxReportedFailures failed items' IDs, sorted.
	FailedItems []string `json:"failed_items,omitempty"`
}

// ErrBatch is wrapped by every error a batch itself returns (an item's error, a bad
// item ID, a ledger write that failed).
var ErrBatch = errors.New("worker: batch")

// BatchItemKey returns the effect key of item in the batch name of run runID: the key
// its ItemFunc is handed, for downstreams and tests.
func BatchItemKey(runID, name, item string) string {
	return ledger.EffectKey(runID, "batch/"+name+"/item/"+item)
}

// Batch runs fn once per item of ids (see BatchSeq), with DefaultBatchParallelism or
// o.Parallelism items at once, and returns what the batch came to.
func Batch(ctx context.Context, name string, ids []string, fn ItemFunc, o *BatchOptions) (*BatchReport, error) {
	opts := BatchOptions{}
	if o != nil {
		opts = *o
	}
	if opts.Total == 0 {
		opts.Total = len(ids)
	}
	return BatchSeq(ctx, name, slices.Values(ids), fn, &opts)
}

// BatchSeq runs fn once per item of a run's batch, so that a run with many side effects
// (a nightly job that sends 20,000 reminders) resumes after a crash, a release or a
// shutdown with only what is left:
//
//   - Each item has its own effect key, derived from the run, the batch's name and the
//     item's ID (BatchItemKey), handed to fn for the downstream.
//   - Items are read from seq in groups of o.Checkpoint; each group is recorded in the
//     ledger as begun before its first item and as done after its last, so an item
//     costs 2/Checkpoint ledger writes. An attempt that finds a group done skips it
//     whole; a group an earlier attempt left begun is done again, every item with the
//     same key, which the downstream deduplicates.
//   - Groups are named by their position and their items' IDs, so seq must yield the
//     same IDs in the same order on every attempt of the run (an ordered query, a
//     stored list): a group whose IDs changed is a new group, and its items run again
//     (under the same keys).
//   - Item IDs are unique and non-empty; a duplicate fails the run (it would be done
//     once, not twice).
//   - o.OnItemError decides what an item's error does (ReleaseRun, FailRun, SkipItem).
//     An item cut off by the job's context (a lost lease, a shutdown) is never counted
//     as failed.
//
// The batch's done, failed and total items are the run's progress while it runs (GET
// /v1/runs/{id}, written by the lease renewals), counted in the metric
// runonce.worker.batch.items, and its BatchReport is the run's result unless the
// handler sets one. BatchSeq is called from a job's handler (ErrNotInJob otherwise);
// several batches of one run need distinct names.
func BatchSeq(ctx context.Context, name string, seq iter.Seq[string], fn ItemFunc, o *BatchOptions) (*BatchReport, error) {
	a := attemptFrom(ctx)
	if a == nil {
		return nil, fmt.Errorf("%w %q called outside a job's context: %w", ErrBatch, name, ErrNotInJob)
	}
	if name == "" {
		return nil, Permanent(fmt.Errorf("%w: a batch needs a name", ErrBatch))
	}
	opts := BatchOptions{}
	if o != nil {
		opts = *o
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = DefaultBatchParallelism
	}
	if opts.Checkpoint <= 0 {
		opts.Checkpoint = DefaultCheckpoint
	}
	b := &batch{a: a, name: name, fn: fn, opts: opts, sem: make(chan struct{}, opts.Parallelism), seen: map[string]bool{}}
	b.report.Batch = name
	b.report.Total = opts.Total
	a.trackBatch(b)
	err := b.run(ctx, seq)
	rep := b.snapshot()
	if err != nil {
		return rep, err
	}
	if a.result.Load() == nil {
		if raw, merr := json.Marshal(rep); merr == nil && len(raw) <= MaxResult {
			a.result.Store(&raw)
		}
	}
	return rep, nil
}

// batch is one BatchSeq call.
type batch struct {
	a    *attempt
	name string
	fn   ItemFunc
	opts BatchOptions
	sem  chan struct{} // bounds the items in flight

	writeMu sync.Mutex // one ledger write at a time (write)

	mu     sync.Mutex
	report BatchReport
	failed []string
	seen   map[string]bool
}

// run reads seq in groups of Checkpoint items and dispatches their items in order, at
// most Parallelism at once and from at most ChunksInFlight open groups; a group is
// recorded done once all its items are.
func (b *batch) run(ctx context.Context, seq iter.Seq[string]) error {
	g, gctx := errgroup.WithContext(ctx)
	slots := make(chan struct{}, ChunksInFlight)
	read, index := 0, 0
	chunk := make([]string, 0, b.opts.Checkpoint)
	var stop error
	flush := func() {
		ids, i := chunk, index
		chunk, index = make([]string, 0, b.opts.Checkpoint), index+1
		select {
		case slots <- struct{}{}:
		case <-gctx.Done():
			stop = context.Cause(gctx)
			return
		}
		if err := b.chunk(ctx, gctx, g, i, ids, func() { <-slots }); err != nil {
			stop = err
		}
	}
	for id := range seq {
		if stop != nil || gctx.Err() != nil {
			break
		}
		if id == "" || b.seen[id] {
			stop = Permanent(fmt.Errorf("%w %q: item %d has an empty or duplicate ID %q: IDs must be unique, or an item would be done once for two", ErrBatch, b.name, read, id))
			break
		}
		b.seen[id] = true
		read++
		if b.opts.Total < read {
			b.mu.Lock()
			b.report.Total = read
			b.mu.Unlock()
		}
		chunk = append(chunk, id)
		if len(chunk) == b.opts.Checkpoint {
			flush()
		}
	}
	if stop == nil && len(chunk) > 0 && gctx.Err() == nil {
		flush()
	}
	err := g.Wait()
	switch {
	case err != nil:
		return err
	case stop != nil:
		return stop
	}
	return context.Cause(ctx) // nil unless the job was cut off while the items were read
}

// chunkName names a group of items by its position and its IDs.
func (b *batch) chunkName(i int, ids []string) string {
	h := sha256.New()
	var n [8]byte
	for _, id := range ids {
		binary.BigEndian.PutUint64(n[:], uint64(len(id)))
		h.Write(n[:])
		h.Write([]byte(id))
	}
	return fmt.Sprintf("batch/%s/chunk/%d/%s", b.name, i, hex.EncodeToString(h.Sum(nil))[:16])
}

// chunkRef is what a done group records: its failed items (as many as fit the Ref).
type chunkRef struct {
	Failed int      `json:"failed,omitempty"`
	IDs    []string `json:"ids,omitempty"`
}

// chunk begins group i, dispatches its items on g (waiting for item slots), and adds
// to g the closer that records the group done once every item is; done is called when
// the group is closed. Items run under gctx; the group's records are written under the
// job's ctx, so that a group whose items all finished is recorded done even when
// another group's failure stops the batch.
func (b *batch) chunk(ctx, gctx context.Context, g *errgroup.Group, i int, ids []string, done func()) error {
	a, w := b.a, b.a.w
	name := b.chunkName(i, ids)
	var res *ledger.BeginEffectResult
	err := b.write(ctx, func(ctx context.Context) (err error) {
		res, err = w.cfg.Ledger.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: a.fence, Name: name, Retention: w.cfg.Retention})
		return err
	})
	if err != nil {
		done()
		return fmt.Errorf("%w %q: %w", ErrBatch, b.name, a.ledgerError(ctx, "begin "+name, err))
	}
	if res.Done {
		done()
		var ref chunkRef
		_ = json.Unmarshal([]byte(res.Effect.Ref), &ref) // a group without failures records none
		b.count(ctx, true, len(ids)-ref.Failed, ref.Failed, ref.IDs)
		return nil
	}
	if res.PreviousAttempt != 0 && res.PreviousAttempt != a.fence.Attempt {
		a.log.InfoContext(ctx, "batch items redone with their keys: an earlier attempt began them and did not record them done",
			slog.String("batch", b.name), slog.Int("chunk", i), slog.Int("items", len(ids)), slog.Int64("begun_by", res.PreviousAttempt))
	}
	var (
		mu      sync.Mutex
		failed  []string
		unknown int // items not done: failed under another policy, or cut off
		items   sync.WaitGroup
	)
	dispatched := 0
	for _, id := range ids {
		acquired := false
		select {
		case b.sem <- struct{}{}:
			acquired = true
		case <-gctx.Done():
		}
		if gctx.Err() != nil {
			if acquired {
				<-b.sem
			}
			break
		}
		dispatched++
		items.Add(1)
		g.Go(func() error {
			defer items.Done()
			defer func() { <-b.sem }()
			err := b.fn(gctx, id, BatchItemKey(a.job.RunID, b.name, id))
			if err == nil {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case gctx.Err() != nil:
				unknown++
				return fmt.Errorf("%w %q: item %s cut off: %w", ErrBatch, b.name, id, err)
			case b.opts.OnItemError == SkipItem:
				failed = append(failed, id)
				a.log.WarnContext(ctx, "batch item failed: recorded as failed, the batch goes on (SkipItem)", slog.String("batch", b.name), slog.String("item", id), slog.Any("error", err))
				return nil
			case b.opts.OnItemError == FailRun:
				unknown++
				return Permanent(fmt.Errorf("%w %q: item %s failed, the run fails (FailRun): %w", ErrBatch, b.name, id, err))
			default:
				unknown++
				return fmt.Errorf("%w %q: item %s failed, the run is released to do what is left (ReleaseRun): %w", ErrBatch, b.name, id, err)
			}
		})
	}
	g.Go(func() error {
		defer done()
		items.Wait()
		mu.Lock()
		open := unknown > 0 || dispatched < len(ids)
		mu.Unlock()
		if open {
			return nil // left begun: the next attempt redoes the group, with the same keys
		}
		return b.close(ctx, name, len(ids), failed)
	})
	return nil
}

// close records a group done, with its failed items (as many as fit the record's Ref).
func (b *batch) close(ctx context.Context, name string, size int, failed []string) error {
	a, w := b.a, b.a.w
	sort.Strings(failed)
	ref := chunkRef{Failed: len(failed)}
	for _, id := range failed {
		ref.IDs = append(ref.IDs, id)
		if raw, _ := json.Marshal(ref); len(raw) > ledger.MaxEffectRef {
			ref.IDs = ref.IDs[:len(ref.IDs)-1]
			break
		}
	}
	var raw []byte
	if ref.Failed > 0 {
		raw, _ = json.Marshal(ref)
	}
	err := b.write(ctx, func(ctx context.Context) error {
		_, err := w.cfg.Ledger.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: a.fence, Name: name, Ref: string(raw), Retention: w.cfg.Retention})
		return err
	})
	if err != nil {
		return fmt.Errorf("%w %q: %w", ErrBatch, b.name, a.ledgerError(ctx, "complete "+name, err))
	}
	b.count(ctx, false, size-len(failed), len(failed), ref.IDs)
	return nil
}

// write makes one of the batch's ledger writes: one at a time (on a backend that fences
// a run's effects through its record, Firestore, concurrent effect writes of one run
// contend with each other), retried while the ledger answers contended or unavailable,
// within the worker's FinishTimeout.
func (b *batch) write(ctx context.Context, fn func(context.Context) error) error {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, b.a.w.cfg.FinishTimeout)
	defer cancel()
	backoff := retry.WithJitterPercent(20, retry.WithCappedDuration(time.Second, retry.NewExponential(20*time.Millisecond)))
	return retry.Do(ctx, backoff, func(ctx context.Context) error {
		err := fn(ctx)
		if ledger.Retryable(err) {
			return retry.RetryableError(err)
		}
		return err
	})
}

// count adds a finished group to the report and the metrics: done and failed items,
// by an earlier attempt (skipped) or this one.
func (b *batch) count(ctx context.Context, earlier bool, done, failed int, failedIDs []string) {
	b.mu.Lock()
	b.report.Done += done
	if earlier {
		b.report.Skipped += done
	}
	b.report.Failed += failed
	b.failed = append(b.failed, failedIDs...)
	b.mu.Unlock()
	m, job := b.a.w.metrics, b.a.job.Name
	switch {
	case earlier:
		m.batchItems.Add(ctx, int64(done+failed), m.batch(job, b.name, "skipped"))
	default:
		m.batchItems.Add(ctx, int64(done), m.batch(job, b.name, "done"))
		m.batchItems.Add(ctx, int64(failed), m.batch(job, b.name, "failed"))
	}
}

// snapshot is the report so far.
func (b *batch) snapshot() *BatchReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.report
	f := slices.Clone(b.failed)
	sort.Strings(f)
	if len(f) > MaxReportedFailures {
		f = f[:MaxReportedFailures]
	}
	r.FailedItems = f
	return &r
}

// batchProgress is a batch as the run's progress shows it.
type batchProgress struct {
	Done   int `json:"done"`
	Failed int `json:"failed"`
	Total  int `json:"total"`
}

// trackBatch makes b part of the attempt's progress.
func (a *attempt) trackBatch(b *batch) {
	a.batchMu.Lock()
	defer a.batchMu.Unlock()
	a.batches = append(a.batches, b)
}

// progress is the attempt's progress for the ledger: every batch's counts by name
// ({"reminders": {"done": 1200, "failed": 3, "total": 20000}}), the latest batches only
// when they do not all fit ledger.MaxProgress; nil without batches.
func (a *attempt) progress() []byte {
	if a == nil {
		return nil
	}
	a.batchMu.Lock()
	bs := slices.Clone(a.batches)
	a.batchMu.Unlock()
	for len(bs) > 0 {
		m := make(map[string]batchProgress, len(bs))
		for _, b := range bs {
			b.mu.Lock()
			m[b.name] = batchProgress{Done: b.report.Done, Failed: b.report.Failed, Total: b.report.Total}
			b.mu.Unlock()
		}
		raw, err := json.Marshal(m)
		if err == nil && len(raw) <= ledger.MaxProgress {
			return raw
		}
		bs = bs[1:]
	}
	return nil
}

// progressOf is the progress of the attempt ctx belongs to, nil outside a job.
func progressOf(ctx context.Context) []byte { return attemptFrom(ctx).progress() }
