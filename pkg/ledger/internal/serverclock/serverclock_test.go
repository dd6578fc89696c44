package serverclock_test

import (
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger/internal/serverclock"
)

func TestClock(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := serverclock.New(func() time.Time { return local })
	if _, ok := c.Now(); ok {
		t.Fatal("an unobserved clock claims to know the time")
	}
	skew := 10 * time.Minute // the server is 10 minutes ahead of the local clock
	// A round trip of 40 ms, the server stamping 10 ms after the request left.
	c.Observe(local, local.Add(40*time.Millisecond), local.Add(skew+10*time.Millisecond))
	local = local.Add(time.Second)
	got, _ := c.Now()
	if d := got.Sub(local.Add(skew)); d < -20*time.Millisecond || d > 20*time.Millisecond {
		t.Fatalf("estimate off by %v after one 40 ms round trip", d)
	}
	// A second, tighter round trip narrows the interval.
	c.Observe(local, local.Add(4*time.Millisecond), local.Add(skew+2*time.Millisecond))
	if u := c.Uncertainty(); u > 4*time.Millisecond {
		t.Fatalf("uncertainty %v after a 4 ms round trip", u)
	}
	// The local clock is stepped back an hour: the next observation contradicts the
	// interval, which restarts from it.
	local = local.Add(-time.Hour)
	c.Observe(local, local.Add(10*time.Millisecond), local.Add(time.Hour+skew+5*time.Millisecond))
	got, _ = c.Now()
	if d := got.Sub(local.Add(time.Hour + skew)); d < -10*time.Millisecond || d > 10*time.Millisecond {
		t.Fatalf("estimate off by %v after the local clock was stepped", d)
	}
}

// Bounds are the earliest and the latest the server's clock can read, the estimate
// their middle.
func TestBounds(t *testing.T) {
	t.Parallel()
	local := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := serverclock.New(func() time.Time { return local })
	if _, _, ok := c.Bounds(); ok {
		t.Fatal("an unobserved clock claims bounds")
	}
	skew := time.Minute
	// A round trip of 40 ms, the server stamping 10 ms after the request left.
	c.Observe(local, local.Add(40*time.Millisecond), local.Add(skew+10*time.Millisecond))
	local = local.Add(time.Second)
	earliest, latest, ok := c.Bounds()
	if !ok || !earliest.Equal(local.Add(skew-30*time.Millisecond)) || !latest.Equal(local.Add(skew+10*time.Millisecond)) {
		t.Fatalf("bounds = %v, %v, %v; want %v and %v", earliest, latest, ok, local.Add(skew-30*time.Millisecond), local.Add(skew+10*time.Millisecond))
	}
	if now, _ := c.Now(); !now.Equal(earliest.Add(latest.Sub(earliest) / 2)) {
		t.Fatalf("estimate %v is not the middle of the bounds %v, %v", now, earliest, latest)
	}
}
