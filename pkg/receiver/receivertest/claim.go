package receivertest

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/receiver"
)

var claimTests = map[string]func(*testing.T, Harness){
	"NewKeyIsClaimed":                testNewKeyIsClaimed,
	"SecondClaimIsInFlight":          testSecondClaimIsInFlight,
	"CompletedResponseIsReplayed":    testCompletedResponseIsReplayed,
	"EmptyAndOmittedBodies":          testEmptyAndOmittedBodies,
	"OtherFingerprintIsMismatch":     testOtherFingerprintIsMismatch,
	"CompleteIsFencedByToken":        testCompleteIsFencedByToken,
	"ReleaseMakesTheKeyClaimable":    testReleaseMakesTheKeyClaimable,
	"ConcurrentClaimsHaveOneWinner":  testConcurrentClaimsHaveOneWinner,
	"ConcurrentClaimsOfManyKeys":     testConcurrentClaimsOfManyKeys,
	"InvalidParametersAreRefused":    testInvalidParametersAreRefused,
	"GetOfAMissingKeyIsNotFound":     testGetOfAMissingKeyIsNotFound,
	"ReplayedResponseIsTheCompleted": testReplayedResponseIsTheCompleted,
}

func testNewKeyIsClaimed(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	start := time.Now()
	c := f.claimWant(p, receiver.OutcomeClaimed)
	r := c.Record
	if r == nil || r.Key != p.Key || r.Fingerprint != p.Fingerprint || r.Token != p.Token || r.State != receiver.StateInFlight || r.Attempt != 0 || r.Response != nil {
		t.Fatalf("claimed record = %+v, want key, fingerprint, token of the params, in flight, attempt 0, no response", r)
	}
	approx(t, "LeaseUntil", r.LeaseUntil, start.Add(p.Lease))
	approx(t, "CreatedAt", r.CreatedAt, start)
	exact(t, "ExpireAt", r.ExpireAt, r.LeaseUntil.Add(p.Retention))
	got := f.get(p.Key)
	if diff := cmp.Diff(r, got); diff != "" {
		t.Fatalf("Get differs from the claimed record (-claimed +got):\n%s", diff)
	}
}

func testSecondClaimIsInFlight(t *testing.T, h Harness) {
	f := setup(t, h)
	first := params(newKey())
	start := time.Now()
	f.claimWant(first, receiver.OutcomeClaimed)
	second := params(first.Key)
	c := f.claimWant(second, receiver.OutcomeInFlight)
	took := time.Since(start)
	if c.Record == nil || c.Record.Token != first.Token {
		t.Fatalf("in flight answers record %+v, want the first claim's (token %s)", c.Record, first.Token)
	}
	if c.LeaseLeft <= 0 || c.LeaseLeft > first.Lease {
		t.Fatalf("LeaseLeft = %v, want in (0, %v]", c.LeaseLeft, first.Lease)
	}
	if c.LeaseLeft < first.Lease-took-slack {
		t.Fatalf("LeaseLeft = %v %v after a %v claim", c.LeaseLeft, took, first.Lease)
	}
	if got := f.get(first.Key); got.Token != first.Token {
		t.Fatalf("the second claim changed the record: token %s, want %s", got.Token, first.Token)
	}
}

func sampleResponse() *receiver.Response {
	return &receiver.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/charges/ch_1"}, "Link": {"<a>", "<b>"}},
		Body:   []byte("{\"id\":\"ch_1\"}\x00\xff binary"),
	}
}

func testCompletedResponseIsReplayed(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	f.claimWant(p, receiver.OutcomeClaimed)
	resp := sampleResponse()
	start := time.Now()
	f.complete(p.Key, p.Token, resp, retention)
	c := f.claimWant(params(p.Key), receiver.OutcomeCompleted)
	if diff := cmp.Diff(resp, c.Record.Response); diff != "" {
		t.Fatalf("replayed response differs (-stored +replayed):\n%s", diff)
	}
	r := f.get(p.Key)
	if r.State != receiver.StateCompleted || r.Token != p.Token || !r.LeaseUntil.IsZero() {
		t.Fatalf("completed record = %+v, want completed by the claim's token, no lease", r)
	}
	approx(t, "ExpireAt", r.ExpireAt, start.Add(retention))
	approx(t, "UpdatedAt", r.UpdatedAt, start)
}

func testReplayedResponseIsTheCompleted(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	f.claimWant(p, receiver.OutcomeClaimed)
	f.complete(p.Key, p.Token, sampleResponse(), retention)
	for i := range 3 {
		c := f.claimWant(params(p.Key), receiver.OutcomeCompleted)
		if c.Record.Token != p.Token {
			t.Fatalf("replay %d answers token %s, want the completing claim's %s", i, c.Record.Token, p.Token)
		}
	}
}

func testEmptyAndOmittedBodies(t *testing.T, h Harness) {
	f := setup(t, h)
	for _, resp := range []*receiver.Response{
		{Status: http.StatusNoContent, Header: http.Header{}},
		{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}}, BodyOmitted: true},
	} {
		p := params(newKey())
		f.claimWant(p, receiver.OutcomeClaimed)
		f.complete(p.Key, p.Token, resp, retention)
		got := f.claimWant(params(p.Key), receiver.OutcomeCompleted).Record.Response
		if got.Status != resp.Status || len(got.Body) != 0 || got.BodyOmitted != resp.BodyOmitted || !cmp.Equal(got.Header, resp.Header) {
			t.Fatalf("replayed %+v, want %+v", got, resp)
		}
	}
}

func testOtherFingerprintIsMismatch(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	f.claimWant(p, receiver.OutcomeClaimed)
	other := params(p.Key)
	other.Fingerprint = fpB
	if c := f.claimWant(other, receiver.OutcomeMismatch); c.Record == nil || c.Record.Fingerprint != fpA {
		t.Fatalf("mismatch answers %+v, want the record with the first fingerprint", c.Record)
	}
	f.complete(p.Key, p.Token, sampleResponse(), retention)
	f.claimWant(other, receiver.OutcomeMismatch)
	if r := f.get(p.Key); r.Fingerprint != fpA || r.State != receiver.StateCompleted {
		t.Fatalf("a mismatch changed the record: %+v", r)
	}
}

func testCompleteIsFencedByToken(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	f.claimWant(p, receiver.OutcomeClaimed)
	err := f.s.Complete(f.ctx, &receiver.CompleteParams{Key: p.Key, Token: uuid.NewString(), Response: sampleResponse(), Retention: retention})
	wantErr(t, "Complete with another token", err, receiver.ErrLeaseLost)
	err = f.s.Complete(f.ctx, &receiver.CompleteParams{Key: newKey(), Token: p.Token, Response: sampleResponse(), Retention: retention})
	wantErr(t, "Complete of a key never claimed", err, receiver.ErrLeaseLost)
	if r := f.get(p.Key); r.State != receiver.StateInFlight {
		t.Fatalf("a refused Complete changed the record: %+v", r)
	}
	f.complete(p.Key, p.Token, sampleResponse(), retention)
	before := f.get(p.Key)
	time.Sleep(10 * time.Millisecond)
	f.complete(p.Key, p.Token, &receiver.Response{Status: 500, Header: http.Header{}}, retention) // a retried write: no change
	if diff := cmp.Diff(before, f.get(p.Key)); diff != "" {
		t.Fatalf("completing again changed the record (-before +after):\n%s", diff)
	}
	err = f.s.Renew(f.ctx, &receiver.RenewParams{Key: p.Key, Token: p.Token, Lease: longLease, Retention: retention})
	wantErr(t, "Renew of a completed key", err, receiver.ErrLeaseLost)
}

func testReleaseMakesTheKeyClaimable(t *testing.T, h Harness) {
	f := setup(t, h)
	p := params(newKey())
	f.claimWant(p, receiver.OutcomeClaimed)
	err := f.s.Release(f.ctx, &receiver.ReleaseParams{Key: p.Key, Token: uuid.NewString()})
	wantErr(t, "Release with another token", err, receiver.ErrLeaseLost)
	if err := f.s.Release(f.ctx, &receiver.ReleaseParams{Key: p.Key, Token: p.Token}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	f.absent(p.Key)
	if err := f.s.Release(f.ctx, &receiver.ReleaseParams{Key: p.Key, Token: p.Token}); err != nil {
		t.Fatalf("Release of a key already released: %v, want nil", err)
	}
	again := params(p.Key)
	again.Fingerprint = fpB // nothing was stored: another request may take the key
	f.claimWant(again, receiver.OutcomeClaimed)
	f.complete(again.Key, again.Token, sampleResponse(), retention)
	err = f.s.Release(f.ctx, &receiver.ReleaseParams{Key: again.Key, Token: again.Token})
	wantErr(t, "Release of a completed key", err, receiver.ErrLeaseLost)
	if r := f.get(p.Key); r.State != receiver.StateCompleted {
		t.Fatalf("a refused Release changed the record: %+v", r)
	}
}

func testConcurrentClaimsHaveOneWinner(t *testing.T, h Harness) {
	f := setup(t, h)
	key := newKey()
	claims, errs := race(contenders, func(int) (*receiver.Claim, error) { return f.s.Claim(f.ctx, params(key)) })
	winners := 0
	var token string
	for i, c := range claims {
		switch {
		case errs[i] != nil:
			if !loserErr(errs[i]) {
				t.Fatalf("contender %d: %v", i, errs[i])
			}
		case c.Outcome == receiver.OutcomeClaimed:
			winners++
			token = c.Record.Token
		case c.Outcome != receiver.OutcomeInFlight:
			t.Fatalf("contender %d: %s, want claimed or in flight", i, c.Outcome)
		}
	}
	if winners != 1 {
		t.Fatalf("%d of %d contenders claimed one key, want exactly 1", winners, contenders)
	}
	for i, c := range claims {
		if errs[i] == nil && c.Outcome == receiver.OutcomeInFlight && c.Record.Token != token {
			t.Fatalf("contender %d was told the key is held by %s, but %s won", i, c.Record.Token, token)
		}
	}
	if r := f.get(key); r.Token != token {
		t.Fatalf("the record's token is %s, want the winner's %s", r.Token, token)
	}
}

func testConcurrentClaimsOfManyKeys(t *testing.T, h Harness) {
	f := setup(t, h)
	run := newRun()
	claims, errs := race(contenders, func(int) (*receiver.Claim, error) { return f.s.Claim(f.ctx, fenced(params(newKey()), run, 1)) })
	for i, c := range claims {
		if errs[i] != nil && !loserErr(errs[i]) {
			t.Fatalf("contender %d: %v", i, errs[i])
		}
		if errs[i] == nil && c.Outcome != receiver.OutcomeClaimed {
			t.Fatalf("contender %d of its own key: %s, want claimed", i, c.Outcome)
		}
	}
}

func testInvalidParametersAreRefused(t *testing.T, h Harness) {
	f := setup(t, h)
	for name, p := range map[string]*receiver.ClaimParams{
		"no key nor fence": {Fingerprint: fpA, Token: "t", Lease: longLease, Retention: retention},
		"raw key":          {Key: "charge-1", Fingerprint: fpA, Token: "t", Lease: longLease, Retention: retention},
		"no token":         {Key: newKey(), Fingerprint: fpA, Lease: longLease, Retention: retention},
		"no lease":         {Key: newKey(), Fingerprint: fpA, Token: "t", Retention: retention},
		"attempt 0":        fenced(params(newKey()), newRun(), 0),
		"raw run":          fenced(params(newKey()), "run-1", 1),
	} {
		if _, err := f.s.Claim(f.ctx, p); !errors.Is(err, receiver.ErrInvalid) {
			t.Errorf("Claim with %s: %v, want ErrInvalid", name, err)
		}
	}
	p := params(newKey())
	f.claimWant(p, receiver.OutcomeClaimed)
	big := &receiver.Response{Status: 200, Body: bytes.Repeat([]byte("x"), receiver.MaxStoredBody+1)}
	err := f.s.Complete(f.ctx, &receiver.CompleteParams{Key: p.Key, Token: p.Token, Response: big, Retention: retention})
	wantErr(t, "Complete with a body over MaxStoredBody", err, receiver.ErrInvalid)
}

func testGetOfAMissingKeyIsNotFound(t *testing.T, h Harness) {
	setup(t, h).absent(newKey())
}
