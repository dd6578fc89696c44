package main

import (
	"context"
	mrand "math/rand/v2"
	"time"
)

// fault is what an attempt suffers on the way to the ingress.
type fault int

const (
	faultNone fault = iota
	// faultLost: the request is sent in full and the connection closed without reading
	// the answer; the scheduler never sees the 202 and retries.
	faultLost
	// faultShortTimeout: the client gives up before the answer can come.
	faultShortTimeout
)

// drawFault draws an attempt's fault from -lost and -short-timeout-share.
func drawFault(c *config, rng *mrand.Rand) fault {
	x := rng.Float64()
	switch {
	case x < c.Lost:
		return faultLost
	case x < c.Lost+c.ShortShare:
		return faultShortTimeout
	}
	return faultNone
}

// The downstream's faults (a slow answer, a 503 to the first call of a key, a 400 to
// the runs meant to fail) are drawn per run by plan and carried in the run's payload,
// which the sink reads: see payload.

// chaos SIGKILLs a random worker every interval and starts it again at once, at most
// limit times (0: no limit), until ctx ends.
func (s *stack) chaos(ctx context.Context, every time.Duration, limit int) {
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 7))
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; limit == 0 || n < limit; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.killAndRestart(ctx, rng.IntN(len(s.workers))); err != nil {
			s.logf("chaos: %v", err)
		}
	}
}
