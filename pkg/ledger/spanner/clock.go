package spannerledger

import (
	"sync"
	"time"
)

// serverClock estimates Spanner's clock between round trips, for the one write that
// must carry a server time it cannot read first: the ingress claim's insert (see the
// package documentation, "The ingress claim and Spanner's clock").
//
// Every response that carries a server time (a read's read timestamp, a commit timestamp)
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
type serverClock struct {
	local func() time.Time

	mu     sync.Mutex
	lo, hi time.Duration
	known  bool
}

func newServerClock(local func() time.Time) *serverClock {
	return &serverClock{local: local}
}

// observe records that the server stamped server while a request was in flight from
// sent to received (local times).
func (c *serverClock) observe(sent, received, server time.Time) {
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

// now estimates the server's current time; ok is false before the first observation.
func (c *serverClock) now() (t time.Time, ok bool) {
	c.mu.Lock()
	lo, hi, known := c.lo, c.hi, c.known
	c.mu.Unlock()
	if !known {
		return time.Time{}, false
	}
	return c.local().Add(lo + (hi-lo)/2), true
}
