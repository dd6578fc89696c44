package ledgertest

import "github.com/runonce/runonce/pkg/ledger"

// The sequential specification the linearizability check judges histories by: the run
// state machine of docs/design.md ("The run state machine") and the Ledger interface's
// documentation, written from them alone. It imports nothing from package driver on
// purpose: memory, SQLite, Firestore and Spanner execute driver's Apply functions, so a
// model built from those would hold a wrong rule in driver to itself and see atomicity
// only. Here a wrong rule makes a history that no order of the calls explains.
//
// It follows what a history of the check can tell (see linearizability.go): every lease
// is live, a released run's retry is either due or not due for the whole history, and
// one effect per run.

// holds reports whether f is the attempt holding the run: running, at f's attempt
// number and attempt ID. Every fenced write but a repeat needs it.
func (r linRun) holds(f ledger.Fence) bool {
	return r.exists && r.status == ledger.StatusRunning && r.attempt == f.Attempt && r.attemptID == f.AttemptID
}

// by reports whether the run's latest attempt is f (whatever its status): a finishing
// write repeated by the attempt that made it answers the run as it is.
func (r linRun) by(f ledger.Fence) bool {
	return r.exists && r.attempt == f.Attempt && r.attemptID == f.AttemptID
}

// specStep is one call on state s: the state after it and the answer it must give.
func specStep(s linState, in linInput) (linState, linOutput) {
	n, out := s, linOutput{}
	r := s.run
	switch in.op {
	case "get":
		if !r.exists {
			out.err = "not_found"
			break
		}
		out.run = r
	case "lookup":
		// A run is listed by a prefix of its ID from its claim's answer on, for as long
		// as it exists.
		out.found = r.exists
	case "claim":
		// The ingress claim creates the run queued, or answers the existing one, flagging
		// another payload.
		if r.exists {
			out.run, out.mismatch = r, r.payload != in.payload
			break
		}
		n.run = linRun{exists: true, status: ledger.StatusQueued, attemptID: in.attempt, payload: in.payload}
		out.created, out.run = true, n.run
	case "expedite":
		// Only the claim that created the run, untouched since.
		switch {
		case !r.exists:
			out.err = "not_found"
		case r.status != ledger.StatusQueued || r.attempt != 0 || r.attemptID != in.attempt:
			out.err = "lease_lost"
		default:
			out.run = r
		}
	case "acquire":
		out.run = r
		switch {
		case r.exists && r.payload != in.payload:
			out.outcome = ledger.OutcomePayloadMismatch
		case r.exists && r.status.Terminal():
			out.outcome = ledger.OutcomeFinished
		case r.exists && (r.status == ledger.StatusRunning || r.delayed):
			out.outcome = ledger.OutcomeHeld // a live lease, or a retry not due yet
		default: // absent (the worker claim creates it) or queued and due
			if !r.exists {
				r = linRun{exists: true, payload: in.payload}
			}
			r.status, r.attempt, r.attemptID, r.delayed = ledger.StatusRunning, r.attempt+1, in.attempt, false
			n.run = r
			out.outcome, out.run = ledger.OutcomeAcquired, r
		}
	case "renew":
		if !r.holds(in.fence) {
			out.err = "lease_lost"
			break
		}
		out.run = r
	case "complete", "fail":
		to := ledger.StatusCompleted
		if in.op == "fail" {
			to = ledger.StatusFailed
		}
		n.run, out = finishSpec(r, in.fence, to, false)
	case "release":
		n.run, out = finishSpec(r, in.fence, ledger.StatusQueued, in.delay > 0)
	case "begin":
		if !r.holds(in.fence) {
			out.err = "lease_lost"
			break
		}
		if s.fx == ledger.EffectDone {
			out.done, out.fxBy = true, s.fxBy // an earlier attempt did it: skip it
			break
		}
		if s.fx == ledger.EffectPending {
			out.prev = s.fxBy // taken over from the attempt that began it
		}
		n.fx, n.fxBy = ledger.EffectPending, in.fence.Attempt
		out.fxBy = in.fence.Attempt
	case "completefx":
		switch {
		case !r.holds(in.fence):
			out.err = "lease_lost"
		case s.fx == "":
			out.err = "not_found"
		case s.fxBy != in.fence.Attempt:
			out.err = "invalid" // begun by another attempt: begin it first
		default:
			n.fx = ledger.EffectDone
		}
	case "retry", "cancel", "orelease":
		n.run, out = operatorSpec(r, in.op)
	case "resolve":
		n, out = resolveSpec(s, in.done)
	}
	return n, out
}

// finishSpec is a holder's finishing write (complete, fail, release) to status to: a
// repeat by the attempt that wrote it answers the run unchanged; otherwise only the
// holder writes, and the attempt counts.
func finishSpec(r linRun, f ledger.Fence, to ledger.Status, delayed bool) (linRun, linOutput) {
	if r.by(f) && r.status == to {
		return r, linOutput{run: r}
	}
	if !r.holds(f) {
		return r, linOutput{err: "lease_lost"}
	}
	r.status, r.made, r.delayed = to, r.made+1, delayed
	return r, linOutput{run: r}
}

// operatorSpec is an operator's action: retry (failed → queued, a fresh attempt budget),
// cancel (queued or running → cancelled), release (running → queued, the attempt counted
// as dead, its holder fenced out). A status that does not allow it is refused.
func operatorSpec(r linRun, op string) (linRun, linOutput) {
	if !r.exists {
		return r, linOutput{err: "not_found"}
	}
	switch {
	case op == "retry" && r.status == ledger.StatusFailed:
		r.status, r.made, r.attemptID = ledger.StatusQueued, 0, ""
	case op == "cancel" && (r.status == ledger.StatusQueued || r.status == ledger.StatusRunning):
		r.status, r.delayed = ledger.StatusCancelled, false
	case op == "orelease" && r.status == ledger.StatusRunning:
		r.status, r.made, r.attemptID = ledger.StatusQueued, r.made+1, ""
	default:
		return r, linOutput{err: "wrong_status"}
	}
	return r, linOutput{run: r}
}

// resolveSpec is an operator's verdict on the run's effect, begun and never marked done
// by an attempt of a failed run: in one write the effect is done (it happened) or
// pending as if no attempt had begun it (the next attempt's begin reports none and does
// it again under the same key), and the run is queued as by a retry. The run's status is
// judged first, as for every operator action; then an absent effect is not found and one
// already done is nothing to resolve.
func resolveSpec(s linState, done bool) (linState, linOutput) {
	run, out := operatorSpec(s.run, "retry")
	switch {
	case out.err != "":
		return s, out
	case s.fx == "":
		return s, linOutput{err: "not_found"}
	case s.fx == ledger.EffectDone:
		return s, linOutput{err: "wrong_status"}
	}
	n := s
	n.run = run
	if done {
		n.fx = ledger.EffectDone // by the attempt that began it
	} else {
		n.fxBy = 0
	}
	return n, out
}

// rescueSpec: a rescue succeeds only on a queued run whose retry is due and whose status
// and attempt are as listed (every lease is live, so never on a running one), and
// changes nothing the model follows (it moves the pickup deadline); a conflict is legal
// whenever nothing else is refused, since whether a pickup deadline passed, and whether
// it is still the listed one, are matters of time the model does not follow.
func rescueSpec(s linState, in linInput, got linOutput) []any {
	r := s.run
	rescuable := r.exists && r.status == ledger.StatusQueued && !r.delayed &&
		in.rescue.Status == r.status && in.rescue.Attempt == r.attempt
	switch got.err {
	case "unknown", "conflict":
		return []any{s}
	case "not_found":
		if r.exists {
			return nil
		}
		return []any{s}
	case "":
		if !rescuable || got.run != r {
			return nil
		}
		return []any{s}
	}
	return nil
}
