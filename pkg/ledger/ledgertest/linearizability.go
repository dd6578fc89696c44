package ledgertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"

	"github.com/runonce/runonce/pkg/ledger"
)

// The linearizability check: goroutines make random concurrent calls on a few runs
// through the backend's real clock, and porcupine checks that the history is that of
// some sequential order of the calls, each inside its call's interval, judged by the
// sequential specification of spec.go: the state machine of docs/design.md, written
// apart from package driver, so that a wrong rule in driver's Apply functions (which
// memory, SQLite, Firestore and Spanner execute) fails the check as a wrong rule in
// PostgreSQL's SQL or Redis's Lua does.
//
// The operators' actions (retry, cancel, release, and resolving the runs' one effect
// either way) and the lookup of a run by a prefix of its ID (ListRunIDs, which must see
// a run as soon as its claim has answered, and for as long as it exists) are in the
// histories of backends that implement them
// (Harness.Operations).
//
// Time enters the model where a history can judge it without the ledger's clock:
//
//   - Retry times: half the releases of the even rounds ask for a retry after
//     linDelay, far longer than a history, so the run is not due for its whole history:
//     a worker claim must find it held and a rescue must not take it (its deadline is
//     after the retry). The model knows a run's retry is ahead, not when.
//   - Expiry: the odd rounds write every run with a retention of linShort, so records
//     pass their ExpireAt during the history and must still deduplicate: a claim of an
//     expired record is not "created", a worker claim finds it as it is.
//   - Sweeps: the even rounds write effects with a retention of linShort, and sweep
//     (unrecorded) between an effect's completion and the begin that follows it: the
//     runs are kept for the default retention, so a correct sweep deletes nothing the
//     history can see, and an effect of a live run swept under it shows as a done
//     effect that the next begin reports new.
//   - The ExpireAt rule on every write (the retention after the latest of the write,
//     the deadline and the retry time) is checked on every answer by the suite's
//     invariant wrapper (invariants.go), which this check calls through.
//
// Leases are not: whether a lease ran out depends on the ledger's now at the call, which
// a refusal does not report, so leases are long (none expires during a history);
// expiry, takeover and fencing after it are the Acquire, Fence and Rescue tests' and the
// simulation's (internal/sim, on a clock it drives). Pickup deadlines are a millisecond,
// so that every queued run not waiting for a retry is rescuable: a rescue may succeed
// only on such a run whose status and attempt are as listed (a conflict is always legal,
// since whether a deadline passed and whether it is still the listed one are matters of
// time the model does not follow). Stored times are not compared. A call that fails with
// an error that does not say what happened (unavailable, contended, a timeout) may or
// may not have applied: the model allows both.

const (
	linClients = 6
	linOps     = 30
	linRuns    = 3
	linRounds  = 2
	linLease   = time.Minute
	linPickup  = time.Millisecond
	linEffect  = "lin"
	// linDelay is the retry delay of a delayed release: no history lasts as long.
	linDelay = time.Hour
	// linShort is the retention of the records that must expire during a history.
	linShort = time.Millisecond
	// linTimeout bounds porcupine's search of one history.
	linTimeout = 30 * time.Second
)

var linearizabilityTests = map[string]func(*testing.T, Harness){
	"ConcurrentHistories": func(t *testing.T, h Harness) {
		f := setup(t, h)
		for round := range cmp.Or(h.LinearizabilityRounds, linRounds) {
			ops := recordHistory(f, uint64(round))
			res, info := porcupine.CheckOperationsVerbose(linModel.ToModel(), ops, linTimeout)
			switch res {
			case porcupine.Ok:
				continue
			case porcupine.Unknown:
				t.Fatalf("round %d: porcupine could not decide a history of %d calls within %s", round, len(ops), linTimeout)
			}
			out, err := os.CreateTemp("", "ledgertest-linearizability-*.html")
			if err == nil {
				err = porcupine.Visualize(linModel.ToModel(), info, out)
				out.Close()
			}
			if err != nil {
				t.Fatalf("round %d: the history of %d calls is not linearizable (writing the visualization failed: %v)", round, len(ops), err)
			}
			t.Fatalf("round %d: the history of %d concurrent calls is not linearizable against the state machine: see %s", round, len(ops), out.Name())
		}
	},
}

type linInput struct {
	op      string
	run     string
	attempt string // the claim's or the worker claim's new attempt ID, or expedite's
	fence   ledger.Fence
	payload string // payload hash of claim and acquire
	rescue  ledger.RescueParams
	// keep is the retention of the call's writes (zero: the default).
	keep time.Duration
	// delay is a release's retry delay.
	delay time.Duration
	// done is a resolution's verdict.
	done bool
}

type linOutput struct {
	err     string // "", lease_lost, not_found, conflict, invalid, unknown
	created bool
	// mismatch: the claim found the run with another payload hash.
	mismatch bool
	outcome  ledger.AcquireOutcome
	run      linRun
	done     bool
	prev     int64
	fxBy     int64
	// found: the lookup listed the run.
	found bool
}

// linRun is what the model compares of a run; deadline is taken from answers.
type linRun struct {
	exists    bool
	status    ledger.Status
	attempt   int64
	attemptID string
	made      int64
	payload   string
	// delayed: a released run whose retry is not due yet (NotBefore ahead).
	delayed bool
}

type linState struct {
	run  linRun
	fx   ledger.EffectStatus
	fxBy int64
}

func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ledger.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, ledger.ErrNotFound):
		return "not_found"
	case errors.Is(err, ledger.ErrConflict):
		return "conflict"
	case errors.Is(err, ledger.ErrInvalid):
		return "invalid"
	case errors.Is(err, ledger.ErrWrongStatus):
		return "wrong_status"
	}
	return "unknown"
}

func snap(r *ledger.Run) linRun {
	if r == nil {
		return linRun{}
	}
	return linRun{
		exists: true, status: r.Status, attempt: r.Attempt, attemptID: r.AttemptID, made: r.AttemptsMade, payload: r.PayloadHash,
		delayed: r.Status == ledger.StatusQueued && !r.NotBefore.IsZero(),
	}
}

func linOperator(run string) *ledger.OperatorParams {
	return &ledger.OperatorParams{RunID: run, Actor: "ledgertest", Reason: "linearizability", PickupTimeout: linPickup}
}

func linResolution(run string, done bool) *ledger.ResolveEffectParams {
	p := &ledger.ResolveEffectParams{OperatorParams: *linOperator(run), Effect: linEffect, Done: done}
	if done {
		p.Ref = "e-1"
	}
	return p
}

var linModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			id := op.Input.(linInput).run
			if _, ok := by[id]; !ok {
				order = append(order, id)
			}
			by[id] = append(by[id], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, id := range order {
			out = append(out, by[id])
		}
		return out
	},
	Init: func() []any { return []any{linState{}} },
	Step: func(state, input, output any) []any {
		s, in, got := state.(linState), input.(linInput), output.(linOutput)
		if in.op == "rescue" {
			return rescueSpec(s, in, got)
		}
		n, want := specStep(s, in)
		if got.err == "unknown" {
			return []any{s, n} // it may or may not have applied
		}
		prevOK := got.prev == want.prev ||
			// Two concurrent begins of one effect by one attempt: the later may report the
			// effect's previous attempt as it was before the earlier (PostgreSQL reads it
			// from the statement's snapshot). Unspecified, and harmless: the attempt is
			// the caller's own, and the worker treats both answers as "began before".
			in.op == "begin" && want.prev == in.fence.Attempt && got.prev < in.fence.Attempt
		if got.err != want.err || got.created != want.created || got.mismatch != want.mismatch || got.outcome != want.outcome ||
			got.run != want.run || got.done != want.done || !prevOK || got.fxBy != want.fxBy || got.found != want.found {
			return nil
		}
		return []any{n}
	},
	Equal: func(a, b any) bool { return a.(linState) == b.(linState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		arg := ""
		switch in.op {
		case "claim", "acquire", "expedite":
			arg = short(in.attempt)
		case "rescue":
			arg = fmt.Sprintf("%s@%d", in.rescue.Status, in.rescue.Attempt)
		case "resolve":
			arg = fmt.Sprintf("done=%v", in.done)
		default:
			arg = fmt.Sprintf("%d/%s", in.fence.Attempt, short(in.fence.AttemptID))
		}
		res := out.err
		switch {
		case res != "":
		case in.op == "claim":
			res = fmt.Sprintf("created=%v %s", out.created, describeRun(out.run))
		case in.op == "acquire":
			res = fmt.Sprintf("%s %s", out.outcome, describeRun(out.run))
		case in.op == "begin":
			res = fmt.Sprintf("done=%v prev=%d by=%d", out.done, out.prev, out.fxBy)
		case in.op == "lookup":
			res = fmt.Sprintf("found=%v", out.found)
		default:
			res = describeRun(out.run)
		}
		return fmt.Sprintf("%s(%s) → %s", in.op, arg, res)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		return fmt.Sprintf("%s effect=%s/%d", describeRun(s.run), s.fx, s.fxBy)
	},
}

func short(s string) string {
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

func describeRun(r linRun) string {
	if !r.exists {
		return "absent"
	}
	due := ""
	if r.delayed {
		due = " (retry not due)"
	}
	return fmt.Sprintf("%s%s attempt %d/%s made %d", r.status, due, r.attempt, short(r.attemptID), r.made)
}

// recordHistory runs linClients goroutines of linOps random calls on linRuns fresh runs
// and returns the history. Even rounds delay some releases and sweep concurrently;
// odd rounds write runs that expire at once (see the model's comment).
func recordHistory(f *fixture, round uint64) []porcupine.Operation {
	expiring := round%2 == 1
	var runKeep, effectKeep time.Duration
	if expiring {
		runKeep = linShort
	} else {
		effectKeep = linShort
	}
	runs := make([]string, linRuns)
	for i := range runs {
		runs[i] = newRunID()
	}
	good := identity(runs[0]).PayloadHash
	other := ledger.PayloadHash([]byte("another payload"))
	var (
		mu      sync.Mutex
		ops     []porcupine.Operation
		fences  []ledger.Fence // every fence granted, for stale use
		claims  []linInput     // every claim made, for expedite
		listing []ledger.Run   // runs read, for rescue
		// clock orders calls and returns as they happened.
		clock atomic.Int64
	)
	now := func() int64 { return clock.Add(1) }
	var wg sync.WaitGroup
	for c := range linClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(round, uint64(c)))
			pick := func() string { return runs[rng.IntN(len(runs))] }
			for range linOps {
				mu.Lock()
				var fence ledger.Fence
				if len(fences) > 0 {
					fence = fences[len(fences)-1-rng.IntN(min(len(fences), 4))]
				}
				var claim linInput
				if len(claims) > 0 {
					claim = claims[rng.IntN(len(claims))]
				}
				var listed ledger.Run
				if len(listing) > 0 {
					listed = listing[rng.IntN(len(listing))]
				}
				mu.Unlock()
				in := linInput{run: pick(), keep: runKeep}
				switch x := rng.IntN(100); {
				case x < 15:
					in.op, in.attempt, in.payload = "claim", uuid.NewString(), good
					if expiring {
						time.Sleep(2 * linShort) // so that what was written has expired
					}
				case x < 35:
					in.op, in.attempt, in.payload = "acquire", uuid.NewString(), good
					if rng.IntN(8) == 0 {
						in.payload = other
					}
				case x < 45 && fence.RunID != "":
					in.op, in.fence, in.run = "renew", fence, fence.RunID
				case x < 55 && fence.RunID != "":
					in.op, in.fence, in.run = "complete", fence, fence.RunID
				case x < 63 && fence.RunID != "":
					in.op, in.fence, in.run = "release", fence, fence.RunID
					if !expiring && rng.IntN(2) == 0 {
						in.delay = linDelay
					}
				case x < 66 && fence.RunID != "":
					in.op, in.fence, in.run = "fail", fence, fence.RunID
				case x < 76 && fence.RunID != "":
					in.op, in.fence, in.run, in.keep = "begin", fence, fence.RunID, effectKeep
				case x < 84 && fence.RunID != "":
					in.op, in.fence, in.run, in.keep = "completefx", fence, fence.RunID, effectKeep
				case x < 88 && claim.run != "":
					in.op, in.run, in.attempt = "expedite", claim.run, claim.attempt
				case x < 94 && listed.ID != "":
					in.op, in.run = "rescue", listed.ID
					in.rescue = ledger.RescueParams{Status: listed.Status, Attempt: listed.Attempt, Deadline: listed.Deadline}
				// The operators' actions, on backends that implement them (elsewhere an
				// ErrUnsupported would read as "may have applied" and weaken the check).
				case x < 95 && f.h.Operations:
					in.op = "cancel"
				case x < 96 && f.h.Operations:
					in.op = "retry"
				case x < 97 && f.h.Operations:
					in.op = "orelease"
				case x < 98 && f.h.Operations:
					in.op = "lookup"
				case x < 99 && f.h.Operations:
					in.op, in.done = "resolve", rng.IntN(2) == 0
				default:
					in.op = "get"
				}
				resolved := false // in is the claim of a run just resolved
				for {
					call := now()
					out, granted, read := linCall(f, in)
					ret := now()
					mu.Lock()
					ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
					if granted != nil {
						fences = append(fences, *granted)
					}
					if in.op == "claim" {
						claims = append(claims, in)
					}
					if read != nil {
						listing = append(listing, *read)
					}
					mu.Unlock()
					// Where the backend resolves effects, an attempt that just began the
					// effect sometimes fails at once, leaving it uncertain, and a run just
					// failed is often resolved at once, so that resolutions meet failed
					// runs whose effect is pending (or done, or absent). A run resolved is
					// claimed and its effect begun again at once, so that the verdict is
					// seen (done, or begun afresh with no previous attempt); a run just
					// claimed sometimes begins its effect at once, so that the chain starts
					// often enough (the runs of a history are soon finished for good).
					if f.h.Operations && out.err == "" {
						if in.op == "acquire" && granted != nil && (resolved || rng.IntN(3) == 0) {
							in = linInput{op: "begin", run: in.run, fence: *granted, keep: effectKeep}
							resolved = false
							continue
						}
						if in.op == "begin" && !out.done && rng.IntN(3) == 0 {
							in = linInput{op: "fail", run: in.run, fence: in.fence, keep: runKeep}
							continue
						}
						if in.op == "fail" && rng.IntN(4) != 0 {
							in = linInput{op: "resolve", run: in.run, done: rng.IntN(2) == 0, keep: runKeep}
							continue
						}
						if in.op == "resolve" {
							in = linInput{op: "acquire", run: in.run, attempt: uuid.NewString(), payload: good, keep: runKeep}
							resolved = true
							continue
						}
					}
					resolved = false
					// An effect just done is begun again: it must be reported done (after
					// its own ExpireAt and a sweep, in the rounds that sweep).
					if in.op != "completefx" || out.err != "" {
						break
					}
					in.op = "begin"
					if !expiring {
						sweepPastEffects(f)
					}
				}
			}
		})
	}
	wg.Wait()
	return ops
}

// sweepPastEffects sweeps, unrecorded, once the effects just written are past their
// ExpireAt (linShort): an hour ahead where the backend takes a Now, else after it. A
// correct sweep deletes nothing a history sees (the runs are kept for the default
// retention, and effects live as long as their run); its error is not the history's.
func sweepPastEffects(f *fixture) {
	p := &ledger.SweepParams{}
	if f.h.SupportsNow {
		p.Now = time.Now().Add(time.Hour)
	} else {
		time.Sleep(2 * linShort)
	}
	_, _ = f.l.Sweep(f.ctx, p)
}

// linCall makes one call and returns its answer, the fence it granted and the run it
// read (for a later rescue).
func linCall(f *fixture, in linInput) (linOutput, *ledger.Fence, *ledger.Run) {
	ctx, cancel := context.WithTimeout(f.ctx, 20*time.Second)
	defer cancel()
	l := f.l
	var out linOutput
	var r *ledger.Run
	var err error
	var granted *ledger.Fence
	fence := in.fence
	switch in.op {
	case "claim":
		id := identity(in.run)
		id.PayloadHash = in.payload
		var res *ledger.ClaimResult
		res, err = l.Claim(ctx, &ledger.ClaimParams{Identity: id, AttemptID: in.attempt, PickupTimeout: linPickup, Retention: in.keep})
		if err == nil {
			out.created, out.mismatch, r = res.Created, res.PayloadMismatch, res.Run
		}
	case "acquire":
		id := identity(in.run)
		id.PayloadHash = in.payload
		var res *ledger.AcquireResult
		res, err = l.Acquire(ctx, &ledger.AcquireParams{Identity: id, AttemptID: in.attempt, Lease: linLease, Retention: in.keep})
		if err == nil {
			out.outcome, r = res.Outcome, res.Run
			if res.Outcome == ledger.OutcomeAcquired {
				granted = &ledger.Fence{RunID: in.run, Attempt: res.Run.Attempt, AttemptID: res.Run.AttemptID}
			}
		}
	case "renew":
		r, err = l.Renew(ctx, &ledger.RenewParams{Fence: fence, Lease: linLease, Retention: in.keep})
	case "complete":
		r, err = l.Complete(ctx, &ledger.CompleteParams{Fence: fence, Retention: in.keep})
	case "release":
		r, err = l.Release(ctx, &ledger.ReleaseParams{Fence: fence, Error: "lin", RetryAfter: in.delay, PickupTimeout: linPickup, Retention: in.keep})
	case "fail":
		r, err = l.Fail(ctx, &ledger.FailParams{Fence: fence, Error: "lin", Retention: in.keep})
	case "get":
		r, err = l.Get(ctx, &ledger.GetParams{RunID: in.run})
	case "expedite":
		r, err = l.Expedite(ctx, &ledger.ExpediteParams{RunID: in.run, AttemptID: in.attempt, Retention: in.keep})
	case "rescue":
		p := in.rescue
		p.RunID, p.PickupTimeout, p.Retention = in.run, linPickup, in.keep
		r, err = l.Rescue(ctx, &p)
	case "begin":
		var res *ledger.BeginEffectResult
		res, err = l.BeginEffect(ctx, &ledger.BeginEffectParams{Fence: fence, Name: linEffect, Retention: in.keep})
		if err == nil {
			out.done, out.prev, out.fxBy = res.Done, res.PreviousAttempt, res.Effect.Attempt
		}
	case "completefx":
		_, err = l.CompleteEffect(ctx, &ledger.CompleteEffectParams{Fence: fence, Name: linEffect, Retention: in.keep})
	case "retry":
		r, err = l.Retry(ctx, linOperator(in.run))
	case "cancel":
		r, err = l.Cancel(ctx, linOperator(in.run))
	case "orelease":
		r, err = l.OperatorRelease(ctx, linOperator(in.run))
	case "lookup":
		// A prefix of the run's ID that no other run of the history shares.
		var ids []string
		ids, err = l.ListRunIDs(ctx, &ledger.ListRunIDsParams{Prefix: in.run[:16]})
		out.found = slices.Contains(ids, in.run)
	case "resolve":
		r, err = l.ResolveEffect(ctx, linResolution(in.run, in.done))
	}
	out.err = errKind(err)
	if err == nil && r != nil {
		out.run = snap(r)
	}
	var read *ledger.Run
	if in.op == "get" && err == nil {
		c := *r
		read = &c
	}
	return out, granted, read
}
