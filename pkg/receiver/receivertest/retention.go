package receivertest

import (
	"errors"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/receiver"
)

var retentionTests = map[string]func(*testing.T, Harness){
	"ExpiredRecordIsClaimedAnew":    testExpiredRecordIsClaimedAnew,
	"ExpiredFenceIsForgotten":       testExpiredFenceIsForgotten,
	"SweepDeletesOnlyWhatExpired":   testSweepDeletesOnlyWhatExpired,
	"UnexpiredRecordStillCounts":    testUnexpiredRecordStillCounts,
	"ClaimExpiresAfterItsLeaseOnly": testClaimExpiresAfterItsLeaseOnly,
}

// A completed record past its retention no longer counts: the key executes again, even
// with another fingerprint, as the published expiry policy says.
func testExpiredRecordIsClaimedAnew(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	p.Lease = shortLease
	f.claimWant(p, receiver.OutcomeClaimed)
	f.complete(p.Key, p.Token, sampleResponse(), shortRetention)
	f.claimWant(params(p.Key), receiver.OutcomeCompleted)
	waitPast(f.get(p.Key).ExpireAt)
	again := params(p.Key)
	again.Fingerprint = fpB
	if c := f.claimWant(again, receiver.OutcomeClaimed); c.Record.Response != nil || c.Record.Token != again.Token {
		t.Fatalf("the claim over an expired record = %+v, want a fresh claim", c.Record)
	}
}

func testExpiredFenceIsForgotten(t *testing.T, h Harness) {
	f := setup(t, h)
	run := newRun()
	p := fenced(params(newKey()), run, 3)
	p.Retention = shortRetention
	f.claimWant(p, receiver.OutcomeClaimed)
	f.claimWant(fenced(params(newKey()), run, 1), receiver.OutcomeFenced)
	time.Sleep(shortRetention + 300*time.Millisecond)
	f.claimWant(fenced(params(newKey()), run, 1), receiver.OutcomeClaimed)
	f.claimWant(fenced(params(newKey()), run, 1), receiver.OutcomeClaimed)
}

// A record whose retention has not passed counts, however long ago it was written.
func testUnexpiredRecordStillCounts(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	f.claimWant(p, receiver.OutcomeClaimed)
	f.complete(p.Key, p.Token, sampleResponse(), 10*time.Second)
	time.Sleep(2 * time.Second)
	f.claimWant(params(p.Key), receiver.OutcomeCompleted)
}

// A claim's retention runs from the end of its lease: a key in flight never expires
// while its holder may still work.
func testClaimExpiresAfterItsLeaseOnly(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	p.Lease, p.Retention = 10*time.Second, 500*time.Millisecond
	c := f.claimWant(p, receiver.OutcomeClaimed)
	exact(t, "ExpireAt", c.Record.ExpireAt, c.Record.LeaseUntil.Add(p.Retention))
	time.Sleep(time.Second)
	f.claimWant(params(p.Key), receiver.OutcomeInFlight)
}

func testSweepDeletesOnlyWhatExpired(t *testing.T, h Harness) {
	f := setup(t, h)
	var expired, live []string
	for range 3 {
		p := params(newKey())
		p.Lease, p.Retention = 100*time.Millisecond, shortRetention
		f.claimWant(p, receiver.OutcomeClaimed)
		expired = append(expired, p.Key)
		q := params(newKey())
		f.claimWant(q, receiver.OutcomeClaimed)
		f.complete(q.Key, q.Token, sampleResponse(), retention)
		live = append(live, q.Key)
	}
	doneKey := params(newKey())
	f.claimWant(doneKey, receiver.OutcomeClaimed)
	f.complete(doneKey.Key, doneKey.Token, sampleResponse(), shortRetention)
	expired = append(expired, doneKey.Key)
	oldRun, liveRun := newRun(), newRun()
	of := fenced(params(newKey()), oldRun, 7)
	of.Retention = shortRetention
	f.claimWant(of, receiver.OutcomeClaimed)
	f.claimWant(fenced(params(newKey()), liveRun, 7), receiver.OutcomeClaimed)
	live = append(live, of.Key) // its key keeps the long retention

	time.Sleep(shortRetention + 500*time.Millisecond)
	total := 0
	for range 10 {
		n, err := f.s.Sweep(f.ctx, 2)
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if n > 4 {
			t.Fatalf("Sweep(limit 2) deleted %d records, more than 2 keys and 2 fences", n)
		}
		total += n
		if n == 0 {
			break
		}
	}
	for _, k := range expired {
		if r, err := f.s.Get(f.ctx, k); !errors.Is(err, receiver.ErrNotFound) {
			t.Errorf("expired key %s is still there after the sweeps: %+v, %v", k, r, err)
		}
	}
	for _, k := range live {
		f.get(k)
	}
	if !h.ExpiresItself && total < len(expired)+1 {
		t.Fatalf("the sweeps deleted %d records, want at least the %d expired keys and the expired fence", total, len(expired))
	}
	f.claimWant(fenced(params(newKey()), oldRun, 1), receiver.OutcomeClaimed) // its fence is gone
	f.claimWant(fenced(params(newKey()), liveRun, 1), receiver.OutcomeFenced)
}
