package worker

import (
	"sync"
	"testing"
	"time"
)

// fakeTimers is an AfterFunc whose timers fire only when the test says, early or late.
type fakeTimers struct {
	mu      sync.Mutex
	pending []*fakeTimer
}

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (ft *fakeTimers) AfterFunc(d time.Duration, f func()) func() bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	t := &fakeTimer{d: d, f: f}
	ft.pending = append(ft.pending, t)
	return func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// next removes the oldest timer armed and returns it.
func (ft *fakeTimers) next(t *testing.T) *fakeTimer {
	t.Helper()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if len(ft.pending) == 0 {
		t.Fatal("no timer armed")
	}
	next := ft.pending[0]
	ft.pending = ft.pending[1:]
	return next
}

func (ft *fakeTimers) armed() int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return len(ft.pending)
}

// TestAtWaitsForConfigNow checks Worker.at against timers that fire early or race their
// stop: f runs once, only when Config.Now has reached its time, and never after stop.
func TestAtWaitsForConfigNow(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	newWorker := func() (*Worker, *fakeTimers, *time.Time) {
		ft := &fakeTimers{}
		now := t0
		return &Worker{cfg: Config{Now: func() time.Time { return now }, AfterFunc: ft.AfterFunc}}, ft, &now
	}

	t.Run("a timer that fires early is armed again for what is left", func(t *testing.T) {
		w, ft, now := newWorker()
		calls := 0
		w.at(t0.Add(10*time.Second), func() { calls++ })
		if tm := ft.next(t); tm.d != 10*time.Second {
			t.Fatalf("armed for %v, want 10s", tm.d)
		} else {
			*now = t0.Add(4 * time.Second)
			tm.f()
		}
		if calls != 0 {
			t.Fatal("f ran 6s before its time")
		}
		tm := ft.next(t)
		if tm.d != 6*time.Second {
			t.Fatalf("armed again for %v, want the 6s left", tm.d)
		}
		*now = t0.Add(10 * time.Second)
		tm.f()
		if calls != 1 || ft.armed() != 0 {
			t.Fatalf("f ran %d times, %d timers armed; want once, none", calls, ft.armed())
		}
	})

	t.Run("stop after an early fire stops the timer armed again", func(t *testing.T) {
		w, ft, now := newWorker()
		calls := 0
		stop := w.at(t0.Add(10*time.Second), func() { calls++ })
		*now = t0.Add(time.Second)
		ft.next(t).f()
		again := ft.pending[0]
		stop()
		if !again.stopped {
			t.Fatal("stop left the timer armed again running")
		}
		*now = t0.Add(time.Minute)
		again.f() // a fire that raced the stop
		if calls != 0 {
			t.Fatalf("f ran %d times after stop", calls)
		}
	})

	t.Run("a fire that loses the race with stop does not call f", func(t *testing.T) {
		w, ft, now := newWorker()
		calls := 0
		stop := w.at(t0.Add(time.Second), func() { calls++ })
		tm := ft.next(t)
		stop()
		*now = t0.Add(time.Minute)
		tm.f()
		if calls != 0 {
			t.Fatalf("f ran %d times after stop", calls)
		}
	})

	t.Run("a time already past fires at once", func(t *testing.T) {
		w, ft, _ := newWorker()
		calls := 0
		w.at(t0.Add(-time.Second), func() { calls++ })
		tm := ft.next(t)
		if tm.d != 0 {
			t.Fatalf("armed for %v, want 0", tm.d)
		}
		tm.f()
		if calls != 1 {
			t.Fatalf("f ran %d times, want once", calls)
		}
	})
}
