package firestoreledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/firestore"
	"github.com/sethvargo/go-retry"
	"golang.org/x/sync/errgroup"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
	"github.com/runonce/runonce/pkg/ledger/internal/serverclock"
)

// Collection names, after the prefix.
const (
	RunsCollection    = "runs"
	EffectsCollection = "effects"
)

// maxAttempts bounds the attempts of a worker claim that finds its run created and
// deleted under it, and of an effect write's transaction (which reads nothing: the
// client retries it when ABORTED), like the client's own bound on transaction attempts
// (firestore.MaxAttempts, 5 by default). A read-decide-write round whose documents
// changed before its write is retried within the call's deadline instead (retryStale).
const maxAttempts = firestore.DefaultTransactionMaxAttempts

// queryMargin widens the bound of the rescue and sweep queries past the estimated
// server time; the answers are then filtered exactly by the query's read time (see
// ListRescue).
const queryMargin = 5 * time.Second

// clockProbeID is the document Ping and New read to learn the server's time. It never
// exists: run IDs are 64 hex digits.
const clockProbeID = "clock-probe"

// Options configure a Firestore ledger. The zero value is ready to use.
type Options struct {
	// Prefix is prepended to the collection names ("runs", "effects"), so that several
	// ledgers (environments, tests) share one database.
	Prefix string
	// Clock is the local clock, used only to measure time elapsed between round trips
	// (to estimate the server's clock for the ingress claim's pickup deadline and the
	// bounds of queries) — never to judge a lease. Defaults to time.Now.
	Clock func() time.Time
}

// Ledger is a ledger on Firestore. It is safe for concurrent use.
type Ledger struct {
	client             *firestore.Client
	ownsClient         bool
	prefix             string
	runs               *firestore.CollectionRef
	effects            *firestore.CollectionRef
	clock              *serverclock.Clock
	driver.Transitions // the fenced transitions, over store (Acquire is this package's)
	closed             atomic.Bool
	// known are the runs seen to exist: their claims read first.
	known *driver.KnownRuns
	// written are the runs this ledger wrote last: a holder's next write of one skips
	// the read.
	written *written
	// backfilled: the shard backfill is done (BackfillShards); Sweep stops looking.
	backfilled atomic.Bool
}

var _ ledger.Driver = (*Ledger)(nil)

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_.-]{0,100}$`)

// New returns a ledger on client's database. It reads once (a document that does not
// exist) to learn the server's clock, and fails when Firestore cannot be reached. The
// caller keeps ownership of client: Close does not close it.
func New(ctx context.Context, client *firestore.Client, opts *Options) (*Ledger, error) {
	if client == nil {
		return nil, errors.New("firestoreledger: New needs a client")
	}
	if opts == nil {
		opts = &Options{}
	}
	if !validPrefix.MatchString(opts.Prefix) || strings.HasPrefix(opts.Prefix, "__") {
		return nil, fmt.Errorf("firestoreledger: collection prefix %q: want at most 100 letters, digits, '_', '-' or '.', not starting with \"__\"", opts.Prefix)
	}
	local := opts.Clock
	if local == nil {
		local = time.Now
	}
	l := &Ledger{
		client:  client,
		prefix:  opts.Prefix,
		runs:    client.Collection(opts.Prefix + RunsCollection),
		effects: client.Collection(opts.Prefix + EffectsCollection),
		clock:   serverclock.New(local),
		known:   driver.NewKnownRuns(0),
		written: newWritten(defaultWritten),
	}
	l.Transitions = driver.Transitions{Store: store{l}}
	if err := l.Ping(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Prefix returns the collection prefix.
func (l *Ledger) Prefix() string { return l.prefix }

func nowUnsupported(op string, now time.Time) error {
	if now.IsZero() {
		return nil
	}
	return fmt.Errorf("%w: firestoreledger: %s: leases are judged by Firestore's clock", ledger.ErrNowUnsupported, op)
}

// serverNow is the estimated server time, for the one write that cannot read it first
// (the ingress claim) and for query bounds.
func (l *Ledger) serverNow(ctx context.Context) (time.Time, error) {
	if t, ok := l.clock.Now(); ok {
		return t, nil
	}
	if err := l.Ping(ctx); err != nil {
		return time.Time{}, err
	}
	t, _ := l.clock.Now()
	return t, nil
}

// getRun reads a run document: (snapshot, nil run, nil) when it does not exist. The
// snapshot's ReadTime is the server's "now" of a decision made on it.
func (l *Ledger) getRun(ctx context.Context, ref *firestore.DocumentRef) (*firestore.DocumentSnapshot, *ledger.Run, error) {
	sent := l.clock.Local()
	snap, err := ref.Get(ctx)
	if snap != nil {
		l.clock.Observe(sent, l.clock.Local(), snap.ReadTime)
	}
	if err = mapErr(rpcRead, err, "read run %s", ref.ID); err != nil {
		if errors.Is(err, ledger.ErrNotFound) && snap != nil {
			return snap, nil, nil
		}
		return nil, nil, err
	}
	r, err := decodeRun(snap)
	return snap, r, err
}

// Claim implements ledger.Driver. A new run costs one RPC: a Create (exists=false
// precondition). When the Create finds the run there, it reads it (the duplicate path:
// nothing is written). A run this ledger has seen exist (driver.KnownRuns: it created it,
// or a claim found it) is read first, so that a duplicate of it costs one read, no
// write and no transaction; when that read finds it gone (swept), the claim creates it.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	if err := nowUnsupported("claim", p.Now); err != nil {
		return nil, err
	}
	ref := l.runs.Doc(p.RunID)
	if l.known.Has(p.RunID) {
		dup, err := l.readClaim(ctx, ref, p)
		if dup != nil || err != nil {
			return dup, err
		}
		l.known.Forget(p.RunID)
	}
	est, err := l.serverNow(ctx)
	if err != nil {
		return nil, err
	}
	next, res, err := driver.ApplyClaim(nil, p, est)
	if err != nil {
		return nil, err
	}
	// created_at and updated_at are the estimate of the server's time the claim
	// decided at: stored, so that the listing's index sees the new run at once.
	data := encodeNewRun(next)
	for range maxAttempts {
		sent := l.clock.Local()
		wr, err := ref.Create(ctx, data)
		if err == nil {
			l.clock.Observe(sent, l.clock.Local(), wr.UpdateTime)
			l.known.Add(p.RunID)
			return res, nil
		}
		if err = mapErr(rpcCreate, err, "claim run %s", p.RunID); !errors.Is(err, errExists) {
			return nil, err
		}
		// The duplicate path: read the run that is there.
		dup, err := l.readClaim(ctx, ref, p)
		if err != nil {
			return nil, err
		}
		if dup != nil {
			l.known.Add(p.RunID)
			return dup, nil
		}
		// deleted (swept) since: create it again
	}
	return nil, fmt.Errorf("%w: firestoreledger: claim run %s: created and deleted %d times under us", ledger.ErrContended, p.RunID, maxAttempts)
}

// readClaim answers a claim of run ref from the record that is there, with one read:
// nil, nil when there is none.
func (l *Ledger) readClaim(ctx context.Context, ref *firestore.DocumentRef, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	snap, cur, err := l.getRun(ctx, ref)
	if err != nil || cur == nil {
		return nil, err
	}
	_, dup, err := driver.ApplyClaim(cur, p, snap.ReadTime)
	if err != nil {
		return nil, err
	}
	// The transport may have retried our own Create after it had landed.
	dup.Created = cur.Attempt == 0 && cur.AttemptID == p.AttemptID
	return dup, nil
}

// change is what a read-decide-write round writes: a run, or nothing.
type change struct {
	put *ledger.Run
}

// retryStale runs round until it does not report errStale (the documents it read
// changed before its write), with a short jittered pause between rounds, doubling from
// minPause up to maxPause, for as long as ctx's deadline allows (defaultCallTime when it
// has none): a round that could not begin before the deadline is not made, and the
// answer is ledger.ErrContended. A fixed number of rounds would give up on a renewal
// that the holder's own effect writes keep beating (each bumps the run's effect_seq)
// while its lease still leaves seconds; a call given until the lease keeper's
// self-fence point tries until then and no longer.
func retryStale(ctx context.Context, what string, round func(ctx context.Context) error) error {
	ctx, cancel := callContext(ctx)
	defer cancel()
	deadline, _ := ctx.Deadline()
	backoff := retry.WithCappedDuration(maxPause, retry.WithJitterPercent(50, retry.NewExponential(minPause)))
	for n := 1; ; n++ {
		err := round(ctx)
		if !errors.Is(err, errStale) {
			return err
		}
		pause, _ := backoff.Next()
		if !time.Now().Add(pause).Before(deadline) {
			return fmt.Errorf("%w: firestoreledger: %s: the record changed under each of %d attempts, and no time is left for another before the call's deadline", ledger.ErrContended, what, n)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: firestoreledger: %s: the record changed under each of %d attempts: %w", ledger.ErrContended, what, n, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// How long an operation retries a stale read when its context has no deadline of its
// own (a worker's calls all have one), and the pauses between its rounds.
const (
	defaultCallTime = 10 * time.Second
	minPause        = 10 * time.Millisecond
	maxPause        = 100 * time.Millisecond
)

// callContext bounds ctx by defaultCallTime when it has no deadline.
func callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultCallTime)
}

// update reads run id, lets decide choose a change at the server's read time, and
// writes it only if the document is still the one read (an update-time precondition,
// or exists=false for a new document): two RPCs, no transaction, no locks. When the
// document changed in between, it reads and decides again (retryStale).
//
// A holder's write (holderOps) of a run this ledger wrote last skips the read: it is
// decided on the record as written, at the estimate of the server's time, and written
// with that write's update time as its precondition (one RPC). Only a decision that
// writes is taken that way, and only if the precondition holds: a decision that writes
// nothing or fails, or a document written since, is made again on a read.
func (l *Ledger) update(ctx context.Context, op, id string, decide func(cur *ledger.Run, now time.Time) (change, error)) error {
	ref := l.runs.Doc(id)
	return retryStale(ctx, op+" run "+id, func(ctx context.Context) error {
		if holderOps[op] {
			if w, ok := l.written.take(id); ok {
				if done, err := l.updateWritten(ctx, ref, op, w, decide); done {
					return err
				}
			}
		}
		snap, cur, err := l.getRun(ctx, ref)
		if err != nil {
			return err
		}
		if snap.ReadTime.IsZero() {
			return fmt.Errorf("firestoreledger: %s run %s: the read carried no server time", op, id)
		}
		var was map[string]any
		if cur != nil {
			was = encodeRun(cur) // before decide, which may build its run on cur
			if _, err := snap.DataAt(ShardField); err != nil {
				delete(was, ShardField) // an earlier release's document: the write adds its shard
			}
		}
		c, err := decide(cur, driver.Micros(snap.ReadTime))
		if err != nil {
			return err
		}
		switch {
		case c.put != nil && cur == nil:
			wr, err := ref.Create(ctx, encodeNewRun(c.put))
			if err = mapErr(rpcCreate, err, "%s run %s", op, id); errors.Is(err, errExists) {
				return fmt.Errorf("%w: %w", errStale, err)
			}
			if err == nil {
				l.wrote(c.put, wr)
			}
			return err
		case c.put != nil:
			wr, err := ref.Update(ctx, changes(was, c.put), firestore.LastUpdateTime(snap.UpdateTime))
			if err = mapErr(rpcWrite, err, "%s run %s", op, id); err == nil {
				l.wrote(c.put, wr)
			}
			return err
		}
		return nil
	})
}

// holderOps are the transitions whose decision does not depend on the time, only on
// the record (the fence: status, attempt, attempt ID), and whose caller wrote the run
// last when nobody else has: update skips their read for a run this ledger wrote last.
var holderOps = map[string]bool{"renew": true, "complete": true, "release": true, "fail": true}

// updateWritten is update's round on w, the run as this ledger last wrote it. It reports
// done false when update must read instead: the decision writes nothing or fails (it is
// to be made on the document as it stands), or the document was written since w.
func (l *Ledger) updateWritten(ctx context.Context, ref *firestore.DocumentRef, op string, w lastWrite,
	decide func(cur *ledger.Run, now time.Time) (change, error)) (done bool, err error) {
	now, err := l.serverNow(ctx)
	if err != nil {
		return false, nil
	}
	c, err := decide(w.run.Clone(), driver.Micros(now))
	if err != nil || c.put == nil {
		return false, nil
	}
	sent := l.clock.Local()
	wr, err := ref.Update(ctx, changes(encodeRun(w.run), c.put), firestore.LastUpdateTime(w.at))
	if err = mapErr(rpcWrite, err, "%s run %s", op, ref.ID); errors.Is(err, errStale) {
		return false, nil
	}
	if err == nil {
		l.clock.Observe(sent, l.clock.Local(), wr.UpdateTime)
		l.wrote(c.put, wr)
	}
	return true, err
}

// wrote remembers r as written by wr while it is running (a holder's next write of it
// may skip its read), and forgets it otherwise.
func (l *Ledger) wrote(r *ledger.Run, wr *firestore.WriteResult) {
	if r.Status == ledger.StatusRunning && wr != nil && !wr.UpdateTime.IsZero() {
		l.written.put(r, wr.UpdateTime)
		return
	}
	l.written.forget(r.ID)
}

// store is the driver.Store of the ledger: a run's transition is update's read and
// update-time-fenced write, an effect's is effect's.
type store struct{ l *Ledger }

// UpdateRun implements driver.Store.
func (s store) UpdateRun(ctx context.Context, op, id string, override time.Time, decide func(cur *ledger.Run, now time.Time) (*ledger.Run, error)) error {
	if err := nowUnsupported(op, override); err != nil {
		return err
	}
	return s.l.update(ctx, op, id, func(cur *ledger.Run, now time.Time) (change, error) {
		next, err := decide(cur, now)
		return change{put: next}, err
	})
}

// UpdateEffect implements driver.Store.
func (s store) UpdateEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error)) error {
	if err := nowUnsupported(op, override); err != nil {
		return err
	}
	return s.l.effect(ctx, op, runID, name, driver.EffectAlone(decide))
}

// UpdateRunAndEffect implements driver.Store.
func (s store) UpdateRunAndEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)) error {
	if err := nowUnsupported(op, override); err != nil {
		return err
	}
	return s.l.effect(ctx, op, runID, name, decide)
}

// Acquire implements ledger.Driver: a read, then an update-time-fenced write.
func (l *Ledger) Acquire(ctx context.Context, p *ledger.AcquireParams) (*ledger.AcquireResult, error) {
	if err := nowUnsupported("acquire", p.Now); err != nil {
		return nil, err
	}
	var res *ledger.AcquireResult
	err := l.update(ctx, "acquire", p.RunID, func(cur *ledger.Run, now time.Time) (change, error) {
		if cur != nil && cur.Status == ledger.StatusRunning && cur.AttemptID == p.AttemptID {
			// Our own write landed on an earlier round whose answer was lost.
			res = &ledger.AcquireResult{Outcome: ledger.OutcomeAcquired, Run: cur}
			return change{}, nil
		}
		next, r, err := driver.ApplyAcquire(cur, p, now)
		res = r
		return change{put: next}, err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Get implements ledger.Driver.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	if !ledger.ValidRunID(p.RunID) {
		return nil, fmt.Errorf("%w: run %q (not a run ID)", ledger.ErrNotFound, p.RunID)
	}
	_, r, err := l.getRun(ctx, l.runs.Doc(p.RunID))
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	return r, nil
}

// effect runs an effect write, and the run's write with it when decide returns one.
// The effect lives in another document than the run, so it reads both (one
// BatchGetDocuments, no locks), decides at the read's time, and commits both writes
// atomically, each with a precondition: the effect's (exists=false, or its update time
// as read) and the run's update time as read, checked by the run's own write or, when
// decide writes no run, by a write that only bumps the run's effect_seq counter. So the
// effect is written only while the run still carries the caller's fence, and the
// holder's renewals never wait on a lock. A transaction is the client's only atomic
// multi-document write (WriteBatch is deprecated); it holds no read, so it costs
// BeginTransaction and Commit.
func (l *Ledger) effect(ctx context.Context, op, runID, name string, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)) error {
	runRef := l.runs.Doc(runID)
	effRef := l.effects.Doc(ledger.EffectKey(runID, name))
	what := fmt.Sprintf("%s %q of run %s", op, name, runID)
	return retryStale(ctx, what, func(ctx context.Context) error {
		sent := l.clock.Local()
		snaps, err := l.client.GetAll(ctx, []*firestore.DocumentRef{runRef, effRef})
		if err = mapErr(rpcRead, err, "%s: read", what); err != nil {
			return err
		}
		runSnap, effSnap := snaps[0], snaps[1]
		if runSnap.ReadTime.IsZero() {
			return fmt.Errorf("firestoreledger: %s: the read carried no server time", what)
		}
		l.clock.Observe(sent, l.clock.Local(), runSnap.ReadTime)
		run, err := decodeRun(runSnap)
		if err != nil {
			return err
		}
		cur, err := decodeEffect(effSnap)
		if err != nil {
			return err
		}
		nextRun, next, err := decide(run, cur, driver.Micros(runSnap.ReadTime))
		if err != nil || (nextRun == nil && next == nil) {
			return err
		}
		if run == nil {
			return fmt.Errorf("firestoreledger: %s: no rule writes over an absent run here", what)
		}
		// The run's write is the effect's fence too: without a change of its own, it
		// bumps effect_seq. (The rules copy the records they are given, never modify
		// them: run is still the document as read.)
		fence := []firestore.Update{{Path: fieldEffectSeq, Value: firestore.Increment(1)}}
		if nextRun != nil {
			fence = changes(encodeRun(run), nextRun)
		}
		l.written.forget(runID)
		err = l.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
			if err := tx.Update(runRef, fence, firestore.LastUpdateTime(runSnap.UpdateTime)); err != nil {
				return err
			}
			switch {
			case next == nil:
				return nil
			case cur == nil:
				return tx.Create(effRef, encodeEffect(next))
			}
			return tx.Update(effRef, updates(encodeEffect(next)), firestore.LastUpdateTime(effSnap.UpdateTime))
		}, firestore.MaxAttempts(maxAttempts))
		if err = mapErr(rpcWrite, err, "%s: write", what); errors.Is(err, errExists) {
			return fmt.Errorf("%w: %w", errStale, err)
		}
		return err
	})
}

// GetEffect implements ledger.Driver.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	ref := l.effects.Doc(ledger.EffectKey(p.RunID, p.Name))
	snap, err := ref.Get(ctx)
	if err = mapErr(rpcRead, err, "read effect %q of run %s", p.Name, p.RunID); err != nil {
		return nil, err
	}
	return decodeEffect(snap)
}

// RescueQuery is the query ListRescue runs on each shard: live runs of the shard past
// their deadline, oldest deadline first. It needs the composite index (shard ASC, status
// ASC, deadline ASC) on the runs collection (Indexes).
func (l *Ledger) RescueQuery(shard int64, before time.Time, limit int) firestore.Query {
	return l.runs.
		Where(ShardField, "==", shard).
		Where(fieldStatus, "in", []string{string(ledger.StatusQueued), string(ledger.StatusRunning)}).
		Where(fieldDeadline, "<", before).
		OrderBy(fieldDeadline, firestore.Asc).
		Limit(limit)
}

// ListRescue implements ledger.Driver: RescueQuery on every shard at once, the answers
// merged by deadline and cut to the limit. The queries' bound is the estimated server
// time plus a margin; the answer is then filtered by each query's read time, the
// server's clock, so that a run is listed only if it is past its deadline by
// Firestore's clock.
func (l *Ledger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	if err := nowUnsupported("list rescue", p.Now); err != nil {
		return nil, err
	}
	est, err := l.serverNow(ctx)
	if err != nil {
		return nil, err
	}
	limit := cmp.Or(p.Limit, 100)
	snaps, err := fanOut(ctx, func(shard int64) firestore.Query { return l.RescueQuery(shard, est.Add(queryMargin), limit) })
	if err = mapErr(rpcQuery, err, "list runs to rescue"); err != nil {
		return nil, err
	}
	var out []*ledger.Run
	for _, snap := range firstN(snaps, limit, byTime(fieldDeadline)) {
		r, err := decodeRun(snap)
		if err != nil {
			return nil, err
		}
		if driver.NeedsRescue(r, driver.Micros(snap.ReadTime)) {
			out = append(out, r)
		}
	}
	return out, nil
}

// Sweep implements ledger.Driver: runs, then effects whose run is gone, past expire_at
// by the server's clock, each deleted only if unchanged since it was read. A listed
// effect whose run still exists is kept and its expire_at moved to the run's, so that
// the next sweeps do not list it again until then: an effect must outlive its run, or a
// later attempt would redo it. With a TTL policy on the runs' expire_at, Firestore
// deletes runs too (within about a day of expiry); the effects need this sweep, and so
// must have no TTL policy of their own. Then, while it is not done, it advances the
// shard backfill (BackfillShards) for a few seconds.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	if err := nowUnsupported("sweep", p.Now); err != nil {
		return 0, err
	}
	est, err := l.serverNow(ctx)
	if err != nil {
		return 0, err
	}
	limit := cmp.Or(p.Limit, 500)
	n, err := l.sweep(ctx, l.runs, est.Add(queryMargin), limit, nil)
	if err != nil || n >= limit {
		return n, err
	}
	m, err := l.sweep(ctx, l.effects, est.Add(queryMargin), limit-n, l.keepEffectsOfLiveRuns)
	if err != nil {
		return n + m, err
	}
	return n + m, l.backfillStep(ctx)
}

// keepEffectsOfLiveRuns reads the runs of the listed effects and, for each effect whose
// run exists, moves its expire_at to the run's (unless the effect changed since it was
// listed); it returns the effects whose run is gone.
func (l *Ledger) keepEffectsOfLiveRuns(ctx context.Context, snaps []*firestore.DocumentSnapshot) ([]*firestore.DocumentSnapshot, error) {
	refs := make([]*firestore.DocumentRef, len(snaps))
	for i, s := range snaps {
		runID, _ := s.Data()["run_id"].(string)
		if !ledger.ValidRunID(runID) {
			return nil, fmt.Errorf("firestoreledger: sweep: effect %s has no valid run_id", s.Ref.ID)
		}
		refs[i] = l.runs.Doc(runID)
	}
	runs, err := l.client.GetAll(ctx, refs)
	if err = mapErr(rpcRead, err, "sweep: read the runs of %d expired effects", len(snaps)); err != nil {
		return nil, err
	}
	var orphans []*firestore.DocumentSnapshot
	for i, s := range snaps {
		if !runs[i].Exists() {
			orphans = append(orphans, s)
			continue
		}
		exp, _ := runs[i].Data()[fieldExpireAt].(time.Time)
		if !exp.After(s.ReadTime) {
			continue // the run is due for deletion itself: keep the effect for now
		}
		_, err := s.Ref.Update(ctx, []firestore.Update{{Path: fieldExpireAt, Value: exp}}, firestore.LastUpdateTime(s.UpdateTime))
		if err = mapErr(rpcWrite, err, "sweep: keep effect %s of live run %s", s.Ref.ID, runs[i].Ref.ID); err != nil && !errors.Is(err, errStale) {
			return nil, err
		}
	}
	return orphans, nil
}

// SweepQuery is the query Sweep runs on each shard of coll (the runs or the effects):
// documents of the shard past before, oldest expiry first, their expiry and run ID
// alone. It needs the composite index (shard ASC, expire_at ASC) on each collection
// (Indexes).
func SweepQuery(coll *firestore.CollectionRef, shard int64, before time.Time, limit int) firestore.Query {
	return coll.Select(fieldExpireAt, "run_id").Where(ShardField, "==", shard).Where(fieldExpireAt, "<", before).
		OrderBy(fieldExpireAt, firestore.Asc).Limit(limit)
}

// sweep deletes up to limit documents of coll past before (SweepQuery on every shard,
// the answers merged by expiry: the oldest limit of them; the queries read each
// document's expiry and run ID alone, so a backlog of Shards × limit costs reads, not
// memory); keep, when set, filters the listed documents down to those that may go.
func (l *Ledger) sweep(ctx context.Context, coll *firestore.CollectionRef, before time.Time, limit int,
	keep func(context.Context, []*firestore.DocumentSnapshot) ([]*firestore.DocumentSnapshot, error),
) (int, error) {
	snaps, err := fanOut(ctx, func(shard int64) firestore.Query { return SweepQuery(coll, shard, before, limit) })
	if err = mapErr(rpcQuery, err, "list expired %s", coll.ID); err != nil {
		return 0, err
	}
	snaps = firstN(snaps, limit, byTime(fieldExpireAt))
	var expired []*firestore.DocumentSnapshot
	for _, s := range snaps {
		if exp, ok := s.Data()[fieldExpireAt].(time.Time); ok && exp.Before(s.ReadTime) {
			expired = append(expired, s)
		}
	}
	if keep != nil && len(expired) > 0 {
		if expired, err = keep(ctx, expired); err != nil {
			return 0, err
		}
	}
	var deleted atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, s := range expired {
		g.Go(func() error {
			_, err := s.Ref.Delete(gctx, firestore.LastUpdateTime(s.UpdateTime))
			switch err = mapErr(rpcWrite, err, "delete expired %s/%s", coll.ID, s.Ref.ID); {
			case err == nil:
				deleted.Add(1)
			case errors.Is(err, errStale):
				// Rewritten (its expiry moved) or deleted since it was listed.
			default:
				return err
			}
			return nil
		})
	}
	err = g.Wait()
	return int(deleted.Load()), err
}

// Ping implements ledger.Driver: it reads a document that does not exist, which also
// tells the ledger the server's time.
func (l *Ledger) Ping(ctx context.Context) error {
	_, _, err := l.getRun(ctx, l.runs.Doc(clockProbeID))
	if err != nil {
		return fmt.Errorf("firestoreledger: ping: %w", err)
	}
	return nil
}

// Close implements ledger.Driver. It closes the client only when the ledger opened it
// (Open by URL).
func (l *Ledger) Close() error {
	if !l.ownsClient || l.closed.Swap(true) {
		return nil
	}
	if err := l.client.Close(); err != nil {
		return fmt.Errorf("firestoreledger: close: %w", err)
	}
	return nil
}
