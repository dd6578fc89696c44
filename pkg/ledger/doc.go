// Package ledger records scheduled runs and their side effects so that each run takes
// effect once, although every scheduler and queue delivers at least once.
//
// # The run state machine
//
// A run is created by the ingress claim (absent → queued) and taken by a worker claim
// (queued, absent, or running with an expired lease → running, with a new attempt). The
// holder of a run renews its lease, then completes it, releases it (back to queued, for a
// retry) or fails it for good. Every transition after a worker claim is fenced: it happens
// only while the record still carries the caller's attempt number and attempt ID. A worker
// claim bumps the attempt number, so a worker whose lease was taken over can no longer
// renew, complete, release, fail or record an effect: it gets ErrLeaseLost.
//
//	absent ──Claim──▶ queued ──Acquire──▶ running ──Complete──▶ completed
//	                    ▲                   │  │
//	                    └──────Release──────┘  └──Fail──▶ failed
//
// A running run whose lease expired may be acquired by another worker, and the rescuer
// returns it (or a queued run past its pickup deadline) to queued with a fresh deadline so
// that it is republished.
//
// Operators act too (ops.go): Retry returns a failed run to queued with a fresh attempt
// budget, Cancel makes a queued or running run cancelled (terminal; its holder's next
// fenced write gets ErrLeaseLost wrapping ErrCancelled), OperatorRelease ends a
// running run's lease now and queues it again, and ResolveEffect settles an effect a
// failed run left uncertain (it happened, or it did not) and queues the run again as
// Retry does. Each records who and why in the run's History, which every transition
// adds to.
//
// # Clocks
//
// Leases, deadlines and expiry are judged by the backend's clock (the database's now(),
// Firestore's commit and read times, the embedded store's host clock), never by the
// caller's: clock skew between instances cannot hand one run to two holders. Backends that
// can honour a caller-supplied "now" for tests say so; the others refuse it with
// ErrNowUnsupported.
//
// # Effects
//
// A side effect is recorded under its effect key, EffectKey(runID, name), before it is
// done (pending, with the attempt that began it) and marked done after. An effect done by
// an earlier attempt is reported as done and skipped; one left pending by a dead attempt is
// reported as such, so the caller decides between redoing it under the same key (at least
// once, deduplicated downstream by the key) and skipping it (at most once).
//
// # Ledger and drivers
//
// A program holds a *Ledger: Open returns one for a URL, New one in front of a backend's
// Driver (memory.New, sqlite.Open, postgres.Open, … return their driver). Every method
// of Ledger, in methods.go, does once for all backends what a call needs besides the
// storage: it bounds the call's time (Options.Timeout, WithTimeout), records a client
// span "ledger.METHOD" and the metric runonce.ledger.call.duration on the global
// OpenTelemetry providers unless Options names others, and wraps the driver's error
// with the operation. A backend implements Driver and nothing else.
//
// # Backends
//
// Backends register a URL scheme (Register) and are opened with Open: memory://NAME,
// sqlite:///PATH, postgres://…, firestore://PROJECT[/DATABASE],
// spanner://projects/P/instances/I/databases/D, redis://HOST:PORT/DB. Every backend passes the
// conformance suite in package ledgertest against a real instance; a guarantee is added to
// that suite, never to one backend alone.
package ledger
