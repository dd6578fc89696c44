package receivertest

import (
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/receiver"
)

var leaseTests = map[string]func(*testing.T, Harness){
	"ExpiredLeaseIsTakenOverNeverReplayed": testExpiredLeaseIsTakenOver,
	"RenewExtendsTheLease":                 testRenewExtendsTheLease,
	"ConcurrentTakeoversHaveOneWinner":     testConcurrentTakeoversHaveOneWinner,
}

// A claim whose holder stopped renewing (it crashed, or hangs) is claimable again once
// its lease passes; the old holder can then neither renew nor complete, so its answer is
// never replayed in place of the new holder's.
func testExpiredLeaseIsTakenOver(t *testing.T, h Harness) {
	f := setup(t, h)
	old := params(newKey())
	old.Lease = shortLease
	start := time.Now()
	first := f.claimWant(old, receiver.OutcomeClaimed)
	until := first.Record.LeaseUntil
	check := params(old.Key)
	check.Lease = shortLease
	switch c := f.claim(check); {
	case c.Outcome == receiver.OutcomeInFlight:
	case c.Outcome == receiver.OutcomeClaimed && time.Since(start) >= shortLease-200*time.Millisecond:
		// Too slow a store to see the lease held: the check took the key over, and holds it now.
		until = c.Record.LeaseUntil
	default:
		t.Fatalf("a claim %v into a %v lease = %s, want in flight", time.Since(start), shortLease, c.Outcome)
	}
	waitPast(until)
	next := params(old.Key)
	c := f.claimWant(next, receiver.OutcomeClaimed)
	if c.Record.Token != next.Token {
		t.Fatalf("the takeover's record carries token %s, want %s", c.Record.Token, next.Token)
	}
	for _, holder := range []string{old.Token, check.Token} {
		err := f.s.Renew(f.ctx, &receiver.RenewParams{Key: old.Key, Token: holder, Lease: longLease, Retention: retention})
		wantErr(t, "Renew by an old holder", err, receiver.ErrLeaseLost)
		err = f.s.Complete(f.ctx, &receiver.CompleteParams{Key: old.Key, Token: holder, Response: sampleResponse(), Retention: retention})
		wantErr(t, "Complete by an old holder", err, receiver.ErrLeaseLost)
		err = f.s.Release(f.ctx, &receiver.ReleaseParams{Key: old.Key, Token: holder})
		wantErr(t, "Release by an old holder", err, receiver.ErrLeaseLost)
	}
	if r := f.get(old.Key); r.State != receiver.StateInFlight || r.Token != next.Token {
		t.Fatalf("record after the old holder's writes = %+v, want in flight under the new token", r)
	}
	f.claimWant(params(old.Key), receiver.OutcomeInFlight)
}

func testRenewExtendsTheLease(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	p.Lease = shortLease
	f.claimWant(p, receiver.OutcomeClaimed)
	start := time.Now()
	if err := f.s.Renew(f.ctx, &receiver.RenewParams{Key: p.Key, Token: p.Token, Lease: longLease, Retention: retention}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	r := f.get(p.Key)
	approx(t, "LeaseUntil after Renew", r.LeaseUntil, start.Add(longLease))
	exact(t, "ExpireAt after Renew", r.ExpireAt, r.LeaseUntil.Add(retention))
	time.Sleep(shortLease + 300*time.Millisecond)
	if c := f.claimWant(params(p.Key), receiver.OutcomeInFlight); c.LeaseLeft < longLease-time.Since(start)-slack {
		t.Fatalf("LeaseLeft = %v %v after renewing for %v", c.LeaseLeft, time.Since(start), longLease)
	}

	// A lease that passed while nobody took the key over is renewed: the token fences,
	// the clock only decides takeovers.
	q := params(newKey())
	q.Lease = shortLease
	claimed := f.claimWant(q, receiver.OutcomeClaimed)
	waitPast(claimed.Record.LeaseUntil)
	if err := f.s.Renew(f.ctx, &receiver.RenewParams{Key: q.Key, Token: q.Token, Lease: longLease, Retention: retention}); err != nil {
		t.Fatalf("Renew of a passed lease nobody took over: %v", err)
	}
	f.claimWant(params(q.Key), receiver.OutcomeInFlight)
}

func testConcurrentTakeoversHaveOneWinner(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	p.Lease = shortLease
	first := f.claimWant(p, receiver.OutcomeClaimed)
	waitPast(first.Record.LeaseUntil)
	claims, errs := race(contenders, func(int) (*receiver.Claim, error) { return f.s.Claim(f.ctx, params(p.Key)) })
	winners := 0
	for i, c := range claims {
		switch {
		case errs[i] != nil:
			if !loserErr(errs[i]) {
				t.Fatalf("contender %d: %v", i, errs[i])
			}
		case c.Outcome == receiver.OutcomeClaimed:
			winners++
		case c.Outcome != receiver.OutcomeInFlight:
			t.Fatalf("contender %d: %s, want claimed or in flight", i, c.Outcome)
		}
	}
	if winners != 1 {
		t.Fatalf("%d of %d contenders took over one expired claim, want exactly 1", winners, contenders)
	}
}
