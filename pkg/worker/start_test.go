package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/worker"
)

// StartEffect hands fn the start it is to make: a new one without a prior attempt, one
// an earlier attempt left unknown with that attempt and when it was begun, and after a
// refused try the next effect name, new again.
func TestStartEffectHandsFnThePendingStart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Lease: 600 * time.Millisecond, MaxAttempts: 5})
	var seen []worker.PendingStart
	b.mux.HandleFunc("start", func(ctx context.Context, j *worker.Job) error {
		_, err := worker.StartEffect(ctx, worker.RunEffect, func(ctx context.Context, p *worker.PendingStart) (string, error) {
			seen = append(seen, *p)
			switch len(seen) {
			case 1:
				return "", errors.New("timed out: it may have started")
			case 2:
				return "", worker.NotStarted(errors.New("denied"))
			}
			return "executions/1", nil
		})
		return err
	})
	m := message("start", "k", "{}")
	before := time.Now()
	for _, want := range []string{worker.OutcomeReleased, worker.OutcomeReleased, worker.OutcomeCompleted} {
		if v := b.process(m); v.Outcome != want {
			t.Fatalf("verdict %s, want %s", v.Outcome, want)
		}
	}
	run := m.Identity.RunID
	want := []worker.PendingStart{
		{Name: "run", Key: ledger.EffectKey(run, "run")},
		{Name: "run", Key: ledger.EffectKey(run, "run"), Prior: 1},
		{Name: "run/2", Key: ledger.EffectKey(run, "run/2")},
	}
	if len(seen) != len(want) {
		t.Fatalf("fn called %d times, want %d", len(seen), len(want))
	}
	for i, p := range seen {
		if p.Name != want[i].Name || p.Key != want[i].Key || p.Prior != want[i].Prior {
			t.Fatalf("call %d: %+v, want %+v", i+1, p, want[i])
		}
		if p.BegunAt.Before(before.Add(-time.Second)) || p.BegunAt.After(time.Now()) {
			t.Fatalf("call %d: begun at %s, not during the test", i+1, p.BegunAt)
		}
	}
	if !seen[1].BegunAt.Equal(seen[0].BegunAt) {
		t.Fatalf("the uncertain start was begun at %s, the attempt that took it over saw %s", seen[0].BegunAt, seen[1].BegunAt)
	}
}

// An uncertain start fn does not settle fails the run with both ways an operator
// resolves it, naming the run and the effect.
func TestStartEffectNamesTheResolutionOfAnUncertainStart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	b.mux.HandleFunc("start", func(ctx context.Context, j *worker.Job) error {
		_, err := worker.StartEffect(ctx, worker.RunEffect, func(ctx context.Context, p *worker.PendingStart) (string, error) {
			if p.Prior == 0 {
				return "", errors.New("no answer")
			}
			return "", worker.Permanent(fmt.Errorf("cannot tell: %w", &worker.UncertainEffectError{Name: p.Name, Key: p.Key, Attempt: p.Prior}))
		})
		return err
	})
	m := message("start", "k", "{}")
	b.process(m)
	if v := b.process(m); v.Outcome != worker.OutcomeFailed {
		t.Fatalf("verdict %s, want failed", v.Outcome)
	}
	r := b.run(m.Identity.RunID)
	for _, cmd := range []string{
		"runonce runs resolve " + r.ID + " --effect run --done --ref EXECUTION",
		"runonce runs resolve " + r.ID + " --effect run --not-done",
	} {
		if !strings.Contains(r.LastError, cmd) {
			t.Fatalf("last error %q does not name %q", r.LastError, cmd)
		}
	}
}

// ConfirmFence renews the attempt's lease at once, and once an operator released the
// run it refuses with ErrLeaseLost and cancels the job, before the next renewal would.
func TestConfirmFenceRenewsAndRefusesAFencedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, &worker.Config{Lease: time.Minute, MaxAttempts: 3}) // no renewal during the test
	var first, second, cause error
	var deadline time.Time
	var sent time.Time
	b.mux.HandleFunc("start", func(ctx context.Context, j *worker.Job) error {
		time.Sleep(100 * time.Millisecond) // the claim's lease is older than the renewal's
		sent = time.Now()
		first = worker.ConfirmFence(ctx)
		deadline = b.run(j.RunID).Deadline
		if _, err := b.ledger.OperatorRelease(ctx, &ledger.OperatorParams{RunID: j.RunID, Actor: "ops@example.com", Reason: "stuck"}); err != nil {
			return err
		}
		second = worker.ConfirmFence(ctx)
		cause = context.Cause(ctx)
		return second
	})
	m := message("start", "k", "{}")
	if v := b.process(m); v.Outcome != worker.OutcomeLeaseLost {
		t.Fatalf("verdict %s, want lease lost", v.Outcome)
	}
	if first != nil || deadline.Before(sent.Add(time.Minute-20*time.Millisecond)) {
		t.Fatalf("first ConfirmFence = %v with the lease until %s (%s after it was sent); want nil and a fresh lease", first, deadline, deadline.Sub(sent))
	}
	if !errors.Is(second, ledger.ErrLeaseLost) || !errors.Is(cause, ledger.ErrLeaseLost) {
		t.Fatalf("ConfirmFence after the release = %v, job cause %v; want ErrLeaseLost for both", second, cause)
	}
	if err := worker.ConfirmFence(t.Context()); !errors.Is(err, worker.ErrNotInJob) {
		t.Fatalf("ConfirmFence outside a job = %v, want ErrNotInJob", err)
	}
}
