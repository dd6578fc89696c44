// Package postgres is a receiver.Store in PostgreSQL (pgx): the store of downstream
// services that already run PostgreSQL or Cloud SQL, shared by every instance of a
// service.
//
// A claim is one round trip, the rules in a PL/pgSQL function (receiver_claim_v1):
// a replay, a key in flight or a refusal is a read that locks nothing; a new key one
// insert; a raised fence one more. Renew, Complete and Release are one statement each.
// Leases and expiry are judged by the database's clock, never a caller's. Nothing
// deletes an expired record by itself: Receiver.Sweep does.
//
// The tables (receiver_keys, receiver_fences) and the function live in Options.Schema
// (the connection's current schema by default), created when the store opens unless
// Options.NoMigrate. Open it by URL with receiver.Open("postgres://…?schema=receiver");
// the parameters schema and migrate are the store's, every other one is pgx's.
package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runonce/runonce/pkg/receiver"
	"github.com/runonce/runonce/pkg/receiver/driver"
)

// The URL schemes this store registers.
const (
	Scheme      = "postgres"
	SchemeAlias = "postgresql"
)

func init() {
	receiver.Register(Scheme, receiver.OpenerFunc(openURL))
	receiver.Register(SchemeAlias, receiver.OpenerFunc(openURL))
}

func openURL(ctx context.Context, u *url.URL) (receiver.Store, error) {
	var o Options
	q := u.Query()
	if v := q.Get("schema"); v != "" {
		o.Schema = v
	}
	switch v := q.Get("migrate"); v {
	case "", "true":
	case "false":
		o.NoMigrate = true
	default:
		return nil, fmt.Errorf("migrate=%q: want true or false", v)
	}
	q.Del("schema")
	q.Del("migrate")
	c := *u
	c.RawQuery = q.Encode()
	return Open(ctx, c.String(), &o)
}

// Options configure a store. A nil *Options is the zero value, which is ready to use.
type Options struct {
	// Schema holds the store's tables and function, created if missing. Empty: the
	// connection's current schema (usually public).
	Schema string
	// NoMigrate opens without creating the tables (a pipeline applies EnsureSchema).
	NoMigrate bool
	// MaxConns is the most connections Open's pool holds when its DSN does not set
	// pool_max_conns. Default 32: a claim is one short statement, and requests wait for
	// the pool rather than the database otherwise.
	MaxConns int32
}

// Store is a receiver.Store in PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	ownsPool bool
	schema   string
	q        queries
}

var _ receiver.Store = (*Store)(nil)

// Open connects to the database dsn names (a postgres:// URL or a key=value string, as
// pgx takes it) and returns a store that owns its pool.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = cmp.Or(o.MaxConns, 32)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s, err := New(ctx, pool, &o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// New returns a store over pool, creating its tables first unless opts.NoMigrate. The
// pool stays the caller's: Close does not close it.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: New needs a pool")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	schema := o.Schema
	if schema == "" {
		if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return nil, fmt.Errorf("postgres: read the current schema: %w", err)
		}
	}
	if !o.NoMigrate {
		if err := EnsureSchema(ctx, pool, schema); err != nil {
			return nil, err
		}
	}
	return &Store{pool: pool, schema: schema, q: buildQueries(schema)}, nil
}

// Schema returns the schema that holds the store's tables.
func (s *Store) Schema() string { return s.schema }

type queries struct {
	claim, renew, complete, release, get, sweepKeys, sweepFences string
}

const keyColumns = `key, fingerprint, state, token, attempt, lease_until, status, header, body, body_omitted, created_at, updated_at, expire_at`

func buildQueries(schema string) queries {
	s := pgx.Identifier{schema}.Sanitize()
	keys, fences := s+".receiver_keys", s+".receiver_fences"
	rec := func(v string) string {
		var cols []string
		for _, c := range strings.Split(keyColumns, ", ") {
			cols = append(cols, "("+v+")."+c)
		}
		return strings.Join(cols, ", ")
	}
	return queries{
		claim: `SELECT c.o_outcome, c.o_fence, c.o_lease_left_us, ` + rec("c.o_rec") + `
			FROM ` + s + `.receiver_claim_v1($1, $2, $3, $4, $5, $6, $7) c`,
		renew: `UPDATE ` + keys + ` SET lease_until = date_trunc('microseconds', now()) + $3 * interval '1 microsecond',
				updated_at = date_trunc('microseconds', now()),
				expire_at = date_trunc('microseconds', now()) + ($3 + $4) * interval '1 microsecond'
			WHERE key = $1 AND token = $2 AND state = 'in_flight'`,
		// One round trip: the update, and what the key was when it did nothing (the
		// subquery reads the snapshot from before the update).
		complete: `WITH u AS (
				UPDATE ` + keys + ` SET state = 'completed', lease_until = NULL, status = $3, header = $4, body = $5,
					body_omitted = $6, updated_at = date_trunc('microseconds', now()),
					expire_at = date_trunc('microseconds', now()) + $7 * interval '1 microsecond'
				WHERE key = $1 AND token = $2 AND state = 'in_flight' RETURNING 1)
			SELECT (SELECT count(*) FROM u),
				COALESCE((SELECT state = 'completed' AND token = $2 FROM ` + keys + ` WHERE key = $1), false)`,
		release: `WITH d AS (DELETE FROM ` + keys + ` WHERE key = $1 AND token = $2 AND state = 'in_flight' RETURNING 1)
			SELECT (SELECT count(*) FROM d), EXISTS (SELECT 1 FROM ` + keys + ` WHERE key = $1)`,
		get: `SELECT ` + keyColumns + ` FROM ` + keys + ` WHERE key = $1`,
		sweepKeys: `DELETE FROM ` + keys + ` WHERE key IN (SELECT key FROM ` + keys + `
			WHERE expire_at <= now() ORDER BY expire_at LIMIT $1 FOR UPDATE SKIP LOCKED)`,
		sweepFences: `DELETE FROM ` + fences + ` WHERE run IN (SELECT run FROM ` + fences + `
			WHERE expire_at <= now() ORDER BY expire_at LIMIT $1 FOR UPDATE SKIP LOCKED)`,
	}
}

// row is a key's record as scanned: every column nullable (a claim without one).
type row struct {
	key, fingerprint, state, token *string
	attempt                        *int64
	leaseUntil                     *time.Time
	status                         *int32
	header, body                   []byte
	omitted                        *bool
	createdAt, updatedAt, expireAt *time.Time
}

func (r *row) dest() []any {
	return []any{&r.key, &r.fingerprint, &r.state, &r.token, &r.attempt, &r.leaseUntil, &r.status, &r.header, &r.body,
		&r.omitted, &r.createdAt, &r.updatedAt, &r.expireAt}
}

func (r *row) record() (*receiver.Record, error) {
	if r.key == nil {
		return nil, nil
	}
	rec := &receiver.Record{
		Key: *r.key, Fingerprint: *r.fingerprint, State: receiver.State(*r.state), Token: *r.token, Attempt: *r.attempt,
		CreatedAt: r.createdAt.UTC(), UpdatedAt: r.updatedAt.UTC(), ExpireAt: r.expireAt.UTC(),
	}
	if r.leaseUntil != nil {
		rec.LeaseUntil = r.leaseUntil.UTC()
	}
	if rec.State == receiver.StateCompleted {
		h, err := driver.DecodeHeader(r.header)
		if err != nil {
			return nil, fmt.Errorf("postgres: key %s: %w", rec.Key, err)
		}
		body := r.body
		if body == nil {
			body = []byte{}
		}
		rec.Response = &receiver.Response{Status: int(*r.status), Header: h, Body: body, BodyOmitted: r.omitted != nil && *r.omitted}
	}
	return rec, nil
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Claim implements receiver.Store.
func (s *Store) Claim(ctx context.Context, p *receiver.ClaimParams) (*receiver.Claim, error) {
	if err := driver.ValidateClaim(p); err != nil {
		return nil, err
	}
	var (
		run     *string
		attempt *int64
	)
	if p.Fence != nil {
		run, attempt = &p.Fence.Run, &p.Fence.Attempt
	}
	var (
		outcome   string
		fence     *int64
		leaseLeft *int64
		r         row
	)
	err := s.pool.QueryRow(ctx, s.q.claim, nullable(p.Key), p.Fingerprint, p.Token, p.Lease.Microseconds(), p.Retention.Microseconds(), run, attempt).
		Scan(append([]any{&outcome, &fence, &leaseLeft}, r.dest()...)...)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim key %s: %w", p.Key, err)
	}
	rec, err := r.record()
	if err != nil {
		return nil, err
	}
	c := &receiver.Claim{Outcome: receiver.Outcome(outcome), Record: rec}
	if fence != nil && c.Outcome == receiver.OutcomeFenced {
		c.Attempt = *fence
	}
	if leaseLeft != nil {
		c.LeaseLeft = time.Duration(*leaseLeft) * time.Microsecond
	}
	return c, nil
}

// Renew implements receiver.Store.
func (s *Store) Renew(ctx context.Context, p *receiver.RenewParams) error {
	if err := driver.ValidateRenew(p); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.q.renew, p.Key, p.Token, p.Lease.Microseconds(), p.Retention.Microseconds())
	if err != nil {
		return fmt.Errorf("postgres: renew key %s: %w", p.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: key %s is not in flight under this token", receiver.ErrLeaseLost, p.Key)
	}
	return nil
}

// Complete implements receiver.Store.
func (s *Store) Complete(ctx context.Context, p *receiver.CompleteParams) error {
	if err := driver.ValidateComplete(p); err != nil {
		return err
	}
	body := p.Response.Body
	if body == nil {
		body = []byte{}
	}
	var (
		n    int64
		done bool
	)
	err := s.pool.QueryRow(ctx, s.q.complete, p.Key, p.Token, p.Response.Status, driver.EncodeHeader(p.Response.Header), body,
		p.Response.BodyOmitted, p.Retention.Microseconds()).Scan(&n, &done)
	switch {
	case err != nil:
		return fmt.Errorf("postgres: complete key %s: %w", p.Key, err)
	case n == 0 && !done:
		return fmt.Errorf("%w: key %s is not in flight under this token", receiver.ErrLeaseLost, p.Key)
	}
	return nil
}

// Release implements receiver.Store.
func (s *Store) Release(ctx context.Context, p *receiver.ReleaseParams) error {
	if err := driver.ValidateRelease(p); err != nil {
		return err
	}
	var (
		n      int64
		exists bool
	)
	if err := s.pool.QueryRow(ctx, s.q.release, p.Key, p.Token).Scan(&n, &exists); err != nil {
		return fmt.Errorf("postgres: release key %s: %w", p.Key, err)
	}
	if n == 0 && exists {
		return fmt.Errorf("%w: key %s is held by another token or completed", receiver.ErrLeaseLost, p.Key)
	}
	return nil
}

// Get implements receiver.Store.
func (s *Store) Get(ctx context.Context, key string) (*receiver.Record, error) {
	var r row
	err := s.pool.QueryRow(ctx, s.q.get, key).Scan(r.dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", receiver.ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get key %s: %w", key, err)
	}
	return r.record()
}

// Sweep implements receiver.Store.
func (s *Store) Sweep(ctx context.Context, limit int) (int, error) {
	n := 0
	for _, q := range []string{s.q.sweepKeys, s.q.sweepFences} {
		tag, err := s.pool.Exec(ctx, q, limit)
		if err != nil {
			return n, fmt.Errorf("postgres: sweep: %w", err)
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}

// Close closes the pool when Open made it.
func (s *Store) Close() error {
	if s.ownsPool {
		s.pool.Close()
	}
	return nil
}
