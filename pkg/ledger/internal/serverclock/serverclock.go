// Package serverclock estimates a database server's clock between round trips, for the
// backends (Firestore, Spanner) whose one-RPC claim must carry a server time it cannot
// read first.
package serverclock

import (
	"sync"
	"time"
)

// Clock estimates a server's clock between round trips, for a write that must carry a
// server time it cannot read first (Firestore's and Spanner's one-RPC claim).
//
// Every response that carries a server time (a read's read time, a write's commit time)
// was stamped between the moment the request left and the moment the answer came back,
// so it bounds the offset between the server's clock and the local one:
//
//	server − received ≤ offset ≤ server − sent
//
// The clock keeps the intersection of these bounds (it tightens with every round trip)
// and estimates the server's time as local + the middle of the interval. A constant
// skew of the local clock cancels out: only the local clock's rate is used, to measure
// the time elapsed since the last observation. When a new observation contradicts the
// interval (the local clock was stepped), the interval restarts from it.
type Clock struct {
	// Local is the process's clock.
	Local func() time.Time

	mu     sync.Mutex
	lo, hi time.Duration
	known  bool
}

// New returns a clock that measures elapsed time with local.
func New(local func() time.Time) *Clock {
	return &Clock{Local: local}
}

// Observe records that the server stamped server while a request was in flight from
// sent to received (local times).
func (c *Clock) Observe(sent, received, server time.Time) {
	if server.IsZero() || received.Before(sent) {
		return
	}
	lo, hi := server.Sub(received), server.Sub(sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.known || lo > c.hi || hi < c.lo {
		c.lo, c.hi, c.known = lo, hi, true
		return
	}
	c.lo, c.hi = max(c.lo, lo), min(c.hi, hi)
}

// Now estimates the server's current time; ok is false before the first observation.
func (c *Clock) Now() (t time.Time, ok bool) {
	c.mu.Lock()
	lo, hi, known := c.lo, c.hi, c.known
	c.mu.Unlock()
	if !known {
		return time.Time{}, false
	}
	return c.Local().Add(lo + (hi-lo)/2), true
}

// Bounds returns the earliest and the latest time the server's clock can read now, as
// far as the round trips tell (the local clock's drift since the last observation
// aside); ok is false before the first observation.
func (c *Clock) Bounds() (earliest, latest time.Time, ok bool) {
	c.mu.Lock()
	lo, hi, known := c.lo, c.hi, c.known
	c.mu.Unlock()
	if !known {
		return time.Time{}, time.Time{}, false
	}
	local := c.Local()
	return local.Add(lo), local.Add(hi), true
}

// Uncertainty is the width of the offset interval: the estimate is off by at most half
// of it (plus the local clock's drift since the last observation).
func (c *Clock) Uncertainty() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hi - c.lo
}
