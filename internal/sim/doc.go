// Package sim is a simulation of the whole pipeline in one process — callers that
// behave like Cloud Scheduler, the ingress handler, a lossy queue, several workers, the
// rescuer, the sweeper and, in a third of the schedules, an operator who retries,
// cancels and releases runs and resolves a failed run's pending effect through the
// ingress's actions (ingress.Handler.Act and Resolve) over one ledger backend — driven by a seeded random schedule
// of interleavings and faults, and checked against the guarantees afterwards.
//
// Every actor (an ingress request, a worker delivery, a rescue round, an operator's
// action) runs in its own
// goroutine, but only one runs at a time: each ledger call, each publish and each
// downstream call of a job is a point where the actor hands control back to the
// driver, which picks, from the seed, what happens next: another parked actor goes on,
// a new request arrives, a message is delivered, dropped, duplicated or delayed, the
// clock moves, or a parked actor crashes (it never runs again). At each call the fault
// wrappers of the ledger and the publisher may fail it before it applies, apply it and
// then report an error or a timeout, or answer late (another actor runs between the
// write and its answer). So a schedule is reproducible from its seed, and every
// interleaving of calls is reachable.
//
// A call may also hang (blackholed): where its caller bounded it, time moves on and it
// fails with a timeout; a call made with no deadline would wait forever, which breaks
// the promise that every wait is bounded (worker.Config.LedgerTimeout) and is reported.
//
// The clock is the ledger's (every call's Now), the ingress's and the workers' own
// (worker.Config.Now: when a claim was sent, how old a message is); leases and pickup
// deadlines expire when the driver moves it, so a worker paused at a point may find its
// lease taken over. It is the workers' timers too (worker.Config.AfterFunc): a job's
// MaxRunTime, and the lease keeper's renewals and self-fence, fire in the order of their
// deadlines as the driver moves the clock past them, on the driver's goroutine, so they
// follow the schedule. A keeper's renewal is no scheduling point and draws no fault; the
// keeper of a crashed worker does not renew, nor that of a paused one (half the
// deliveries) while it is parked at a call: a pause past the lease is a pause past it, and
// its keeper self-fences the job. Firestore judges time by its own clock, which the
// simulation cannot move: its schedules are clockless, and leave out what only that
// clock can end (see Backends).
//
// In a quarter of the schedules a job may hang: it blocks until its context ends (its
// MaxRunTime, a self-fence or a lost lease), and then returns its cause. In half, jobs
// run a worker.Batch of three items after their effects (one item at a time, in one
// group, so that the batch's goroutines hand the actor on and never run beside each
// other); each item's call is a scheduling point and may fail (worker.SkipItem). In a
// quarter (not on a clockless ledger), jobs then start an execution through a Google
// Cloud API target (targets.Target, Workflows or Cloud Run, through its official client,
// worker.StartEffect) served by targetstest.Fake (targets.go): each API call is a
// scheduling point, and at the schedule's own rate for them the fake refuses a start or
// fails it ambiguously before it takes effect, applies it and loses its answer, fails a
// look-up, or holds a call (before it takes effect or before it answers) until the
// schedule lets its caller go on; a call held when its caller crashes stays on the wire,
// and the schedule may land it later. An operator resolves a failed run's start as well.
//
// Schedules reach the retention, which is short (three hours): the clock sometimes
// jumps by up to half of it, jobs ask for retries as late as the workers allow (the
// retention), the sweeper runs, and messages grow older than the retention. The clock
// never moves more than half a retention past the last rescue round that finished (the
// rescuer runs every RescueInterval in a deployment), callers retry within a window of
// half an hour (Cloud Scheduler's maxRetryDuration), and a request parked past that
// window is abandoned: a deployment keeps all of these inside the retention, and a run
// lost by breaking them would be no bug. A finished run the sweeper deletes after its
// retention is not lost.
//
// After each schedule the recorded history is checked (Check): every run a caller got a
// 2xx for ends completed or failed; an effect done through worker.Effect is not redone
// once the ledger accepted its completion or an operator resolved it as done, one
// through worker.AtMostOnce starts at most once (and once more after each resolution as
// not done), no effect recorded done is resolved, and every downstream call of an effect carries its one key; a batch's item is
// not done again once the ledger accepted its group's completion, carries its own key,
// and a batch that returns reports every item done or failed; no two attempts of a run
// hold it at once, as the job itself observes it; no run is answered "new" twice, and
// no job runs with a payload other than the one accepted; every fenced write the ledger
// accepts (a renewal, a completion, a release, a failure, an effect's begin or
// completion) comes from the attempt that held the run just before it applied, or
// repeats a finishing write of that attempt (invariant 5: the fault wrapper reads the
// run at each such write's step, which is its linearisation point, since one actor runs
// at a time); an operator's cancel is final (no worker claim is granted after it, and the
// run ends cancelled), only a failed run is retried or resolved, and an attempt an operator's release or cancel took the run from
// is fenced (invariant 5) though its job may still run until it learns so, which is no
// second holder (invariant 3); a run's start leaves at most one execution running, one
// more per resolution of it as not done, and on Workflows one more per start whose actor
// crashed before it listed the executions, as docs/targets.md promises (invariant 7);
// and no call waits unbounded.
//
// Mutants (mutants.go) reintroduce holes that were closed, as broken ledgers, as a
// switch of the workers' wrappers or of the fake's faults (lost-answer-refused), or as a
// worker option (ignores-max-run-time); TestMutantsAreCaught checks that the schedules CI
// runs catch each.
package sim
