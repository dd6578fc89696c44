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
	// RelaxedSync sets synchronous=NORMAL instead of FULL: about twice the write rate,
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
	// time, and queueing here is cheaper than spinning on the busy handler.
	wmu sync.Mutex
}

var _ ledger.Ledger = (*Ledger)(nil)

func openURL(ctx context.Context, u *url.URL) (ledger.Ledger, error) {
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
	return l.tx(ctx, func(tx *sql.Tx) error {
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

// tx runs fn in one immediate transaction, serialised with this process's other writes.
func (l *Ledger) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return interpret(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return interpret(err)
	}
	return interpret(tx.Commit())
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

// getRun reads a run inside tx; nil when absent.
func getRun(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (*ledger.Run, error) {
	r, err := scanRun(q.QueryRowContext(ctx, "SELECT "+runColumns+" FROM runs WHERE run_id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

func putRun(ctx context.Context, tx *sql.Tx, r *ledger.Run) error {
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
	_, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO runs ("+runColumns+") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
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

func getEffect(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, key string) (*ledger.Effect, error) {
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

func putEffect(ctx context.Context, tx *sql.Tx, e *ledger.Effect) error {
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
	return wrap(op, id, s.l.tx(ctx, func(tx *sql.Tx) error {
		cur, err := getRun(ctx, tx, id)
		if err != nil {
			return err
		}
		next, err := decide(cur, s.l.now(override))
		if err != nil {
			return err
		}
		return putRun(ctx, tx, next)
	}))
}

// UpdateEffect implements driver.Store: it reads a run and one of its effects, applies
// a transition and writes the effect, in one transaction.
func (s store) UpdateEffect(ctx context.Context, op, runID, name string, override time.Time, decide func(run *ledger.Run, cur *ledger.Effect, now time.Time) (*ledger.Effect, error)) error {
	return wrap(op, runID, s.l.tx(ctx, func(tx *sql.Tx) error {
		run, err := getRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		cur, err := getEffect(ctx, tx, ledger.EffectKey(runID, name))
		if err != nil {
			return err
		}
		next, err := decide(run, cur, s.l.now(override))
		if err != nil {
			return err
		}
		return putEffect(ctx, tx, next)
	}))
}

// Claim implements ledger.Ledger. A duplicate is one read, outside the write lock: it
// neither waits for the writers (and their commits' fsyncs) nor makes them wait. Only a
// run the read did not find takes the write transaction, which reads again under the lock.
func (l *Ledger) Claim(ctx context.Context, p *ledger.ClaimParams) (*ledger.ClaimResult, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	cur, err := getRun(ctx, l.db, p.RunID)
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

// Get implements ledger.Ledger.
func (l *Ledger) Get(ctx context.Context, p *ledger.GetParams) (*ledger.Run, error) {
	r, err := getRun(ctx, l.db, p.RunID)
	if err != nil {
		return nil, wrap("get", p.RunID, interpret(err))
	}
	if r == nil {
		return nil, fmt.Errorf("%w: run %s", ledger.ErrNotFound, p.RunID)
	}
	return r, nil
}

// GetEffect implements ledger.Ledger.
func (l *Ledger) GetEffect(ctx context.Context, p *ledger.GetEffectParams) (*ledger.Effect, error) {
	e, err := getEffect(ctx, l.db, ledger.EffectKey(p.RunID, p.Name))
	if err != nil {
		return nil, wrap("get effect", p.RunID, interpret(err))
	}
	if e == nil {
		return nil, fmt.Errorf("%w: effect %q of run %s", ledger.ErrNotFound, p.Name, p.RunID)
	}
	return e, nil
}

// ListRescue implements ledger.Ledger.
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

// Sweep implements ledger.Ledger. It deletes in one bounded transaction.
func (l *Ledger) Sweep(ctx context.Context, p *ledger.SweepParams) (int, error) {
	now := micros(driver.Micros(l.now(p.Now)))
	limit := cmp.Or(p.Limit, 500)
	n := 0
	err := l.tx(ctx, func(tx *sql.Tx) error {
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

// Ping implements ledger.Ledger.
func (l *Ledger) Ping(ctx context.Context) error {
	if err := l.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping %s: %w", l.path, interpret(err))
	}
	return nil
}

// Close implements ledger.Ledger.
func (l *Ledger) Close() error { return l.db.Close() }

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
