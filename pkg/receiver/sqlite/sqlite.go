// Package sqlite is a receiver.Store in a SQLite file (modernc.org/sqlite, pure Go): the
// store of a downstream service on one machine, or of one that already keeps its data
// in SQLite (the tables are named receiver_*, so the file may be the service's own).
// Several processes on the machine may share the file.
//
// Every write is an immediate transaction that syncs before it returns
// (synchronous=FULL, WAL), so a stored response survives a power loss; a request
// answered from what is stored (a replay, a key in flight, a refusal) reads without
// writing. Leases and expiry are judged by the host's clock, the one every process of
// the machine shares. Nothing deletes an expired record by itself: Receiver.Sweep does.
//
// Open it by URL with receiver.Open("sqlite:///var/lib/svc/receiver.db") or
// "sqlite:relative/path.db", adding ?synchronous=normal to trade the last commits on a
// power loss for cheaper writes.
package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/driver"
)

// Scheme is the URL scheme of this store.
const Scheme = "sqlite"

func init() { receiver.Register(Scheme, receiver.OpenerFunc(openURL)) }

func openURL(ctx context.Context, u *url.URL) (receiver.Store, error) {
	if err := receiver.CheckQuery(u, "synchronous"); err != nil {
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
	var o Options
	switch v := u.Query().Get("synchronous"); v {
	case "", "full":
	case "normal":
		o.RelaxedSync = true
	default:
		return nil, fmt.Errorf("synchronous=%q: want full (the default) or normal", v)
	}
	return Open(ctx, path, &o)
}

// Options configure Open. A nil *Options is the zero value, which is ready to use.
type Options struct {
	// BusyTimeout bounds how long a write waits for another process's. Default 10s.
	BusyTimeout time.Duration
	// RelaxedSync sets synchronous=NORMAL instead of FULL: cheaper writes, but a power
	// loss may lose the last ones (a stored response, or a claim, forgotten: a retry
	// then executes again). A process crash loses nothing either way.
	RelaxedSync bool
	// Clock replaces the host's clock, for tests. Default time.Now.
	Clock func() time.Time
}

// Store is a receiver.Store in a SQLite file. It is safe for concurrent use.
type Store struct {
	driver.Transitions // Renew, Complete and Release, over update
	db                 *sql.DB
	path               string
	clock              func() time.Time
	// wmu serialises this process's write transactions: SQLite has one writer at a time,
	// and queueing here is cheaper than spinning on the busy handler.
	wmu sync.Mutex
}

var _ receiver.Store = (*Store)(nil)

// Open opens (creating if needed) the SQLite file at path and creates the store's tables
// in it when missing.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: path %q: %w", path, err)
	}
	syncPragma := "synchronous(FULL)"
	if o.RelaxedSync {
		syncPragma = "synchronous(NORMAL)"
	}
	dsn := (&url.URL{Scheme: "file", Path: abs, RawQuery: url.Values{
		"_pragma": {fmt.Sprintf("busy_timeout(%d)", cmp.Or(o.BusyTimeout, 10*time.Second).Milliseconds()), "journal_mode(WAL)", syncPragma},
		"_txlock": {"immediate"},
	}.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(0)
	s := &Store{db: db, path: abs, clock: o.Clock}
	s.Transitions = driver.Transitions{Update: s.update}
	if s.clock == nil {
		s.clock = time.Now
	}
	if err := s.EnsureSchema(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Path returns the absolute path of the store's file.
func (s *Store) Path() string { return s.path }

// Schema is the DDL of the store's tables and indexes; EnsureSchema applies it.
const Schema = `
CREATE TABLE IF NOT EXISTS receiver_keys (
	key TEXT PRIMARY KEY,
	fingerprint TEXT NOT NULL,
	state TEXT NOT NULL,
	token TEXT NOT NULL,
	attempt INTEGER NOT NULL,
	lease_until INTEGER NOT NULL,
	status INTEGER NOT NULL,
	header BLOB,
	body BLOB,
	body_omitted INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	expire_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS receiver_keys_by_expire_at ON receiver_keys (expire_at);
CREATE TABLE IF NOT EXISTS receiver_fences (
	run TEXT PRIMARY KEY,
	attempt INTEGER NOT NULL,
	expire_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS receiver_fences_by_expire_at ON receiver_fences (expire_at);
`

// EnsureSchema creates the store's tables and indexes when missing (Open does).
func (s *Store) EnsureSchema(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, Schema); err != nil {
		return fmt.Errorf("sqlite: create the receiver's tables in %s: %w", s.path, err)
	}
	return nil
}

// Times are stored as Unix microseconds, 0 for none.
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

const keyColumns = `k.key, k.fingerprint, k.state, k.token, k.attempt, k.lease_until, k.status, k.header, k.body, k.body_omitted, k.created_at, k.updated_at, k.expire_at`

// The decision's reads, in one statement (one snapshot): the run's fence and the key's
// record, either of which may be absent.
const readSQL = `SELECT f.attempt, f.expire_at, ` + keyColumns + `
	FROM (SELECT 1) LEFT JOIN receiver_fences f ON f.run = ?1 LEFT JOIN receiver_keys k ON k.key = ?2`

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// read returns the run's live fence and the key's record (nil when absent).
func (s *Store) read(ctx context.Context, q querier, run, key string, now time.Time) (int64, *receiver.Record, error) {
	var (
		fAttempt, fExpire                             sql.NullInt64
		k, fp, state, token                           sql.NullString
		attempt, lease, status, omitted, ca, ua, expA sql.NullInt64
		header, body                                  []byte
	)
	err := q.QueryRowContext(ctx, readSQL, run, key).Scan(&fAttempt, &fExpire,
		&k, &fp, &state, &token, &attempt, &lease, &status, &header, &body, &omitted, &ca, &ua, &expA)
	if err != nil {
		return 0, nil, fmt.Errorf("sqlite: read key %s: %w", key, err)
	}
	var fence int64
	if fAttempt.Valid {
		fence = driver.LiveFence(fAttempt.Int64, fromMicros(fExpire.Int64), now)
	}
	if !k.Valid {
		return fence, nil, nil
	}
	r := &receiver.Record{
		Key: k.String, Fingerprint: fp.String, State: receiver.State(state.String), Token: token.String, Attempt: attempt.Int64,
		LeaseUntil: fromMicros(lease.Int64), CreatedAt: fromMicros(ca.Int64), UpdatedAt: fromMicros(ua.Int64), ExpireAt: fromMicros(expA.Int64),
	}
	if r.State == receiver.StateCompleted {
		h, err := driver.DecodeHeader(header)
		if err != nil {
			return 0, nil, fmt.Errorf("sqlite: key %s: %w", key, err)
		}
		r.Response = &receiver.Response{Status: int(status.Int64), Header: h, Body: body, BodyOmitted: omitted.Int64 != 0}
	}
	return fence, r, nil
}

// write runs fn in an immediate transaction, one at a time in this process.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

const putSQL = `INSERT INTO receiver_keys (key, fingerprint, state, token, attempt, lease_until, status, header, body, body_omitted, created_at, updated_at, expire_at)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
	ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, state = excluded.state, token = excluded.token,
		attempt = excluded.attempt, lease_until = excluded.lease_until, status = excluded.status, header = excluded.header,
		body = excluded.body, body_omitted = excluded.body_omitted, created_at = excluded.created_at,
		updated_at = excluded.updated_at, expire_at = excluded.expire_at`

func put(ctx context.Context, tx *sql.Tx, r *receiver.Record) error {
	var (
		status  int
		header  []byte
		body    []byte
		omitted int
	)
	if resp := r.Response; resp != nil {
		status, header, body = resp.Status, driver.EncodeHeader(resp.Header), resp.Body
		if body == nil {
			body = []byte{}
		}
		if resp.BodyOmitted {
			omitted = 1
		}
	}
	_, err := tx.ExecContext(ctx, putSQL, r.Key, r.Fingerprint, string(r.State), r.Token, r.Attempt, micros(r.LeaseUntil),
		status, header, body, omitted, micros(r.CreatedAt), micros(r.UpdatedAt), micros(r.ExpireAt))
	if err != nil {
		return fmt.Errorf("sqlite: write key %s: %w", r.Key, err)
	}
	return nil
}

// Claim implements receiver.Store: a read that decides, and only when the decision
// writes, an immediate transaction that reads and decides again and writes.
func (s *Store) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	var run string
	if p.Fence != nil {
		run = p.Fence.Run
	}
	now := s.clock()
	fence, cur, err := s.read(ctx, s.db, run, p.Key, now)
	if err != nil {
		return nil, err
	}
	d := driver.DecideClaim(now, cur, fence, p)
	if !d.Writes() {
		return d.Claim, nil
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		fence, cur, err := s.read(ctx, tx, run, p.Key, now)
		if err != nil {
			return err
		}
		d = driver.DecideClaim(now, cur, fence, p)
		if d.Fence > 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO receiver_fences (run, attempt, expire_at) VALUES (?1, ?2, ?3)
				ON CONFLICT (run) DO UPDATE SET attempt = excluded.attempt, expire_at = excluded.expire_at`,
				run, d.Fence, micros(d.FenceExpireAt)); err != nil {
				return fmt.Errorf("sqlite: write the fence of run %s: %w", run, err)
			}
		}
		if d.Put != nil {
			return put(ctx, tx, d.Put)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d.Claim, nil
}

// update applies apply to the key's record in an immediate transaction: it writes the
// record apply returns, or deletes the key when del.
func (s *Store) update(ctx context.Context, key string, apply driver.Apply) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		now := s.clock()
		_, cur, err := s.read(ctx, tx, "", key, now)
		if err != nil {
			return err
		}
		next, del, err := apply(now, cur)
		switch {
		case err != nil:
			return err
		case del:
			if _, err := tx.ExecContext(ctx, `DELETE FROM receiver_keys WHERE key = ?1`, key); err != nil {
				return fmt.Errorf("sqlite: delete key %s: %w", key, err)
			}
		case next != nil:
			return put(ctx, tx, next)
		}
		return nil
	})
}

// Get implements receiver.Store.
func (s *Store) Get(ctx context.Context, key string) (*receiver.Record, error) {
	_, r, err := s.read(ctx, s.db, "", key, s.clock())
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: %s", receiver.ErrNotFound, key)
	}
	return r, nil
}

// Sweep implements receiver.Store.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := micros(s.clock())
		for _, q := range []string{
			`DELETE FROM receiver_keys WHERE key IN (SELECT key FROM receiver_keys WHERE expire_at <= ?1 LIMIT ?2)`,
			`DELETE FROM receiver_fences WHERE run IN (SELECT run FROM receiver_fences WHERE expire_at <= ?1 LIMIT ?2)`,
		} {
			res, err := tx.ExecContext(ctx, q, now, limit)
			if err != nil {
				return fmt.Errorf("sqlite: sweep: %w", err)
			}
			m, _ := res.RowsAffected()
			n += m
		}
		return nil
	})
	return int(n), err
}

// Close closes the store's database.
func (s *Store) Close() error { return s.db.Close() }
