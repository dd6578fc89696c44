package postgres

import (
	"context"
	"slices"
	"sync"
	"time"
)

// batcher coalesces concurrent calls into batches, each run as one statement: the
// technique of River's batch completer, applied where a statement's fixed cost (its
// round trip, parse and bind, executor start-up, commit) is most of a call's.
//
// At most lanes batches run at once. A call that finds a lane free takes it and runs at
// once, with whatever has queued, so that a lone call waits for nothing and costs what it
// did unbatched. Calls that arrive while every lane is busy queue, and the next lane to
// finish runs them together (at most max a batch). A caller leads only until its own
// call is answered: it then hands its lane to the oldest call still queued, so that no
// caller serves others' batches for long.
type batcher[In, Out any] struct {
	lanes, max int
	// run answers each call of a batch (len(batch) ≥ 1) by setting its out and err. ctx
	// is not cancelled when a caller goes away: it carries the latest deadline of the
	// batch's callers.
	run func(ctx context.Context, batch []*call[In, Out])

	mu    sync.Mutex
	queue []*call[In, Out] // waiting for a lane, oldest first
	busy  int              // lanes taken
}

// call is one caller's part of a batch.
type call[In, Out any] struct {
	ctx  context.Context
	in   In
	out  Out
	err  error
	done chan struct{} // closed when out and err are set
	// lead is signalled when the call is handed a lane, at most once: only a queued
	// call that holds none is handed one, and a call leaves the queue before it would
	// need another.
	lead   chan struct{}
	holder bool // holds a lane (guarded by the batcher's mu)
}

// do runs in as part of a batch and returns its answer. If ctx ends first, do returns
// answered false and ctx's error: in may still be written, as by a statement cut short.
func (b *batcher[In, Out]) do(ctx context.Context, in In) (out Out, answered bool, err error) {
	c := &call[In, Out]{ctx: ctx, in: in, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	if b.busy < b.lanes {
		b.busy++
		b.grant(c)
	}
	b.mu.Unlock()
	for {
		select {
		case <-c.done:
			b.release(c) // answered by another lane before c used the one it was handed
			return c.out, true, c.err
		case <-c.lead:
			b.runUntil(c)
		case <-ctx.Done():
			b.mu.Lock()
			if i := slices.Index(b.queue, c); i >= 0 {
				b.queue = slices.Delete(b.queue, i, i+1)
			}
			b.mu.Unlock()
			b.release(c)
			return out, false, ctx.Err()
		}
	}
}

// grant hands c a lane. The caller holds mu.
func (b *batcher[In, Out]) grant(c *call[In, Out]) {
	c.holder = true
	c.lead <- struct{}{}
}

// runUntil runs batches from the head of the queue on the lane c holds until c is
// answered, then hands the lane on.
func (b *batcher[In, Out]) runUntil(c *call[In, Out]) {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.max)
		if n == 0 {
			// c is in a batch that another lane runs: free this lane meanwhile.
			b.handOff(c)
			b.mu.Unlock()
			<-c.done
			return
		}
		batch := slices.Clone(b.queue[:n])
		b.queue = slices.Delete(b.queue, 0, n)
		b.mu.Unlock()
		b.runBatch(batch)
		select {
		case <-c.done:
			b.release(c)
			return
		default: // c is still queued, or in a batch another lane runs: lead again
		}
	}
}

// release hands on the lane c holds, if any.
func (b *batcher[In, Out]) release(c *call[In, Out]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.holder {
		b.handOff(c)
	}
}

// handOff passes the lane c holds to the oldest queued call that holds none, or frees
// it. The caller holds mu.
func (b *batcher[In, Out]) handOff(c *call[In, Out]) {
	c.holder = false
	for _, q := range b.queue {
		if !q.holder {
			b.grant(q)
			return
		}
	}
	b.busy--
}

// runBatch runs batch under a context that outlives its callers (a statement cut short
// would leave the batch's other calls without an answer) but not their latest deadline.
func (b *batcher[In, Out]) runBatch(batch []*call[In, Out]) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	b.run(ctx, batch)
	for _, c := range batch {
		close(c.done)
	}
}
