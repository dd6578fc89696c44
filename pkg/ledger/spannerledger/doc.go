// Package spannerledger is the ledger backend on Cloud Spanner, for teams whose load or
// reach is more than one Firestore region or one PostgreSQL primary holds (multi-region,
// external consistency, tens of thousands of writes a second). It passes the ledgertest
// conformance suite against the official Cloud Spanner emulator.
//
// # Opening
//
// Open it by URL with
// ledger.Open("spanner://projects/PROJECT/instances/INSTANCE/databases/DATABASE") (the
// package registers the scheme in init; link it in with a blank import), with Open, or
// over a client of your own with New. The database must exist (deploy/terraform creates
// it); Open creates the tables when they are missing, through the database admin client
// (Migrate, the DDL in Schema); migrate=false (Options.NoMigrate) opens without, for
// teams that apply Schema in a pipeline. Credentials come from the environment
// (Application Default Credentials): the ingress's and the worker's service accounts need
// roles/spanner.databaseUser on the database (the creating identity needs
// roles/spanner.databaseAdmin once, for the DDL). SPANNER_EMULATOR_HOST points every
// client at the emulator.
//
// # Schema
//
//	runs(run_id STRING(64) PRIMARY KEY, namespace, job, run_key, schedule_time,
//	     payload_hash, payload, status, attempt, attempt_id, deadline, not_before,
//	     attempts_made, last_error, created_at, updated_at, completed_at, expire_at,
//	     history, result, progress,                 history: the run's latest events, JSON
//	     shard AS (the run ID's first hex digit, 0 to 15) STORED)
//	  (result, progress and shard added by ALTER TABLE: migrations/0002 to 0004)
//	  ROW DELETION POLICY (OLDER_THAN(expire_at, INTERVAL 0 DAY))
//	  runs_by_shard_deadline   NULL_FILTERED INDEX ON runs (shard, deadline)   live runs only
//	  runs_by_shard_expire_at  INDEX ON runs (shard, expire_at)
//	  runs_by_shard_created, runs_by_shard_{status,job,namespace}_created   the operators'
//	  runs_by_shard_updated, runs_by_shard_status_updated                   listing (List)
//	effects(run_id, name) PRIMARY KEY, INTERLEAVE IN PARENT runs ON DELETE CASCADE
//	     effect_key, status, attempt, created_at, updated_at, done_at, expire_at, ref
//
// The row deletion policy is the retention: Spanner deletes a run past expire_at (the
// retention after the latest of its last write, its deadline and its not-before,
// driver.ExpiryOf) by itself, typically within three days, so no sweeper is needed;
// Sweep deletes expired runs sooner (at most Limit in one transaction). Effects are
// interleaved in their run: they sit beside it in storage, are read with it in one query,
// and go when it goes (ON DELETE CASCADE, by the policy or by Sweep) and never sooner:
// they have no deletion policy of their own, so a done effect never expires before the
// run whose retry it makes skip the effect. An effect's expire_at only records its own
// retention; ref is the execution a start effect made (empty for none).
//
// # No hot spot from the indexes
//
// An index led by a time (or by a column of few values, the status, then a time) takes
// every write at the current time in one key range, served by one split: the hot spot
// https://cloud.google.com/spanner/docs/schema-design warns of, which caps a deployment's
// write rate whatever its number of nodes. Every index here leads with shard, a column
// Spanner computes from the run ID (its first hex digit: Shards = 16 values, even, as
// run IDs are hashes) and stores, so that no write sends it and the writes at the current
// time spread over 16 key ranges; the primary key, the run ID, is a hash already, and the
// effects sit inside their run. The queries read each shard: List and ListRescue in one
// strong read of 16 index ranges merged in order (a UNION ALL of 16 ordered, limited
// scans, FORCE_INDEX each), so a page of n runs reads at most 16 × (n+1) index entries (n+1
// before) and a rescue round at most 16 × its limit; Sweep reads its index with shard IN
// UNNEST(@shards), 16 ranges, in no order, at most Limit entries. Claims and transitions
// write what they did: shard is not a column they send. The tests parse Schema and refuse
// an index led by a time or another column that follows the clock or a sequence (the
// attempt ID, a UUIDv7; a run's key; an effect's ref), or holding one after a lead not
// computed from the run ID.
//
// Schema only grows (a new file under migrations/): a database an earlier release
// created is upgraded by Migrate (Open, unless migrate=false), which adds the shard
// column (Spanner computes it for the runs already there), creates the shard-led indexes
// and drops the first release's, and deploy/terraform appends the same statements. A new
// index is backfilled before the upgrade completes: apply the DDL before deploying this
// release (Terraform does), since this release's queries force the new indexes, and on a
// large database Open would wait for the backfill.
//
// # What each operation costs, and how it is fenced
//
//	Claim, new run        1 RPC: a Commit of one insert mutation without a read
//	                      (client.Apply with ApplyAtLeastOnce, no BeginTransaction)
//	Claim, duplicate      1 strong read of a run this ledger created or found before
//	                      (driver.KnownRuns, the latest 4,096): no commit, so no lock;
//	                      otherwise the insert fails with AlreadyExists (a Commit that
//	                      takes the row's lock), then 1 strong read
//	Complete, Fail        one read-write transaction: a read of the run by key (the
//	                      begin inlined in it), then a Commit of the mutations: 2 RPCs
//	BeginEffect,          the same, with the run's fence and the effect read by key:
//	CompleteEffect          3 RPCs
//	Acquire, Renew,       a read of the run by key, a query of Spanner's time
//	Release, Rescue,        (CURRENT_TIMESTAMP()), a Commit: 3 RPCs; 2 when the verdict
//	Expedite, operators     writes nothing whatever the time (a duplicate delivery's
//	                        claim of a run held or finished, a fenced-out holder)
//	ResolveEffect         the whole run and the effect read by key, Spanner's time, a
//	                        Commit of both: 4 RPCs
//	Get, GetEffect, ListRescue, Ping   1 strong read
//
// A duplicate is decided by a strong read, never a stale one: a stale read (at a
// timestamp in the past) may not see the very run whose insert just failed, and would
// then have nothing to answer, or answer an old version of a run a worker already moved
// on. A strong read sees every write committed before it started.
//
// An insert applied at least once may be replayed by the client after its first try
// committed; the replay fails with AlreadyExists, the read finds the claim's own attempt
// ID, and the claim is answered as created.
//
// Every later transition reads the run by key in a read-write transaction, which locks
// what it reads until it commits, takes the verdict with the pure rules of package
// ledger (driver.ApplyComplete and friends) over that record and Spanner's time, and
// buffers the writes: the fence (status, attempt number and attempt ID) holds when they
// land. The read locks an absent run's key too, so a worker claim with MustExist that
// finds no run, or one that leaves a run of another payload untouched, answers over a
// record no concurrent sweep or claim can change before the transaction ends. An
// effect's transition reads of its run only the fence (run_id, status, attempt,
// attempt_id), and the effect: Spanner locks the cells a transaction reads, and these
// are cells no renewal writes (it writes deadline, updated_at, expire_at and progress),
// so the holder's effect writes and its renewals never wait on nor abort each other,
// while a takeover, which writes the fence, does.
//
// # Under contention
//
// A transaction Spanner aborts (another transaction holds a lock it needs) nothing of
// it committed; the ledger tries it again, keeping the aborted transaction's priority so
// that younger ones do not abort it again, after the pause Spanner asks or a jittered
// one doubling from 2 ms to 32 ms (the client's own retry loop backs off up to 32 s,
// growing by 1.3 a try, which a lease of seconds cannot afford), until it commits or the
// call's context ends: every call is bounded by its caller's deadline (10 s when it has
// none), and a try that could not begin before it is not made. A worker gives its
// renewals until its lease keeper's self-fence point and its claims likewise (a claim
// answered later could not start its job), so neither outlasts what the lease leaves;
// a call out of time answers ledger.ErrContended or ledger.ErrUnavailable, nothing (or,
// for a commit cut short, perhaps everything) written. ledgertest's Contention case
// holds every backend to it: renewals and effect writes of many runs at once, and no
// holder fenced while its renewals are merely contended.
//
// # Spanner's clock
//
// Leases, deadlines and expiry are judged by Spanner's clock: a transition that grants a
// lease, a deadline or a not-before, or judges one (Acquire, Renew, Release, Rescue,
// Expedite, the operators' actions), reads CURRENT_TIMESTAMP() in its transaction after
// the records, and a params' Now replaces it (for tests). Two kinds of transitions do
// without the query (the emulator spends several times a key read's cost on any query,
// and the ledger's estimate of Spanner's clock, below, bounds its time):
//
//   - a verdict that writes nothing and is the same at the earliest and the latest time
//     Spanner's clock can read by the estimate (a duplicate delivery's claim of a run held
//     or finished, a fenced-out holder's write): it holds whatever the time within, and
//     the estimate's drift could at worst have it refuse a takeover or a rescue that had
//     just become due, which the caller tries again;
//   - Complete, Fail and the effects' writes, whose verdict is the fence's alone and
//     which only stamp times (completed_at, done_at, expire_at a retention later): at the
//     estimate, never before the record's last write.
//
// The ingress claim's single commit cannot read that clock first: its created_at,
// updated_at, pickup deadline and expire_at are Spanner's time as estimated by the ledger
// from the times its transactions read, bounded by each round trip (the estimate is off
// by at most half the best round trip, and a constant skew of the local clock cancels
// out). The pickup deadline only tells the rescuer when to republish a run nobody picked
// up; no lease is granted from the estimate. (Commit timestamps are not used: the
// emulator places them tens of milliseconds ahead of its transactions' clock.)
//
// # The emulator
//
// The emulator runs one read-write transaction at a time in a database: a transaction
// that asks for a lock while another holds it is aborted (or, one time in five, aborts
// the holder). Before version 1.5.38 it also keeps one client's transactions on one
// session (it does not know the multiplexed session the client opens), where a new
// transaction closes the older ones still open: they vanish (Transaction not found,
// Invalid transaction ID), and the ledger treats that as an abort. So that a process's
// calls do not close or abort one another until their callers give up (on a 6 s lease,
// two workers of concurrency 8 self-fenced and redid effects of 13 runs in 100), the
// ledger on the emulator (SPANNER_EMULATOR_HOST set, EmulatorEnv) runs its read-write
// transactions one at a time, the waiting call whose deadline comes first going next (a
// renewal with a second left before an effect write with ten), and a try that another
// process's transaction aborted pauses before it lets the next one go, the pause
// doubling with the process's aborts in a row: the process backs off as a whole, rather
// than each of its calls in turn, whose tries would keep the emulator too busy to let
// the holder commit. On Spanner, which locks rows (cells) rather than the database, the
// calls run concurrently. The emulator's strong reads' CURRENT_TIMESTAMP() is their read
// timestamp, which it places after its latest commit timestamp: ListRescue may list a
// run some milliseconds before its deadline by the transactions' clock, and the Rescue
// that follows refuses it (ErrConflict) until the deadline has passed.
// Its figures say what the client and the schema cost, not what Spanner's commit latency
// (a Paxos round across replicas, 5 to 10 ms in one region) or throughput will be.
//
// On the project's 2-core machine, with
//
//	go test -run '^$' -bench 'BenchmarkClaimVsRaw|BenchmarkLedger' -benchtime=400x ./pkg/ledger/spannerledger
//
// a new run's claim ran at 2,154 and 2,430 claims/s at 1 and 8 goroutines, 0.98 and 1.05
// times the raw insert mutation applied the same way in alternating rounds of the same
// run (2,193 and 2,318/s; earlier runs: 1.06 and 1.65, 1.12 and 1.02): the claim is that
// insert and nothing more, and the spread is the shared machine's noise. Claim p50
// 0.30 to 0.37 ms at one goroutine. A duplicate's strong read took p50 15 to 53 ms: the
// emulator holds a strong read until its commit timestamps, placed tens of milliseconds
// ahead, have passed; on Spanner a strong read in one region takes a few milliseconds.
// Acquire, renew and complete (one read-write transaction each) took p50 2.7 to 5.2 ms,
// the emulator running one transaction at a time, when each read the clock and the run
// in one query. With
//
//	go test -run '^$' -bench 'BenchmarkLedger/(Acquire|Renew|Complete)' -benchtime=300x ./pkg/ledger/spannerledger
//
// in alternating runs of the two versions on the same machine, then busy (a load of
// 30 to 40 on its 2 cores), the key reads took Acquire from 45 and 64 ms/op to 4.4 and
// 7.4, Renew (which still queries the clock) from 8.3 and 9.6 to 7.2 and 10.3, and
// Complete to 1.8 and 2.9 (before, its benchmark failed: its concurrent preparation lost
// transactions to one another).
package spannerledger
