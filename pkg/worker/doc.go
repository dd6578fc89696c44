// Package worker runs jobs for the runs that reach it from Pub/Sub (pull or push) so that
// each run takes effect once.
//
// # Guarantees
//
// For every delivery, one code path decides: claim the run in the ledger, run the job
// while a lease keeper renews the lease, then complete, release or fail the run, and only
// then ack or nack the message.
//
//   - A delivery runs only what was accepted: the claim carries the hash of the message's
//     data, and a message whose payload is not the one the run was accepted with never
//     runs (acked, logged as an ERROR, counted as payload_mismatch; the run untouched).
//     A message older than the retention may have outlived its run's record: it runs a
//     run that exists, and is dropped rather than create one.
//   - A delivery of a run that another live attempt holds is nacked, never acked: acking
//     it would lose the run if the holder then died. A completed or failed run is acked
//     without work.
//   - Every write after the claim is fenced by the attempt: a worker whose lease was taken
//     over (a pause, a partition) learns it at its next renewal, its job's context is
//     cancelled with ledger.ErrLeaseLost as the cause, and it neither completes, releases,
//     records effects nor acks. A worker that cannot reach the ledger cancels its job
//     before its lease runs out (self-fencing). A run an operator cancelled is learnt the
//     same way, with ledger.ErrCancelled in the cause; nothing more is written and the
//     delivery is acked (OutcomeCancelled).
//   - Side effects go through Effect: the effect key is recorded before the effect, an
//     effect done by an earlier attempt is skipped, and the key is handed to the effect to
//     pass downstream as Idempotency-Key, so an effect retried after a crash is
//     deduplicated downstream. AtMostOnce is the variant for downstreams that take no
//     key: an effect an earlier attempt began and did not finish is skipped and reported.
//     StartEffect records the start of an execution elsewhere with its name, so that a
//     later attempt follows that execution instead of starting another (package targets
//     starts Workflows executions, Cloud Run jobs and builds with it); a start whose
//     outcome is unknown is looked up, never made blindly, and one that cannot be settled
//     fails the run for an operator to resolve. ConfirmFence renews the lease at once,
//     for a call a fenced attempt must not make (such as a start).
//   - A handler's error decides the run: nil completes it; Permanent(err) fails it; any
//     other error, a RetryAfter or a panic releases it for a retry, until the job's
//     attempts are exhausted, when it fails. An operator's retry (ledger.Ledger.Retry)
//     gives a failed run a fresh budget of attempts.
//   - Every wait is bounded: each ledger call and republish by Config.LedgerTimeout, a
//     Go handler by its maximum run time (its context is then cancelled with
//     ErrMaxRunTime and the run released), deliveries by Config.Concurrency,
//     a retry delay by Config.MaxRetryAfter.
//   - On shutdown, running jobs get a grace period; the rest are cancelled, their runs
//     released and their messages nacked.
//   - A delivery of a job the handler does not run (a Router says which it runs) is not
//     an attempt: nothing is written, it is logged and nacked after a delay, so that
//     in a rolling deploy a run waits for a worker that knows its job instead of
//     burning its attempts; once it has waited Config.UnhandledAfter (a day), the
//     worker that receives it claims it and fails it, naming the job, so that a run of
//     a job no worker runs still ends failed.
//   - A rescuer in every worker republishes runs whose pickup deadline or lease passed
//     (a lost message, an ingress that died between claim and publish); a conditional
//     ledger write makes exactly one rescuer republish each.
//
// # Running a worker
//
// New takes a Config with the ledger, the handler, the Subscriber to pull from and the
// publisher the rescuer republishes to, and refuses a configuration that could run a
// run twice (a retention a message could outlive). Run pulls, rescues and sweeps until
// its context ends, then gives running jobs Config.Grace, releases what is left and
// returns. Handler serves readiness and, with Config.PushAuth, push delivery, for the
// caller's own HTTP server. ExampleWorker_Run is a whole worker.
//
// # Jobs
//
// A job is a Handler registered by name on a Mux, as in net/http; Middleware wraps
// handlers. HTTPTarget turns a jobs-file entry into a handler that calls a URL with the
// run's Idempotency-Key.
package worker
