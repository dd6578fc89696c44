package spannerledger

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// gate is one slot that callers take turns in, the caller whose deadline comes first
// served first (earliest deadline first, then first come): a renewal due to land before
// its lease ends goes before an effect write that has seconds left. It is safe for
// concurrent use.
type gate struct {
	mu      sync.Mutex
	busy    bool
	waiting waiters
	seq     uint64
	// aborted counts the tries aborted in a row, whoever made them.
	aborted int
}

// waiter is a caller waiting for the slot; ready is closed when the slot is handed to it.
type waiter struct {
	deadline time.Time
	seq      uint64
	ready    chan struct{}
	index    int // in gate.waiting; -1 once handed the slot
}

// enter waits for the slot until ctx ends (then it returns ctx's error and does not hold
// the slot). The caller leaves it with leave.
func (g *gate) enter(ctx context.Context) error {
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		return nil
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultCallTime)
	}
	g.seq++
	w := &waiter{deadline: deadline, seq: g.seq, ready: make(chan struct{})}
	heap.Push(&g.waiting, w)
	g.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		if w.index >= 0 {
			heap.Remove(&g.waiting, w.index)
			g.mu.Unlock()
			return ctx.Err()
		}
		g.mu.Unlock()
		g.leave() // handed the slot as ctx ended: pass it on
		return ctx.Err()
	}
}

// leave hands the slot to the waiter whose deadline comes first, or frees it.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting.Len() == 0 {
		g.busy = false
		return
	}
	close(heap.Pop(&g.waiting).(*waiter).ready)
}

// pause is how long the holder of the slot waits in it after its try was aborted (err),
// by the tries aborted in a row in the process (jitter): the pause of its process.
func (g *gate) pause(err error, _ int) time.Duration {
	g.mu.Lock()
	n := g.aborted
	g.aborted++
	g.mu.Unlock()
	return jitter(n)
}

// committed records that a try committed: the aborts in a row are over.
func (g *gate) committed() {
	g.mu.Lock()
	g.aborted = 0
	g.mu.Unlock()
}

// waiters is a heap of waiters, the earliest deadline (then the first to come) on top.
type waiters []*waiter

func (h waiters) Len() int { return len(h) }

func (h waiters) Less(i, j int) bool {
	if !h[i].deadline.Equal(h[j].deadline) {
		return h[i].deadline.Before(h[j].deadline)
	}
	return h[i].seq < h[j].seq
}

func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *waiters) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}

func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}
