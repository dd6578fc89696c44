package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "modernc.org/sqlite"
	sqlite3lib "modernc.org/sqlite/lib"

	"github.com/runonce/runonce/pkg/ledger"
	"github.com/runonce/runonce/pkg/ledger/driver"
)

// Scheme is the URL scheme of this backend.
const Scheme = "sqlite"

func init() {
	ledger.Register(Scheme, ledger.OpenerFunc(openURL))
}

//go:embed migrations/*.sql
var migrations embed.FS

// Options configure Open. The zero value is ready to use.
type Options struct {
	// BusyTimeout bounds how long a write waits for another process's. Defaults to 10s.
	BusyTimeout time.Duration
	// Clock replaces the host clock, for tests. Defaults to time.Now.
	Clock func() time.Time
	// RelaxedSync sets synchronous=NORMAL instead of FULL: about twice a lone writer's rate
	// (little gain once group commit batches many writes),
	// but a power loss or an OS crash may lose the last commits (a completed run may
	// come back queued, and a claim answered 202 may be gone). A process crash loses
	// nothing either way. URL: ?synchronous=normal.
	RelaxedSync bool
}

// Ledger is a SQLite-backed ledger.
type Ledger struct {
	driver.Transitions // the fenced transitions, over store
	db                 *sql.DB
	path               string
	clock              func() time.Time
	// wmu serialises this process's write transactions: SQLite has one writer at a
	// time, and queueing here is cheaper than spinning on the busy handler. Its holder
	// commits every write queued meanwhile in its one transaction (group commit).
	wmu sync.Mutex
	qmu sync.Mutex // guards queued and leading
	// queued are the writes waiting for the next group commit, oldest first.
	queued []*txOp
	// leading is set while a writer commits the queue or is about to: it hands the
	// role to the oldest queued write when it is done.
	leading bool
	stmts   sync.Map // query text -> *sql.Stmt, prepared once (see prepared)
	// commits counts the write transactions committed (or rolled back): fewer than
	// the writes when group commit batches them. Tests read it.
	commits atomic.Int64
	// reads counts the reads made outside a write transaction (a duplicate claim's, a
	// Get's): with commits, what docs/capacity.md's tests count.
	reads atomic.Int64
}

// txOp is one caller's write, queued for the next group commit.
type txOp struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *sql.Tx) error
	err  error
	done chan struct{} // closed once err is set
	lead chan struct{} // signalled when this write is to commit the queue
}

var _ ledger.Driver = (*Ledger)(nil)

func openURL(ctx context.Context, u *url.URL) (ledger.Driver, error) {
	if err := driver.CheckQuery(u, "busy_timeout", "synchronous"); err != nil {
		return nil, err
	}
	path := u.Path
	if u.Opaque != "" {
		path = u.Opaque
	}
	if u.Host != "" {
		return nil, fmt.Errorf("sqlite URL has a host %q: write sqlite:///absolute/path.db or sqlite:relative/path.db", u.Host)
	}
	if path == "" {
		return nil, errors.New("sqlite URL names no file: write sqlite:///absolute/path.db or sqlite:relative/path.db")
	}
	var opts Options
	if v := u.Query().Get("busy_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("busy_timeout=%q: %w", v, err)
		}
		opts.BusyTimeout = d
	}
	switch v := u.Query().Get("synchronous"); v {
	case "", "full":
	case "normal":
		opts.RelaxedSync = true
	default:
		return nil, fmt.Errorf("synchronous=%q: want full (the default: a commit survives a power loss) or normal", v)
	}
	return Open(ctx, path, &opts)
}

// Open opens (creating if needed) the ledger file at path and migrates its schema.
func Open(ctx context.Context, path string, opts *Options) (*Ledger, error) {
	if opts == nil {
		opts = &Options{}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: path %q: %w", path, err)
	}
	busy := cmp.Or(opts.BusyTimeout, 10*time.Second)
	// FULL: in WAL mode, NORMAL syncs only at checkpoints, so a commit acknowledged
	// (and a message acked after it) could be lost with the machine's power.
	sync := "synchronous(FULL)"
	if opts.RelaxedSync {
		sync = "synchronous(NORMAL)"
	}
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()),
			"journal_mode(WAL)",
			sync,
		},
		"_txlock": {"immediate"},
	}.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(0)
	l := &Ledger{db: db, path: abs, clock: opts.Clock}
	l.Transitions = driver.Transitions{Store: store{l}}
	if l.clock == nil {
		l.clock = time.Now
	}
	if err := l.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return l, nil
}

// Path returns the absolute path of the ledger's file.
func (l *Ledger) Path() string { return l.path }

// migrate applies the embedded migrations the file lacks, in one immediate transaction.
func (l *Ledger) migrate(ctx context.Context) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	return l.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var version int
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
			return err
		}
		if version > len(names) {
			return fmt.Errorf("sqlite: %s has schema version %d, newer than this binary's %d", l.path, version, len(names))
		}
		for i := version; i < len(names); i++ {
			body, err := migrations.ReadFile(names[i])
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("sqlite: migration %s: %w", names[i], err)
			}
		}
		_, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(names)))
		return err
	})
}

// tx runs fn in an immediate transaction, serialised with this process's other writes,
// and returns once that transaction has committed (or fn failed, its writes undone).
//
// Group commit: the writes that queue while one transaction commits are run together
// in the next, each under its own savepoint, in the order they queued, and committed
// with one fsync. Each caller still gets its own answer: an fn that fails is rolled back
// to its savepoint alone; a commit that fails fails every write of the batch. A write is
// answered only after its batch is durable, so the batch is a valid serial order of its
// writes. fn gets a context that is not cancelled (a statement interrupted inside a
// transaction would roll back the whole batch); a write whose caller's context ended
// before its turn is not run.
//
// One write at a time leads: it takes the write lock and commits the whole queue, its
// own write included, then hands the lead to the oldest write queued meanwhile. The
// others wait for their answer alone, so a batch's writers are woken together, not one
// after the other through the lock.
func (l *Ledger) tx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	op := &txOp{ctx: ctx, fn: fn, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	l.qmu.Lock()
	l.queued = append(l.queued, op)
	if !l.leading {
		l.leading = true
		op.lead <- struct{}{}
	}
	l.qmu.Unlock()
	select {
	case <-op.done: // a leader's batch had it
		return op.err
	case <-op.lead:
	}
	l.wmu.Lock()
	l.qmu.Lock()
	batch := l.queued // op is in it: only the leader takes the queue
	l.queued = nil
	l.qmu.Unlock()
	l.commitBatch(batch)
	l.wmu.Unlock()
	l.qmu.Lock()
	if len(l.queued) > 0 {
		l.queued[0].lead <- struct{}{}
	} else {
		l.leading = false
	}
	l.qmu.Unlock()
	return op.err
}

// commitBatch runs batch in one transaction and answers each write. The caller holds wmu.
func (l *Ledger) commitBatch(batch []*txOp) {
	defer func() {
		for _, op := range batch {
			close(op.done)
		}
	}()
	fail := func(err error) {
		for _, op := range batch {
			if op.err == nil {
				op.err = interpret(err)
			}
		}
	}
	ctx := context.Background() // busy_timeout bounds the wait for another process's writer
	l.commits.Add(1)
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		fail(err)
		return
	}
	ran := 0
	for _, op := range batch {
		if err := op.ctx.Err(); err != nil {
			op.err = err
			continue
		}
		if len(batch) == 1 {
			if op.err = interpret(op.fn(context.WithoutCancel(op.ctx), tx)); op.err != nil {
				tx.Rollback()
				return
			}
			ran++
			break
		}
		if _, err := l.q(tx).ExecContext(ctx, "SAVEPOINT w"); err != nil {
			tx.Rollback()
			fail(err)
			return
		}
		end := []string{"RELEASE w"}
		if op.err = interpret(op.fn(context.WithoutCancel(op.ctx), tx)); op.err != nil {
			end = []string{"ROLLBACK TO w", "RELEASE w"}
		} else {
			ran++
		}
		for _, stmt := range end {
			if _, err := l.q(tx).ExecContext(ctx, stmt); err != nil {
				tx.Rollback()
				fail(err)
				return
			}
		}
	}
	if ran == 0 {
		tx.Rollback()
		return
	}
	if err := tx.Commit(); err != nil {
		fail(err)
	}
}

// interpret maps SQLite's errors to the ledger's sentinels: the one place that does.
func interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", ledger.ErrNotFound, err)
	}
	var se *sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3lib.SQLITE_BUSY, sqlite3lib.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", ledger.ErrContended, err)
		case sqlite3lib.SQLITE_IOERR, sqlite3lib.SQLITE_CANTOPEN, sqlite3lib.SQLITE_FULL, sqlite3lib.SQLITE_READONLY:
			return fmt.Errorf("%w: %w", ledger.ErrUnavailable, err)
		}
	}
	return err
}

func (l *Ledger) now(override time.Time) time.Time {
	if !override.IsZero() {
		return override
	}
	return l.clock()
}

const runColumns = `run_id, namespace, job, key, schedule_time, status, attempt, attempt_id, deadline,
	not_before, payload_hash, payload, attempts_made, last_error, created_at, updated_at, completed_at, expire_at, history, result, progress`

// listColumns are runColumns without the payload and the history, which List leaves out.
const listColumns = `run_id, namespace, job, key, schedule_time, status, attempt, attempt_id, deadline,
	not_before, payload_hash, x'', attempts_made, last_error, created_at, updated_at, completed_at, expire_at, '', result, progress`

type scanner interface{ Scan(...any) error }

func scanRun(s scanner) (*ledger.Run, error) {
	var r ledger.Run
	var sched, deadline, notBefore, created, updated, completed, expire int64
	var status, history string
	if err := s.Scan(&r.ID, &r.Namespace, &r.Job, &r.Key, &sched, &status, &r.Attempt, &r.AttemptID, &deadline,
		&notBefore, &r.PayloadHash, &r.Payload, &r.AttemptsMade, &r.LastError, &created, &updated, &completed, &expire, &history,
		&r.Result, &r.Progress); err != nil {
		return nil, err
	}
	if history != "" {
		if err := json.Unmarshal([]byte(history), &r.History); err != nil {
			return nil, fmt.Errorf("run %s: history: %w", r.ID, err)
		}
	}
	if len(r.Result) == 0 {
		r.Result = nil
	}
	if len(r.Progress) == 0 {
		r.Progress = nil
	}
	r.Status = ledger.Status(status)
	r.ScheduleTime, r.Deadline, r.NotBefore = fromMicros(sched), fromMicros(deadline), fromMicros(notBefore)
	r.CreatedAt, r.UpdatedAt, r.CompletedAt, r.ExpireAt = fromMicros(created), fromMicros(updated), fromMicros(completed), fromMicros(expire)
	return &r, nil
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// querier is what the statement helpers run on: the database or a transaction, through
// prepared.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// prepared runs the ledger's few statements prepared once and reused (parsing each
// statement again was a seventh of a write's CPU), on tx or, when tx is nil, on the
// database. database/sql keeps each statement prepared on every connection it used.
type prepared struct {
	l  *Ledger
	tx *sql.Tx
}

func (l *Ledger) q(tx *sql.Tx) prepared { return prepared{l, tx} }

// stmt returns query prepared for p's transaction or database; nil when it cannot be
// prepared (the caller runs the text, which reports the error).
func (p prepared) stmt(ctx context.Context, query string) *sql.Stmt {
	v, ok := p.l.stmts.Load(query)
	if !ok {
		st, err := p.l.db.PrepareContext(ctx, query)
		if err != nil {
			return nil
		}
		if v, ok = p.l.stmts.LoadOrStore(query, st); ok {
			st.Close()
		}
	}
	st := v.(*sql.Stmt)
	if p.tx != nil {
		return p.tx.StmtContext(ctx, st)
	}
	return st
}

func (p prepared) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if p.tx == nil {
		p.l.reads.Add(1)
	}
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	if p.tx != nil {
		return p.tx.QueryRowContext(ctx, query, args...)
	}
	return p.l.db.QueryRowContext(ctx, query, args...)
}

func (p prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	if p.tx != nil {
		return p.tx.ExecContext(ctx, query, args...)
	}
	return p.l.db.ExecContext(ctx, query, args...)
}

// getRun reads a run; nil when absent.
func getRun(ctx context.Context, q querier, id string) (*ledger.Run, error) {
	r, err := scanRun(q.QueryRowContext(ctx, "SELECT "+runColumns+" FROM runs WHERE run_id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// upsertRun writes a run: a new one is inserted; an existing one is updated in place,
// every column but its identity's namespace and job and its creation time, which never
// change for a run ID. An update in place leaves the row and the indexes on those
// columns (runs_created, runs_job_created, runs_namespace_created) alone; INSERT OR
// REPLACE deleted and reinserted the row and every index entry on each transition.
var upsertRun = "INSERT INTO runs (" + runColumns + ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) " +
	"ON CONFLICT (run_id) DO UPDATE SET key = excluded.key, schedule_time = excluded.schedule_time, " +
	"status = excluded.status, attempt = excluded.attempt, attempt_id = excluded.attempt_id, deadline = excluded.deadline, " +
	"not_before = excluded.not_before, payload_hash = excluded.payload_hash, payload = excluded.payload, " +
	"attempts_made = excluded.attempts_made, last_error = excluded.last_error, updated_at = excluded.updated_at, " +
	"completed_at = excluded.completed_at, expire_at = excluded.expire_at, history = excluded.history, " +
	"result = excluded.result, progress = excluded.progress"

func putRun(ctx context.Context, tx querier, r *ledger.Run) error {
	if r == nil {
		return nil
	}
	history := ""
	if len(r.History) > 0 {
		b, err := json.Marshal(r.History)
		if err != nil {
			return err
		}
		history = string(b)
	}
	_, err := tx.ExecContext(ctx, upsertRun,
		r.ID, r.Namespace, r.Job, r.Key, micros(r.ScheduleTime), string(r.Status), r.Attempt, r.AttemptID, micros(r.Deadline),
		micros(r.NotBefore), r.PayloadHash, nonNil(r.Payload), r.AttemptsMade, r.LastError, micros(r.CreatedAt), micros(r.UpdatedAt),
		micros(r.CompletedAt), micros(r.ExpireAt), history, nullBytes(r.Result), nullBytes(r.Progress))
	return err
}

// nullBytes stores an empty result as NULL.
func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

const effectColumns = `effect_key, run_id, name, status, attempt, ref, created_at, updated_at, done_at, expire_at`

func getEffect(ctx context.Context, q querier, key string) (*ledger.Effect, error) {
	var e ledger.Effect
	var status string
	var created, updated, done, expire int64
	err := q.QueryRowContext(ctx, "SELECT "+effectColumns+" FROM effects WHERE effect_key = ?", key).Scan(
		&e.Key, &e.RunID, &e.Name, &status, &e.Attempt, &e.Ref, &created, &updated, &done, &expire)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e.Status = ledger.EffectStatus(status)
	e.CreatedAt, e.UpdatedAt, e.DoneAt, e.ExpireAt = fromMicros(created), fromMicros(updated), fromMicros(done), fromMicros(expire)
	return &e, nil
}

func putEffect(ctx context.Context, tx querier, e *ledger.Effect) error {
	if e == nil {
		return nil
	}
	_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO effects ("+effectColumns+") VALUES (?,?,?,?,?,?,?,?,?,?)",
		e.Key, e.RunID, e.Name, string(e.Status), e.Attempt, e.Ref, micros(e.CreatedAt), micros(e.UpdatedAt), micros(e.DoneAt), micros(e.ExpireAt))
	return err
}

// store is the driver.Store of the ledger: each update is one write transaction.
type store struct{ l *Ledger }

// UpdateRun implements driver.Store: it reads the run, asks decide for the record to
// write (nil: nothing), and writes it, in one transaction.
func (s store) UpdateRun(ctx context.Context, op, id string, override time.Time, decide func(cur *ledger.Run, now time.Time) (*ledger.Run, error)) error {
	return wrap(op, id, s.l.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		cur, err := getRun(ctx, s.l.q(tx), id)
		if err != nil {
			return err
		}
		next, err := decide(cur, s.l.now(override))
		if err != nil {
			return err
		}
		return putRun(ctx, s.l.q(tx), next)
	}))
}

// UpdateEffect implements driver.Store: UpdateRunAndEffect writing the effect alone.
func (s store) UpdateEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error)) error {
	return s.UpdateRunAndEffect(ctx, op, runID, name, override, driver.EffectAlone(decide))
}

// UpdateRunAndEffect implements driver.Store: it reads a run and one of its effects,
// applies a transition and writes both, in one transaction.
func (s store) UpdateRunAndEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Run, *ledger.Effect, error)) error {
	return wrap(op, runID, s.l.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		run, err := getRun(ctx, s.l.q(tx), runID)
		if err != nil {
			return err
		}
		cur, err := getEffect(ctx, s.l.q(tx), ledger.EffectKey(runID, name))
		if err != nil {
			return err
		}
		nextRun, next, err := decide(run, cur, s.l.now(override))
		if err != nil {
			return err
		}
		if err := putRun(ctx, s.l.q(tx), nextRun); err != nil {
			return err
		}
		return putEffect(ctx, s.l.q(tx), next)
	}))
}

// Claim implements ledger.Driver. A duplicate is one read, outside the write lock: it
// neither waits for the writers (and their commits' fsyncs) nor makes them wait. Only a
// run the read did not find takes the write transaction, which reads again under the lock.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	cur, err := getRun(ctx, l.q(nil), p.RunID)
	if err != nil {
		return nil, wrap("claim", p.RunID, interpret(err))
	}
	if cur != nil {
		_, res, err := driver.ApplyClaim(cur, p, l.now(p.Now))
		return res, err
	}
	return l.claimLocked(ctx, p)
}

// claimLocked is the write path of Claim, for a run the read did not find: it reads
// again under the write lock.
func (l *Ledger) claimLocked(ctx context.Context, p *ledger.ClaimParams) (res *ledger.ClaimResult, err error) {
	err = store{l}.UpdateRun(ctx, "claim", p.RunID, p.Now, func(cur *ledger.Run, now time.Time) (next *ledger.Run, err error) {
		next, res, err = driver.ApplyClaim(cur, p, now)
		return next, err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Get implements ledger.Driver.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	r, err := getRun(ctx, l.q(nil), p.RunID)
	if err != nil {
		return nil, wrap("get", p.RunID, interpret(err))
	}
	if r == nil {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	return r, nil
}

// GetEffect implements ledger.Driver.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	e, err := getEffect(ctx, l.q(nil), ledger.EffectKey(p.RunID, p.Name))
	if err != nil {
		return nil, wrap("get effect", p.RunID, interpret(err))
	}
	if e == nil {
		return nil, fmt.Errorf("%w: effect %q of run %s", ledger.ErrNotFound, p.Name, p.RunID)
	}
	return e, nil
}

// ListRescue implements ledger.Driver.
func (l *Ledger) ListRescue(ctx context.Context, p *ledger.ListRescueParams) ([]*ledger.Run, error) {
	now := driver.Micros(l.now(p.Now))
	rows, err := l.db.QueryContext(ctx, "SELECT "+runColumns+` FROM runs
		WHERE status IN ('queued', 'running') AND deadline < ? ORDER BY deadline LIMIT ?`,
		micros(now), cmp.Or(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("sqlite: list rescue: %w", interpret(err))
	}
	defer rows.Close()
	var out []*ledger.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list rescue: %w", err)
		}
		out = append(out, r)
	}
	return out, interpret(rows.Err())
}

// Sweep implements ledger.Driver. It deletes in one bounded transaction.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	now := micros(driver.Micros(l.now(p.Now)))
	limit := cmp.Or(p.Limit, 500)
	n := 0
	err := l.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		n = 0
		// Runs first; then effects whose run is gone (this sweep's or an earlier one's):
		// a live run's effects are kept whatever their own expire_at says, or a later
		// attempt would redo them.
		for _, stmt := range []string{
			"DELETE FROM runs WHERE rowid IN (SELECT rowid FROM runs WHERE expire_at < ? ORDER BY expire_at LIMIT ?)",
			"DELETE FROM effects WHERE rowid IN (SELECT e.rowid FROM effects e WHERE e.expire_at < ? " +
				"AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = e.run_id) ORDER BY e.expire_at LIMIT ?)",
		} {
			res, err := tx.ExecContext(ctx, stmt, now, limit-n)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: sweep: %w", err)
	}
	return n, nil
}

// Ping implements ledger.Driver.
func (l *Ledger) Ping(ctx context.Context) error {
	if err := l.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping %s: %w", l.path, interpret(err))
	}
	return nil
}

// Close implements ledger.Driver.
func (l *Ledger) Close() error {
	l.stmts.Range(func(_, v any) bool {
		v.(*sql.Stmt).Close()
		return true
	})
	return l.db.Close()
}

func wrap(op, id string, err error) error {
	if err == nil {
		return nil
	}
	if strings.HasPrefix(err.Error(), "ledger: ") {
		return err // the state machine's own answer names the run already
	}
	return fmt.Errorf("sqlite: %s %s: %w", op, id, err)
}

// nonNil stores an absent payload as an empty one (the column is NOT NULL).
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
