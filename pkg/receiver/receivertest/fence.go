package receivertest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runonce/runonce/pkg/receiver"
)

var fenceTests = map[string]func(*testing.T, Harness){
	"StaleAttemptIsFencedAndWritesNothing":   testStaleAttemptIsFenced,
	"EveryOutcomeRaisesTheFence":             testEveryOutcomeRaisesTheFence,
	"FenceOnlyClaims":                        testFenceOnlyClaims,
	"RunsAreFencedApart":                     testRunsAreFencedApart,
	"AnOlderAttemptMayStillFinish":           testAnOlderAttemptMayStillFinish,
	"ConcurrentAttemptsAreFencedInRealTime":  testConcurrentAttemptsAreFencedInRealTime,
	"ConcurrentAttemptsOnOneKeyOneExecution": testConcurrentAttemptsOnOneKey,
}

func testStaleAttemptIsFenced(t *testing.T, h Harness) {
	f := setup(t, h)
	run := newRun()
	f.claimWant(fenced(params(newKey()), run, 2), receiver.OutcomeClaimed)
	stale := fenced(params(newKey()), run, 1)
	if c := f.claimWant(stale, receiver.OutcomeFenced); c.Attempt != 2 || c.Record != nil {
		t.Fatalf("fenced answer = %+v, want attempt 2 and no record", c)
	}
	f.absent(stale.Key)
	f.claimWant(fenced(params(newKey()), run, 2), receiver.OutcomeClaimed) // the same attempt passes

	// A fenced request on a key in flight changes nothing of it.
	held := fenced(params(newKey()), run, 2)
	f.claimWant(held, receiver.OutcomeClaimed)
	before := f.get(held.Key)
	if c := f.claimWant(fenced(params(held.Key), run, 1), receiver.OutcomeFenced); c.Attempt != 2 {
		t.Fatalf("fenced answer names attempt %d, want 2", c.Attempt)
	}
	if diff := cmp.Diff(before, f.get(held.Key)); diff != "" {
		t.Fatalf("a fenced request changed the key (-before +after):\n%s", diff)
	}
}

// The fence remembers the highest attempt seen, whatever its request's key answered: a
// newer attempt told "in flight", "completed" or "mismatch" has still been seen.
func testEveryOutcomeRaisesTheFence(t *testing.T, h Harness) {
	f := setup(t, h)
	inFlight := fenced(params(newKey()), newRun(), 1)
	f.claimWant(inFlight, receiver.OutcomeClaimed)
	completed := fenced(params(newKey()), newRun(), 1)
	f.claimWant(completed, receiver.OutcomeClaimed)
	f.complete(completed.Key, completed.Token, sampleResponse(), retention)

	cases := []struct {
		name string
		p    *receiver.ClaimParams
		want receiver.Outcome
	}{
		{"in flight", fenced(params(inFlight.Key), inFlight.Fence.Run, 2), receiver.OutcomeInFlight},
		{"completed", fenced(params(completed.Key), completed.Fence.Run, 2), receiver.OutcomeCompleted},
		{"mismatch", func() *receiver.ClaimParams {
			p := fenced(params(completed.Key), newRun(), 1)
			f.claimWant(fenced(params(newKey()), p.Fence.Run, 1), receiver.OutcomeClaimed)
			p.Fence.Attempt, p.Fingerprint = 2, fpB
			return p
		}(), receiver.OutcomeMismatch},
	}
	for _, c := range cases {
		got := f.claimWant(c.p, c.want)
		if c.want == receiver.OutcomeInFlight && got.Record.Attempt != 1 {
			t.Fatalf("%s: the key is held by attempt %d, want 1", c.name, got.Record.Attempt)
		}
		if stale := f.claimWant(fenced(params(newKey()), c.p.Fence.Run, 1), receiver.OutcomeFenced); stale.Attempt != 2 {
			t.Fatalf("after attempt 2 was answered %s, attempt 1 is fenced by %d, want 2", c.name, stale.Attempt)
		}
	}
}

func testFenceOnlyClaims(t *testing.T, h Harness) {
	f := setup(t, h)
	run := newRun()
	only := func(attempt int64) *receiver.ClaimParams {
		p := fenced(params(""), run, attempt)
		p.Fingerprint = ""
		return p
	}
	if c := f.claimWant(only(3), receiver.OutcomeClaimed); c.Record != nil {
		t.Fatalf("a fence-only claim answered record %+v", c.Record)
	}
	f.claimWant(only(3), receiver.OutcomeClaimed)
	if c := f.claimWant(only(2), receiver.OutcomeFenced); c.Attempt != 3 {
		t.Fatalf("fenced by %d, want 3", c.Attempt)
	}
	f.claimWant(fenced(params(newKey()), run, 2), receiver.OutcomeFenced)
	f.claimWant(only(4), receiver.OutcomeClaimed)
	f.claimWant(fenced(params(newKey()), run, 3), receiver.OutcomeFenced)
}

func testRunsAreFencedApart(t *testing.T, h Harness) {
	f := setup(t, h)
	a, b := newRun(), newRun()
	f.claimWant(fenced(params(newKey()), a, 5), receiver.OutcomeClaimed)
	f.claimWant(fenced(params(newKey()), b, 1), receiver.OutcomeClaimed)
	f.claimWant(fenced(params(newKey()), a, 4), receiver.OutcomeFenced)
	f.claimWant(fenced(params(newKey()), b, 1), receiver.OutcomeClaimed)
}

// The fence refuses a superseded attempt's new requests, not the end of one it had
// started: attempt 1's request, already executing when attempt 2 arrived, still stores
// its response, which attempt 2 is then given rather than executing again.
func testAnOlderAttemptMayStillFinish(t *testing.T, h Harness) {
	f := setup(t, h)
	run := newRun()
	first := fenced(params(newKey()), run, 1)
	f.claimWant(first, receiver.OutcomeClaimed)
	f.claimWant(fenced(params(first.Key), run, 2), receiver.OutcomeInFlight)
	if err := f.s.Renew(f.ctx, &receiver.RenewParams{Key: first.Key, Token: first.Token, Lease: longLease, Retention: retention}); err != nil {
		t.Fatalf("Renew by the older attempt's request: %v", err)
	}
	f.complete(first.Key, first.Token, sampleResponse(), retention)
	c := f.claimWant(fenced(params(first.Key), run, 2), receiver.OutcomeCompleted)
	if c.Record.Attempt != 1 {
		t.Fatalf("the replayed response is attempt %d's, want 1's", c.Record.Attempt)
	}
	f.claimWant(fenced(params(first.Key), run, 1), receiver.OutcomeFenced) // even for a replay
}

// Attempts of one run race, each request on a key of its own, started at random moments:
// a request answered for attempt b must fence every request of a lower attempt that
// starts after that answer, on every store (no stale read of the fence).
func testConcurrentAttemptsAreFencedInRealTime(t *testing.T, h Harness) {
	f := setup(t, h)
	run := newRun()
	t0 := time.Now()
	f.claimWant(fenced(params(newKey()), run, 1), receiver.OutcomeClaimed)
	latency := time.Since(t0)
	const attempts, per = 6, 8
	type op struct {
		attempt    int64
		start, end time.Time
		c          *receiver.Claim
	}
	spread := 4*latency + 5*time.Millisecond
	ops, errs := race(attempts*per, func(i int) (op, error) {
		o := op{attempt: int64(i%attempts) + 1}
		time.Sleep(rand.N(spread))
		o.start = time.Now()
		c, err := f.s.Claim(f.ctx, fenced(params(newKey()), run, o.attempt))
		o.end, o.c = time.Now(), c
		return o, err
	})
	for i, o := range ops {
		if errs[i] != nil {
			if !loserErr(errs[i]) {
				t.Fatalf("request %d (attempt %d): %v", i, o.attempt, errs[i])
			}
			continue
		}
		switch o.c.Outcome {
		case receiver.OutcomeClaimed:
			for j, y := range ops {
				if errs[j] == nil && y.c.Outcome == receiver.OutcomeClaimed && y.attempt > o.attempt && y.end.Before(o.start) {
					t.Fatalf("attempt %d claimed at %v, after attempt %d had been answered (at %v): the fence was not seen",
						o.attempt, o.start.Sub(t0), y.attempt, y.end.Sub(t0))
				}
			}
		case receiver.OutcomeFenced:
			if o.c.Attempt <= o.attempt || o.c.Attempt > attempts {
				t.Fatalf("attempt %d fenced by attempt %d, which no request sent", o.attempt, o.c.Attempt)
			}
		default:
			t.Fatalf("request %d on a key of its own: %s", i, o.c.Outcome)
		}
	}
	if c := f.claimWant(fenced(params(newKey()), run, attempts-1), receiver.OutcomeFenced); c.Attempt != attempts {
		t.Fatalf("after the race the fence is %d, want %d", c.Attempt, attempts)
	}
}

// Attempts of one run race on one key: one request executes, and once the highest
// attempt is seen no lower one does.
func testConcurrentAttemptsOnOneKey(t *testing.T, h Harness) {
	f := setup(t, h)
	run, key := newRun(), newKey()
	claims, errs := race(contenders, func(i int) (*receiver.Claim, error) {
		return f.s.Claim(f.ctx, fenced(params(key), run, int64(i%4)+1))
	})
	winners, highest := 0, int64(0)
	for i, c := range claims {
		switch {
		case errs[i] != nil:
			if !loserErr(errs[i]) {
				t.Fatalf("contender %d: %v", i, errs[i])
			}
			continue
		case c.Outcome == receiver.OutcomeClaimed:
			winners++
		case c.Outcome != receiver.OutcomeInFlight && c.Outcome != receiver.OutcomeFenced:
			t.Fatalf("contender %d: %s", i, c.Outcome)
		}
		if c.Outcome != receiver.OutcomeFenced {
			highest = max(highest, int64(i%4)+1)
		}
	}
	if winners != 1 {
		t.Fatalf("%d contenders executed one key, want exactly 1", winners)
	}
	if highest > 1 { // the highest attempt answered fences the ones below it
		f.claimWant(fenced(params(key), run, highest-1), receiver.OutcomeFenced)
	}
}
