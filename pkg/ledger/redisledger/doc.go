// Package redisledger is the ledger backend on Redis 7 (or Valkey, or Google Cloud
// Memorystore), for the lowest claim latency. It passes the ledgertest conformance suite
// against a real redis-server.
//
// # Opening
//
// Open it by URL with ledger.Open("redis://[USER:PASSWORD@]HOST:PORT/DB?prefix=P") or
// rediss:// for TLS (the package registers both schemes in init; link it in with a blank
// import), or wrap a client of your own with New. The parameters prefix (Options.Prefix),
// persistence (require, warn or ignore), eviction (refuse, warn or ignore), wait and
// wait_timeout (Options.WaitReplicas and WaitTimeout) and grace (Options.Grace) are
// runonce's; every other one is go-redis's (dial_timeout, pool_size, …), and one neither
// knows is an error that names it. A rediss:// URL verifies the server against the
// system's roots; Memorystore's in-transit encryption uses the instance's own CA, so
// build a redis.Client whose TLSConfig trusts it and call New.
//
// The client is github.com/redis/go-redis/v9: Redis's own client, which parses both URL
// schemes, runs a script with EVALSHA and falls back to EVAL when the server lost its
// script cache (a restart, a failover), and has a Sentinel client for failover setups.
// valkey-go is faster under heavy pipelining, but every transition of the ingress and the
// worker here is one script call whose latency is the round trip, where the two clients
// do alike.
//
// # Records
//
// A run is a hash PREFIX+"run:"+RUNID with one field per Run field (times as decimal
// microseconds since the epoch, "" for zero); an effect is a hash
// PREFIX+"eff:"+EFFECTKEY (with its Ref in the field ref), whose key the run's hash lists
// in its field effects. An effect lives as long as its run: every write of a run lifts
// each of its effects kept shorter than the run to the run's expire_at (and key expiry),
// an effect written after the run's last write keeps its own expire_at but its key
// expires no sooner than the run's, and Sweep deletes an effect only once its run is
// gone, so that a done effect never expires before the run whose retry it makes skip
// the effect. Two sorted sets index them: PREFIX+"rescue" holds the live
// (queued or running) runs scored by deadline, for ListRescue; PREFIX+"expire" holds
// every record scored by expire_at, for Sweep.
//
// A run's history is its hash's field history, one ledger.Event JSON a line, oldest
// first: every script that changes the run's state appends the events driver.Record
// would (texts clipped as driver.ClipText does) and keeps the latest ledger.MaxHistory;
// it lives and expires with the run, and the scripts answer a run without it. (A list
// key of its own made a new run's claim about a fifth slower at one goroutine: a second
// key to create and expire.) Six sorted sets of run IDs serve List, the same index set
// as the other backends': PREFIX+"list:created", "list:created:status:"+STATUS,
// "list:created:job:"+JOB and "list:created:ns:"+NAMESPACE scored by created_at,
// "list:updated" and "list:updated:status:"+STATUS scored by updated_at; a seventh,
// PREFIX+"list:id", holds every run ID at score 0, read in lexicographic order
// (ZRANGEBYLEX) as the other backends read a range of their primary key, for
// ListRunIDs (a run written before it existed is not in it); PREFIX+"names"
// holds each indexed run's job and namespace, by which an expired run's entries are
// found again. Every script touches a record and these indexes together, so the backend
// needs one primary (a standalone server, a primary-with-replicas instance, Sentinel):
// Redis Cluster, and Memorystore's cluster mode, are not supported.
//
// # What each operation costs, and how it is fenced
//
// Every transition is one Lua script, loaded once when the ledger opens (SCRIPT LOAD) and
// called with EVALSHA: one round trip, atomic on the server. The ingress claim's script
// creates the record when absent and otherwise answers it as it stands, so a duplicate
// costs the same one round trip and is read on the primary, after every write it
// acknowledged. The worker claim's script leaves an absent run absent under MustExist and
// a run with another payload hash untouched, in the same atomic step that would have
// written it, so no sweep can come between. Every later transition's script checks the
// fence (status running, attempt number and attempt ID; Expedite: queued, attempt 0 and
// the claim's attempt ID) and writes only when it holds. When a script wrote nothing it
// answers the record as it stands with the server's time, and the verdict (an idempotent
// repeat, ErrLeaseLost with what the record holds, Held until …, Terminal) is taken by the
// pure rules of package ledger over that record, so the two cannot disagree. Get (the
// run with its history) and GetEffect are one HGETALL.
//
// # The operators' methods
//
// Retry, Cancel and OperatorRelease read the run and the server's time in one script,
// decide with the driver's rules (driver.ApplyRetry, ApplyCancel, ApplyOperatorRelease)
// and write the record, its indexes and its event with a compare-and-set script that
// writes only if the run is still as read (status, attempt, attempt ID, deadline,
// not-before, attempts made, updated and expiry times); after a lost race they read and
// decide again, up to 16 times (then ledger.ErrContended). Two round trips: operators act
// rarely. ResolveEffect reads the effect too (a third) and its script compares and writes
// both records (driver.ApplyResolveEffect).
//
// List walks one listing index, the one of its order led by its equality filter when
// there is one (status; else job or namespace for the created order), newest first: a
// sorted set answers equal scores in descending member order, which is the listing's
// (time, run ID) order, and the cursor (driver.EncodeCursor) is the last run's. The other
// filters are checked in the script over each entry's run, without reading its payload;
// a page reads at most 500 index entries a script call and ten calls, and a page that
// found too few runs in that many entries (a filter the index does not serve, on a large
// ledger) ends short with a cursor that goes on. An entry whose run is gone, or no longer
// matches its index, is dropped when a listing meets it. ListEffects is one script over
// the effects the run's effects field lists, ordered by name.
//
// Time is the server's: every script reads TIME, so leases, deadlines and expiry are
// judged by the Redis server's clock, never the caller's; a params' Now replaces it (for
// tests).
//
// # Retention
//
// Every write of a run sets its ExpireAt to the retention after the latest of now, its
// deadline and its not-before (driver.ExpiryOf; a renewal never moves it back), and sets
// the record's key to expire (PEXPIREAT) at its ExpireAt plus Options.Grace (1h by
// default), so Redis deletes old records by itself: no sweeper is needed. Each new run's
// claim also drops up to ten expiry-index entries older than the grace (their keys have
// expired), with an expired run's listing entries and names entry, so the indexes do not
// grow either (a run whose key has not expired yet is filed again, to be looked at a
// grace later). Sweep deletes records past ExpireAt sooner, through the expiry index,
// with a run's listing entries. A record past ExpireAt still deduplicates until one of
// the two deletes it.
//
// # Durability: what is guaranteed, under which settings
//
// A claim is only as durable as the server that acknowledged it. A server that forgets
// an acknowledged claim (no persistence, a restart between snapshots, a failover to a
// replica that had not received it) answers the scheduler's retry as a new run, and the
// job runs twice; a forgotten effect record lets a retry redo the effect.
//
//   - appendonly yes, appendfsync always (the documented configuration; scripts/services.sh
//     runs the tests' server so): the server fsyncs the append-only file before it
//     answers, so an acknowledged write survives a crash of the process or the machine.
//     The tests kill such a server with SIGKILL and find every record after the restart.
//   - appendonly yes, appendfsync everysec (Memorystore for Valkey's default AOF setting):
//     a crash of the process loses nothing (the write reached the kernel before the
//     answer), a crash of the machine loses up to about a second of acknowledged writes.
//     Open logs a warning.
//   - RDB snapshots only (Memorystore for Redis offers nothing else): a restart loses every
//     write since the last snapshot (at least an hour on Memorystore). No persistence at
//     all: a restart loses everything (the tests show a duplicate then created anew). Open
//     refuses both (ErrNotDurable) unless persistence=warn (log and open) or
//     persistence=ignore.
//   - Replicas are asynchronous: a failover can promote a replica that had not received
//     the last writes, whatever the persistence. wait=N makes every write also WAIT for N
//     replicas (pipelined with the script: no extra round trip, but the replicas' latency)
//     and answers ledger.ErrUnavailable when fewer acknowledged it in wait_timeout (the
//     write stands on the primary; a retry is safe). WAIT narrows the window, it does not
//     make replication synchronous: Redis may still promote a replica that missed a write.
//
// # Memory: a full server refuses, it must not evict
//
// Every record carries an expiry (its ExpireAt plus the grace), so under any
// maxmemory-policy but noeviction a server short of memory deletes acknowledged runs and
// effects, whatever its persistence: with volatile-lru (Memorystore's default, for Valkey
// and for Redis) and maxmemory 8mb, about 1,450 of 2,000 claims of 4 KiB were gone once
// the last was acknowledged, and the retry of each created it anew, to run again
// (TestEvictionLosesAcknowledgedClaims). So:
//
//   - Open reads the server's maxmemory-policy (CONFIG GET, or INFO memory's
//     maxmemory_policy where CONFIG is refused, as on Memorystore) and refuses any policy
//     but noeviction (ErrMayEvict, naming the policy and the fix), and a server that
//     answers neither, unless eviction=warn (log a warning and open) or eviction=ignore
//     (check nothing). This check is apart from persistence=: a server opened with
//     persistence=warn for its RDB snapshots must still not evict.
//   - Under noeviction, a full server (used memory above maxmemory) refuses writes: the
//     ledger answers ErrOutOfMemory, wrapped with ledger.ErrUnavailable, and nothing was
//     written (Redis refuses a script's write that could grow memory only when it is the
//     script's first write, so a refused script changed nothing). Every acknowledged
//     claim stays, and reads still answer, a duplicate's claim included; the tests fill
//     such a server with claims and find every acknowledged one. The ingress answers a new claim 503 with Retry-After;
//     a worker nacks a delivery it could not claim, retries a finishing write until its
//     FinishTimeout, and self-fences when its renewals fail, the run coming back after
//     its lease. Memory comes back as records expire (expiry is not eviction) or Sweep
//     deletes them: size maxmemory for a retention's runs, and watch used memory.
//
// # Speed
//
// On the project's 2-core machine against a local redis-server 7.0 with appendfsync
// always (so every write waits for an fsync), with
//
//	go test -run '^$' -bench 'BenchmarkClaimVsRaw|BenchmarkLedger' -benchtime=4000x ./pkg/ledger/redisledger
//
// a new run's claim, before the history and the listing indexes, ran at 2,879, 7,784 and
// 16,140 claims/s at 1, 8 and 32 goroutines, 0.73, 0.65 and 0.48 of one raw HSET of the
// same fields measured in alternating rounds in the same run (3,956, 11,955 and
// 33,508/s; earlier runs: 0.86, 0.67, 0.49 and 0.75, 0.68, 0.57): the script also files
// the run in both indexes and sets its expiry, and at 32 goroutines the scripts, which
// Redis runs one at a time, are the limit. Claim p50 0.30 to 0.37 ms at one goroutine; a
// duplicate, which writes nothing and waits for no fsync, p50 0.07 to 0.08 ms; acquire,
// renew and complete p50 0.26 to 0.33 ms. Over a network add one round trip to each.
//
// The history costs the claim nothing measurable (it is one more field of the HSET); the
// six listing indexes and the names entry cost it about a sixth of its rate. Measured on
// the same machine loaded by other work (absolute rates 3 to 10 times lower than above,
// and as variable from run to run), the claim script before them and the one after,
// alternating rounds on one client, the new one ran at 1.02, 0.69 and 0.88, then 0.75,
// 0.85 and 0.91, then 0.81, 0.82 and 0.76 of the old one's rate at 1, 8 and 32
// goroutines; the command above gave claim/raw 0.59, 0.54, 0.57 and 0.84, 0.61, 0.48
// after, 0.76, 0.92, 0.53 and 0.57, 0.49, 0.50 before, in alternating runs. A page of 50
// runs of one job (of 2,000) through List ran at 0.49 to 0.54 of the raw reads a client
// would make for it (ZREVRANGE, then a pipeline of HMGET):
//
//	go test -run '^$' -bench BenchmarkListVsRaw -benchtime=2000x ./pkg/ledger/redisledger
//
// On Google Cloud, use Memorystore for Valkey with cluster mode disabled, AOF persistence
// with appendfsync always, maxmemory-policy noeviction (an engine config: gcloud
// memorystore instances update INSTANCE --update-engine-configs=maxmemory-policy=noeviction,
// or engine_configs in Terraform's google_memorystore_instance; on Memorystore for Redis,
// --update-redis-config or redis_configs), and a replica (high availability) with wait=1;
// Open reads INFO persistence and INFO memory (allowed there, where CONFIG GET is not)
// and, where CONFIG GET is allowed, appendfsync and maxmemory-policy. Where a duplicate
// run after a rare failover is unacceptable, use Spanner, Firestore or PostgreSQL.
package redisledger
