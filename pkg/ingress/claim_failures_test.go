package ingress_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
)

// slowLedger delays claims, so that a caller can give up in the middle of one.
type slowLedger struct {
	ledger.Driver
	delay time.Duration
}

func (s *slowLedger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	time.Sleep(s.delay) // the claim is on its way: the caller's going away must not cut it short
	return s.Driver.Claim(ctx, p)
}

// A caller that drops the connection while its run is being claimed (a lost response, a
// client timeout) must not leave the run claimed without a message: the ingress finishes
// the claim and the publish, so that the retry finds a run on its way.
func TestCallerGoneMidClaimStillPublishes(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	slow := &slowLedger{Driver: b.led.Driver, delay: 300 * time.Millisecond}
	b.led.Driver = slow
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.URL+"/v1/jobs/report", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "gone-mid-claim")
	if _, err := b.srv.Client().Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the caller got an answer (%v) before it gave up: the test did not cut the claim short", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.published() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the claim the caller walked away from was published %d times, want once", b.published())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The retry is a duplicate of a run whose message is out.
	slow.delay = 0
	r := b.do(t, http.MethodPost, "/v1/jobs/report", map[string]string{"Idempotency-Key": "gone-mid-claim"}, "{}")
	if r.status != http.StatusAccepted || r.body["duplicate"] != true {
		t.Fatalf("retry = %d %v, want 202 duplicate", r.status, r.body)
	}
	if got := b.published(); got != 1 {
		t.Fatalf("%d messages after the retry, want 1", got)
	}
}

// tooLargeLedger refuses every claim as a backend with a record size limit does.
type tooLargeLedger struct{ ledger.Driver }

func (tooLargeLedger) Claim(context.Context, *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	return nil, fmt.Errorf("%w: the value of property \"payload\" is longer than 1048487 bytes", ledger.ErrTooLarge)
}

// A payload the ledger cannot store is the caller's problem, said as such: 413, nothing
// claimed, nothing published.
func TestPayloadTooLargeForTheLedgerIs413(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.led.Driver = tooLargeLedger{b.led.Driver}
	r := b.do(t, http.MethodPost, "/v1/jobs/report", map[string]string{"Idempotency-Key": "big"}, `{"big":true}`)
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(fmt.Sprint(r.body["error"]), "larger than the ledger stores") {
		t.Fatalf("answer = %d %v, want 413 naming the ledger's limit", r.status, r.body)
	}
	if b.published() != 0 {
		t.Fatalf("%d messages published for a refused claim", b.published())
	}
}
