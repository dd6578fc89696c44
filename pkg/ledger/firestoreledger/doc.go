// Package firestoreledger is the ledger backend on Cloud Firestore (Native mode): no
// operation, and it scales by itself. It passes the ledgertest conformance suite against
// the official Firestore emulator.
//
// # Opening
//
// Open it by URL with ledger.Open("firestore://PROJECT[/DATABASE][?prefix=PREFIX]") (the
// package registers the scheme in init; link it in with a blank import), or wrap a
// client of your own with New. The only query parameter is prefix, prepended to the
// collection names; any other is an error that names it. Credentials come from the
// environment (Application Default Credentials), never from the URL. With
// FIRESTORE_EMULATOR_HOST set the client talks to the emulator.
//
// # Document layout
//
// A run is one document in the collection PREFIX+"runs" whose ID is the run ID (64 hex
// digits: always a valid document ID). Its fields:
//
//	namespace, job, key     string     the run's identity
//	schedule_time           timestamp  null when the run is keyed by a caller key
//	payload_hash, payload   string, bytes
//	status                  string     queued | running | completed | failed | cancelled
//	attempt                 integer    the fencing number, bumped by every worker claim
//	attempt_id              string     the current claim's ID
//	deadline                timestamp  pickup deadline (queued) or lease expiry (running); null when terminal
//	not_before              timestamp  Retry-After of a released run; null otherwise
//	attempts_made           integer
//	last_error              string
//	result                  bytes      what the completed attempt returned (JSON); null for none
//	progress                bytes      how far the run's work has got (JSON); null for none
//	created_at, updated_at  timestamp  the claim's are the server's time as estimated (see below)
//	completed_at            timestamp  null until completed or failed
//	expire_at               timestamp  last write + retention: the TTL policy's field
//	effect_seq              integer    bumped by every effect write, to fence it (below)
//	history                 string     the run's latest events (ledger.Run.History) as JSON
//
// A document that creates a run leaves out schedule_time, payload, attempt, attempt_id,
// not_before, attempts_made, last_error, result, progress and completed_at while they
// are zero (null, 0 or ""), and a reader takes an absent field for its zero: no query
// filters or orders on them, and each field a new run does not write is one value and
// two index entries fewer in its commit. Every later write sets only the fields it
// changes, and updated_at: no transition sends the payload, the run's identity or its
// creation time again, so that a lease renewal of a run with a large payload is a small
// commit, and a field a new run left out stays out until it holds a value.
//
// An effect is one document in PREFIX+"effects" whose ID is ledger.EffectKey(run ID,
// name), with run_id, name, status (pending | done), attempt, created_at, updated_at,
// done_at and expire_at.
//
// A payload is stored in the run document, and a Firestore document holds at most
// 1 MiB with its result (at most ledger.MaxResult): payloads near that size are refused
// (ledger.ErrInvalid), and a result that would push the document over it cannot be
// stored (ledger.ErrTooLarge at Complete). Keep the ingress's
// -max-body well below it.
//
// # Indexes, shards and TTL
//
// Firestore limits the write rate of a collection whose documents hold a sequential
// indexed value (a time, or any value that only grows) to 500 writes a second
// (https://firebase.google.com/docs/firestore/solutions/shard-timestamp, "Sharded
// timestamps"): with the times indexed as Firestore does by default, one deployment
// would stop near 170 runs a second (three writes a run) whatever its number of
// instances. The ledger follows that page's solution, so that no index it needs carries
// the limit:
//
//   - every run and effect document holds shard, ShardOf its run ID (the value of the
//     ID's first hex digit: Shards = 16 shards, even, as run IDs are hashes); it is
//     written with the document's other fields, so it costs no write of its own, and a
//     write of a document an earlier release created without it adds it;
//   - every composite index that holds a time leads with shard (Indexes), so each index
//     takes writes in 16 ranges, and the ceiling of each collection is 500 × 16 = 8,000
//     writes a second;
//   - every field that follows the clock or a caller's sequence (Sequential: created_at,
//     updated_at, deadline, expire_at, not_before, completed_at, schedule_time, key and
//     attempt_id, a UUIDv7 that starts with its time; an effect's times and ref) is
//     exempted from single-field indexing (Unindexed), expire_at, the TTL field,
//     included, as https://firebase.google.com/docs/firestore/best-practices recommends
//     for TTL fields;
//   - the listing, the rescue and the sweep run their query on each shard at once and
//     merge the answers (ListQuery, RescueQuery, SweepQuery).
//
// The indexes (query scope COLLECTION, on PREFIXruns unless said otherwise):
//
//	shard ASC, status ASC, deadline ASC            ListRescue (RescueQuery)
//	shard ASC, expire_at ASC (runs, and effects)   Sweep (SweepQuery)
//	shard ASC, created_at DESC                     List, newest first (ListQuery)
//	shard ASC, updated_at DESC                     List filtered by update time
//	shard ASC, FIELD ASC, created_at DESC          List filtered by FIELD: status, job or
//	shard ASC, FIELD ASC, updated_at DESC            namespace (merged for several)
//	run_id ASC, name ASC (effects)                 ListEffects (EffectsQuery)
//
// for example:
//
//	gcloud firestore indexes composite create --database=DATABASE \
//	  --collection-group=PREFIXruns --query-scope=COLLECTION \
//	  --field-config=field-path=shard,order=ascending \
//	  --field-config=field-path=status,order=ascending \
//	  --field-config=field-path=deadline,order=ascending
//
// and each exemption:
//
//	gcloud firestore indexes fields update created_at --database=DATABASE \
//	  --collection-group=PREFIXruns --disable-indexes
//
// deploy/terraform declares all of them, and its tests check them against Indexes,
// Sequential and Unindexed; this package's tests check that every query it runs is
// served by Indexes. Without an index Firestore answers FAILED_PRECONDITION, and the
// query's operation returns an error that says so (the emulator needs no index, and has
// no write limit). What the fan-out costs: a listing page of n runs reads up to 16 × (n+1)
// documents in 16 queries (one query of n+1 before), a rescue round up to 16 × its limit
// (at least 16 reads, one a query), a sweep likewise on each collection (reading each
// document's expiry and run ID alone). Claims, transitions and effect writes cost what
// they did.
//
// Firestore's TTL policy deletes expired runs by itself (within about a day of
// expire_at); set it on the runs only:
//
//	gcloud firestore fields ttls update expire_at --collection-group=PREFIXruns --enable-ttl
//
// Effects must have no TTL policy: an effect must outlive its run, or a later attempt
// redoes it. Sweep (which every worker's rescuer runs) deletes an effect only once its
// run is gone, and moves the expire_at of a live run's effect to the run's. A record past
// expire_at that still exists still deduplicates: nothing here reads expire_at except
// Sweep.
//
// A run or an effect that an earlier release wrote has no shard, and the sharded queries
// do not see it: a write of such a run adds it, and the workers' Sweep backfills the
// others (BackfillShards), once per database, starting an hour after the first instance
// of this release ran (when no instance of the earlier release writes any more), a few
// seconds a round: a read per document, a write per document fixed, its progress in the
// document PREFIXmeta/shard-backfill. Until then an earlier release's run whose message
// was lost waits for the backfill to be rescued, and its effects to be swept.
//
// # What each operation costs, and how it is fenced
//
//	Claim, new run             1 RPC: Commit of a Create (exists=false precondition)
//	Claim, duplicate           1 read of a run this ledger created or found before
//	                             (driver.KnownRuns, the latest 4,096); otherwise
//	                             2 RPCs: the failed Create, then one read. Neither
//	                             writes nor opens a transaction.
//	Acquire, Renew, Complete,  2 RPCs: a read, then a Commit of an Update with an
//	Release, Fail, Rescue,       update-time precondition (the document's UpdateTime
//	Expedite                     as read); Acquire of an absent run writes a Create.
//	                             A worker claim that finds the run held: 1 read.
//	Renew, Complete, Release,  1 RPC when this ledger wrote the run last (the latest
//	Fail by the holder           4,096 it wrote): the Commit alone, with that write's
//	                             update time as the precondition; if another writer
//	                             got there since, it is refused and the two RPCs above
//	                             follow (an effect write forgets the run: it changes
//	                             the run's update time)
//	BeginEffect,               3 RPCs: a read of the run and the effect (no lock), then
//	CompleteEffect               a transaction with no reads (BeginTransaction, Commit)
//	                             of two fenced writes
//	Get, GetEffect, Ping       1 read
//
// A single-document transition is a compare-and-set: it reads the run, decides with the
// state machine of package driver (the driver.Apply* functions) at the read's time,
// and writes only if the document's update time is still the one it read. If another
// writer got there first, the precondition fails (nothing was written) and the
// operation reads and decides again, so of 64 concurrent worker claims exactly one
// acquires and the others find the run held. This costs fewer round trips than a
// transaction (which adds BeginTransaction) and takes no locks.
//
// A holder's write of a run this ledger wrote last needs no read: if the document's
// update time is still the one that write returned, nobody has written it since, so it
// is the record as written, and the state machine decides on that (at the estimate of
// the server's time, as a claim does; these decisions depend on the fence alone). Only
// a decision that writes is made that way, so an answer that writes nothing (a repeat,
// a lost lease) always comes from a read of the document as it stands.
//
// An effect lives in its own document, so its write cannot carry a precondition on the
// run. An effect write reads both documents (one BatchGetDocuments), decides, and
// commits two writes atomically, each with a precondition: the effect's (exists=false,
// or its update time as read) and the run's update time as read, on a write that only
// bumps the run's effect_seq. The effect is written only while the run still carries
// the caller's fence. The client's only atomic multi-document write that is not
// deprecated is a transaction, hence BeginTransaction; the transaction reads nothing,
// so it holds no lock while the worker works. (A transaction that read the run would
// take a lock that the holder's own renewal waits for: on the emulator, renewals
// racing with effect writes failed with ABORTED "Transaction lock timeout" after 2 s.)
// The price is a second document write (billed) per effect write.
//
// A round whose documents changed before its write (a renewal beaten by the holder's
// own effect write, which bumps the run's effect_seq) reads and decides again, after a
// jittered pause doubling from 10 ms to 100 ms, for as long as the call's context
// allows (10 s when it has no deadline; a worker gives a renewal until its lease
// keeper's self-fence point): a round that could not begin before the deadline is not
// made, and the answer wraps ledger.ErrContended: retryable, nothing was written. (A
// fixed 5 rounds, some 150 ms, gave up on renewals that the run's effect writes kept
// beating while the lease still left seconds.) The client's gRPC
// codes map to the ledger's sentinels in one place: NOT_FOUND → ErrNotFound, ABORTED →
// ErrContended, UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED and INTERNAL →
// ErrUnavailable, INVALID_ARGUMENT → ErrInvalid; ALREADY_EXISTS on a Create is the
// duplicate path, and FAILED_PRECONDITION on a fenced write means "read again".
//
// # Clocks
//
// Leases, pickup deadlines, Retry-After and expiry are judged by Firestore's clock,
// never the caller's: every decision is made at the ReadTime of the read it is based
// on, and the record's times (UpdatedAt,
// Deadline, ExpireAt, …) are that time plus the durations asked for. A decision made at
// the read time stays valid at the commit, because the commit happens only if nothing
// changed since. A caller-supplied Now cannot be honoured and is refused with
// ledger.ErrNowUnsupported.
//
// # The ingress claim and the server's clock
//
// The ingress claim of a new run must cost one RPC, so it cannot read the server's
// time before it writes, and Firestore has no write transform that stores "server time
// plus a duration" (firestore.ServerTimestamp stores the request time alone, and the
// numeric transforms do not apply to timestamps). The claim therefore stores:
//
//   - created_at and updated_at at the server's time as estimated below, like the
//     deadline, so that the listing's index (ordered by created_at) sees a new run at
//     once. (A ServerTimestamp field would not do: the emulator stamps it at millisecond
//     precision with the request's arrival, not the commit, so the claim could not
//     return the stored value without a second RPC.) Runs an earlier release claimed
//     have neither field until their next write, and read as their create time.
//   - deadline and expire_at from the server's clock as estimated by this client: every
//     response that carries a server time (ReadTime, UpdateTime) bounds the offset
//     between the server's clock and the local one by the round trip it came in; the
//     ledger keeps the intersection of these bounds and adds its midpoint to the local
//     clock. A skewed local clock cancels out: only its rate is used, over the time
//     since the last round trip. New reads once to start the estimate. The error is at
//     most half the tightest recent round trip plus the local clock's drift since: a
//     few milliseconds on a pickup deadline of minutes.
//
// The trade-off is confined to the pickup deadline of a queued run that no worker has
// claimed yet: it decides only when the rescuer republishes the run (at worst a few
// milliseconds early, a duplicate delivery that the worker claim deduplicates, or
// late), never who holds a lease. Every later write (worker claim, release, rescue)
// stores times computed from a read's ReadTime. The rescue and sweep queries use the
// same estimate, widened by a margin, as their bound, and then keep only the documents
// past their deadline (or expiry) by the query's ReadTime, the server's clock.
package firestoreledger
