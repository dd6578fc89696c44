// Package sim is a simulation of the whole pipeline in one process — callers that
// behave like Cloud Scheduler, the ingress handler, a lossy queue, several workers, the
// rescuer and the sweeper over one ledger backend — driven by a seeded random schedule
// of interleavings and faults, and checked against the guarantees afterwards.
//
// Every actor (an ingress request, a worker delivery, a rescue round) runs in its own
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
// The clock is the ledger's (every call's Now) and the ingress's; leases and pickup
// deadlines expire when the driver moves it, so a worker paused at a point may find its
// lease taken over. The worker's own lease keeper runs on real time with a lease far
// longer than a schedule, so it never renews: a pause past the lease is a pause past it.
//
// After each schedule the recorded history is checked (Check): every run a caller got a
// 2xx for ends completed or failed; an effect done through worker.Effect is not redone
// after its success was recorded, one through worker.AtMostOnce starts at most once,
// and every downstream call of an effect carries its one key; no two attempts of a run
// hold it at once, as the job itself observes it; no run is answered "new" twice, and
// no job runs with a payload other than the one accepted.
package sim
