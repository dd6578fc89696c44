package spannerledger

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestGateServesTheEarliestDeadlineFirst: callers waiting for the slot get it in the
// order of their deadlines (a renewal with a second left before one with ten), the
// callers without a deadline last, ties in the order they came; a caller whose context
// ends while it waits leaves the queue, and the slot goes to the next one.
func TestGateServesTheEarliestDeadlineFirst(t *testing.T) {
	t.Parallel()
	var g gate
	ctx := t.Context()
	if err := g.enter(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	waiters := []struct {
		name string
		in   time.Duration // deadline from now; 0: none
	}{
		{"ten seconds", 10 * time.Second},
		{"none", 0},
		{"one second", time.Second},
		{"five seconds, first", 5 * time.Second},
		{"five seconds, second", 5 * time.Second},
		{"gives up", 2 * time.Second},
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	giveUp, cancelGiveUp := context.WithCancel(ctx)
	for i, w := range waiters {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		switch {
		case w.name == "gives up":
			wctx, cancel = context.WithDeadline(giveUp, now.Add(w.in))
		case w.in > 0:
			wctx, cancel = context.WithDeadline(ctx, now.Add(w.in))
		}
		wg.Go(func() {
			defer cancel()
			err := g.enter(wctx)
			if w.name == "gives up" {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("a waiter whose context ended entered the slot: %v", err)
				}
				return
			}
			if err != nil {
				t.Errorf("%s: %v", w.name, err)
				return
			}
			mu.Lock()
			order = append(order, w.name)
			mu.Unlock()
			g.leave()
		})
		waitQueued(t, &g, i+1) // in this order
	}
	cancelGiveUp()
	waitQueued(t, &g, len(waiters)-1)
	g.leave()
	wg.Wait()
	want := []string{"one second", "five seconds, first", "five seconds, second", "ten seconds", "none"}
	if len(order) != len(want) {
		t.Fatalf("served %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("served %v, want %v", order, want)
		}
	}
	if err := g.enter(ctx); err != nil { // free again
		t.Fatal(err)
	}
	g.leave()
}

// waitQueued waits until n callers wait at g.
func waitQueued(t *testing.T, g *gate, n int) {
	t.Helper()
	for range 1000 {
		g.mu.Lock()
		queued := g.waiting.Len()
		g.mu.Unlock()
		if queued == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d callers never queued at the gate", n)
}
